"""Ablation effects' head importance on an encoder-decoder folder, through the page (AppTest): each head of every
kind switched off alone on top of the heads already off, one map per kind, every number drawn equal to the KL of
`Model.run`'s predictions computed here on its own; the one-stack gradient estimate says why it is not drawn."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import heatmap_z, seq2seq_page

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SOURCE = "the cat sat on the mat"
TARGET = "a dog ran in the park"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    from tests.models.hf.test_seq2seq import seq2seq_folder
    from tests.models.hf.test_seq2seq_patching import strong_config

    return seq2seq_folder(tmp_path_factory.mktemp("bart-importance"), strong_config("bart"))


def _maps(at) -> dict[str, torch.Tensor]:
    """Each kind's map as drawn: {kind: (layers, H)}."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        title = spec["layout"]["title"]["text"]
        if title.endswith(" alone") and ":" in title:
            out[title.split(":")[0]] = torch.as_tensor(heatmap_z(spec["data"][0]).astype("float64"))
    return out


def test_every_kind_is_measured_and_equals_single_runs(folder):
    from mha_viz.analysis import effects
    from mha_viz.models.hf.loading import load_custom

    model = load_custom(str(folder))
    n_enc, n_dec = model.n_layers, model.decoder_layers()
    at = seq2seq_page(folder, SOURCE, TARGET)
    at.session_state["view"] = "Ablation effects"
    at.run()
    assert not at.exception, at.exception
    assert any("No instant estimate here" in c.value for c in at.caption), [c.value for c in at.caption]
    at.button(key="imp_kinds_btn").click().run()
    assert not at.exception, at.exception
    maps = _maps(at)
    assert {k: tuple(v.shape) for k, v in maps.items()} == {"Encoder": (n_enc, 4), "Decoder": (n_dec, 4),
                                                             "Cross": (n_dec, 4)}
    base = model.run(SOURCE, target=TARGET).logits  # (T, V)
    for kind, args, (row, head) in (("Encoder", dict(ablate={(1, 2)}), (1, 2)),
                                    ("Decoder", dict(ablate={(n_enc + 2, 1)}), (2, 1)),
                                    ("Cross", dict(ablate_cross={(0, 3)}), (0, 3))):
        want = effects.next_token_kl(base, model.run(SOURCE, target=TARGET, **args).logits, position=-1)
        assert float(maps[kind][row, head]) == pytest.approx(want, abs=1e-4), kind
    assert max(float(m.max()) for m in maps.values()) > 1e-3  # the map measured something
