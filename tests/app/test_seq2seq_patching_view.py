"""The Patching view for an encoder-decoder folder, through the page (AppTest): the second text is a second source
read on the page's target, the map patches heads of every kind (encoder, decoder, cross-attention) one patched run
per head, and every number drawn equals `Model.run` with that head patched, computed here on its own. What does not
hold for two sources (attribution estimate, direct effects) is one sentence on the page, not a traceback."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import heatmap_z, seq2seq_page

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SOURCE = "the cat sat on the mat"
SECOND = "the bird flew over the house"  # as many tokens as SOURCE: encoder heads line up too
TARGET = "a dog ran in the park"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    from tests.models.hf.test_seq2seq import seq2seq_folder
    from tests.models.hf.test_seq2seq_patching import strong_config

    return seq2seq_folder(tmp_path_factory.mktemp("bart-patching"), strong_config("bart"))


def _page(folder: Path, target: str = TARGET):
    at = seq2seq_page(folder, SOURCE, target)
    at.session_state["view"] = "Patching"
    at.run()
    assert not at.exception, at.exception
    return at


def _second(at, text: str):
    [box] = [t for t in at.text_input if t.key.startswith("patch_source")]
    box.input(text).run()
    assert not at.exception, at.exception


def _answer(at):
    """The random model's top predictions are ids past the tiny tokenizer's 18 words: the answer is typed."""
    for label, word in (("Answer token", "cat"), ("Against", "bird")):
        next(t for t in at.text_input if t.label == label).input(word).run()
        assert not at.exception, at.exception


def _metric(at, start: str) -> float:
    return float(next(m.value for m in at.metric if m.label.startswith(start)))


def _maps(at) -> dict[str, torch.Tensor]:
    """Each kind's map as drawn: {kind: (layers, H)}."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        title = spec["layout"]["title"]["text"]
        if title.endswith(": exact"):
            out[title.split(":")[0]] = torch.as_tensor(heatmap_z(spec["data"][0]).astype("float64"))
    return out


def test_the_map_of_every_kind_equals_patched_runs(folder):
    from mha_viz.analysis.patching import Metric
    from mha_viz.models.hf.loading import load_custom

    model = load_custom(str(folder))
    at = _page(folder)
    _second(at, SECOND)
    _answer(at)
    base, other = model.run(SOURCE, target=TARGET), model.run(SECOND, target=TARGET)
    metric = Metric("logit_diff", position=len(base.target_ids) - 1, answer=model.token_id("cat"),
                    other=model.token_id("bird"))
    text_value, source_value = (float(metric(None, r.logits)) for r in (base, other))
    assert _metric(at, "Metric on the first source") == pytest.approx(text_value, abs=1e-3)
    assert _metric(at, "Metric on the second source") == pytest.approx(source_value, abs=1e-3)
    assert any("No direct effects" in c.value for c in at.caption)  # said, not a traceback
    at.button(key="patch_exact_btn").click().run()
    assert not at.exception, at.exception
    maps = _maps(at)
    n_enc, n_dec = model.n_layers, model.decoder_layers()
    assert {k: tuple(v.shape) for k, v in maps.items()} == {"Encoder": (n_enc, 4), "Decoder": (n_dec, 4),
                                                             "Cross": (n_dec, 4)}
    gap = source_value - text_value
    for kind, args in (("Encoder", dict(patch={(1, 2)})), ("Decoder", dict(patch={(n_enc + 2, 1)})),
                       ("Cross", dict(patch_cross={(0, 3)}))):
        run = model.run(SOURCE, target=TARGET, source=SECOND, **args)
        want = (float(metric(None, run.logits)) - text_value) / gap
        layer, head = next(iter(args.get("patch", args.get("patch_cross"))))
        row = layer - n_enc if kind == "Decoder" else layer
        assert float(maps[kind][row, head]) == pytest.approx(want, abs=1e-4), kind
    assert max(float(m.abs().max()) for m in maps.values()) > 0.01  # the map measured something
    # A picked cross head, patched through the page, moves the metric as model.run says.
    key = next(m.key for m in at.multiselect if m.key.startswith("patch_pick"))
    at.multiselect(key=key).set_value(["Cross L0 H3"]).run()
    assert not at.exception, at.exception
    run = model.run(SOURCE, target=TARGET, source=SECOND, patch_cross={(0, 3)})
    assert _metric(at, "Metric with 1 head(s) patched") == pytest.approx(float(metric(None, run.logits)), abs=1e-3)


def test_sources_of_other_lengths_patch_decoder_and_cross_heads_only(folder):
    at = _page(folder)
    _second(at, "the cat sat")
    _answer(at)
    assert any("encoder heads are not patched here" in c.value for c in at.caption)
    key = next(m.key for m in at.multiselect if m.key.startswith("patch_pick"))
    options = at.multiselect(key=key).options
    assert "Decoder L0 H0" in options and "Cross L2 H3" in options
    assert not [o for o in options if o.startswith("Encoder")]
    button = at.button(key="patch_exact_btn")
    assert "(24 heads" in button.label  # decoder and cross-attention heads: 2 kinds x 3 layers x 4 heads
    button.click().run()
    assert not at.exception, at.exception
    maps = _maps(at)
    assert torch.isnan(maps["Encoder"]).all() and not torch.isnan(maps["Cross"]).any()


def test_an_empty_target_says_patching_needs_one(folder):
    at = _page(folder, target="")
    _second(at, SECOND)
    assert any("needs a target" in i.value for i in at.info), [i.value for i in at.info]
