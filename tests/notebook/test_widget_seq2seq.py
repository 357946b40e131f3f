"""The notebook widget on an encoder-decoder model: `show(model, source, target=...)` draws the Encoder, Decoder or
Cross attention (`kind`), cross heads switched from the grid go to `ablate_cross`, the readout follows the decoder's
prediction along the target, and misuse on a one-text model says why."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("anywidget")

import mha_viz  # noqa: E402
from mha_viz.contract import InputError  # noqa: E402
from mha_viz.models.hf.loading import load_custom  # noqa: E402
from tests.models.hf.test_seq2seq import L_DEC, L_ENC, SOURCE, H, seq2seq_folder  # noqa: E402

TARGET = "a dog ran"  # shorter than the source: cross-attention is not square


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_custom(str(seq2seq_folder(tmp_path_factory.mktemp("bart"))))


def test_three_kinds_draw_their_own_shapes_and_labels(model):
    w = mha_viz.show(model, SOURCE, target=TARGET, display=False)
    run = w.run
    S, T = len(run.tokens), len(run.target_tokens)
    assert S != T  # the source and the target differ in length, so a square grid could not draw cross-attention
    assert w.kind == "Encoder" and (w.grid["L"], w.grid["T"]) == (L_ENC, S) and "Q" not in w.grid
    w.kind = "Decoder"
    assert (w.grid["L"], w.grid["T"]) == (L_DEC, T) and w.grid["kind"] == "Decoder"
    w.kind = "Cross"
    g = w.grid
    assert (g["L"], g["Q"], g["T"]) == (L_DEC, T, S)
    assert len(g["qtokens"]) == T and len(g["tokens"]) == S  # rows: target tokens; columns: source tokens
    codes = w._layer_codes(1)  # (H, T, S), the cross-attention of decoder layer 1, scaled per head
    want = run.cross_attentions[1]  # (H, T, S)
    scale = want.reshape(H, -1).amax(1)[:, None, None]
    assert codes.shape == (H, T, S)
    assert torch.allclose(torch.from_numpy(codes.copy()).float() / 255, want / scale, atol=1 / 255)


def test_a_cross_switch_in_the_grid_ablates_that_cross_head(model):
    w = mha_viz.show(model, SOURCE, target=TARGET, kind="Cross", display=False)
    w.toggle(1, 2)  # the grid's layer 1 of Cross: decoder layer 1's cross-attention head 2
    assert w.cross_off == frozenset({(1, 2)}) and w.heads_off == frozenset()
    assert w.grid["off"] == [[1, 2]]
    want = model.run(SOURCE, target=TARGET, ablate_cross={(1, 2)})
    assert torch.equal(w.run.logits, want.logits)
    assert w.readout["off"] == 1
    along = w.readout["along"]
    assert [p["token"] for p in along] == w.base.target_tokens  # one line per target position
    assert any(p["kl"] > 0 for p in along)
    w.kind = "Decoder"
    assert w.grid["off"] == []  # the cross head is not a decoder self-attention head
    w.toggle(0, 3)  # decoder layer 0 is layer L_ENC in the model's ablate numbering
    assert w.heads_off == frozenset({(L_ENC, 3)}) and w.cross_off == frozenset({(1, 2)})
    w.set_heads_off(())
    assert w.cross_off == frozenset({(1, 2)})  # None keeps the cross heads
    w.set_heads_off((), cross=())
    assert w.run is w.base


def test_show_takes_cross_off_and_greedy_without_target(model):
    w = mha_viz.show(model, SOURCE, kind="Cross", cross_off={(0, 0)}, display=False)
    assert w.cross_off == frozenset({(0, 0)})
    assert w.base.target_ids == model.greedy_target(model.encode_text(SOURCE).ids)


def test_misuse_says_why(model):
    with pytest.raises(InputError, match="Encoder, Decoder, Cross"):
        mha_viz.show(model, SOURCE, kind="sideways", display=False)
    with pytest.raises(InputError, match="decoder accepts at most"):
        mha_viz.show(model, SOURCE, target=" ".join([TARGET] * 10), display=False)
    tiny = mha_viz.load_model("tiny")
    for kwargs in ({"target": TARGET}, {"kind": "Cross"}, {"cross_off": {(0, 0)}}):
        with pytest.raises(InputError, match="no cross-attention"):
            mha_viz.show(tiny, "the cat sat on the mat", display=False, **kwargs)


def test_the_saved_picture_of_each_kind(model):
    """to_svg (also the picture a notebook saved without its kernel shows) draws the kind shown; a cross heatmap
    is as much taller than wide as the target has fewer tokens than the source."""
    import re

    w = mha_viz.show(model, SOURCE, target=TARGET, display=False)
    S, T = len(w.run.tokens), len(w.run.target_tokens)
    for kind, (height, title) in {"Encoder": (160, "encoder layer 0"), "Decoder": (160, "decoder layer 0"),
                                  "Cross": (round(160 * T / S), "cross layer 0")}.items():
        w.kind = kind
        svg = w.to_svg()
        assert title in svg
        heights = {int(h) for h in re.findall(r'<image [^>]*height="(\d+)"', svg)}
        assert heights == {height}, (kind, heights)
    assert "rows (queries):" in svg


def test_readings_follow_the_kind_as_on_the_page(model):
    """The decoder's heads carry the readings of the decoder's own attention (web/kinds.one_stack, as the app's
    Decoder grid), the encoder's of the encoder's; cross-attention heads carry none."""
    from mha_viz.notebook.widget import badge_labels
    from mha_viz.web import kinds

    w = mha_viz.show(model, SOURCE, target=TARGET, kind="Decoder", display=False)
    want = badge_labels(*kinds.one_stack(w.run, "Decoder"))
    assert len(want) == L_DEC * H and w._badges == want
    w.kind = "Encoder"
    assert w._badges == badge_labels(w.run, False) and w._badges != want
    w.kind = "Cross"
    assert w._badges == {}


def test_show_circuits_of_each_kind_offers_what_was_measured_and_says_why(model):
    """`show_circuits` on each kind's circuits: the encoder's and decoder's offer Q, K and V composition; the
    cross-attention's offers Q only (its keys and values read the encoder's output), and its picture says why."""
    import xml.etree.ElementTree as ET

    for kind, modes in (("Encoder", ["q", "k", "v"]), ("Decoder", ["q", "k", "v"]), ("Cross", ["q"])):
        c = mha_viz.circuits(model, kind=kind)
        w = mha_viz.show_circuits(c, display=False)
        assert [value for value, _ in w.controls[0]["options"]] == modes and w.mode in modes, kind
        doc = ET.fromstring(w.picture)
        note = " ".join(t.text for t in doc.iter("{http://www.w3.org/2000/svg}text")
                        if t.get("class") == "mhm-left-out")
        assert (c.composition_note in note) if kind == "Cross" else not c.composition_note, kind
    with pytest.raises(InputError, match="composition"):
        mha_viz.show_circuits(mha_viz.circuits(model, kind="Cross"), modes=("k",), display=False)


def test_kinds_are_read_in_any_case_and_a_wrong_one_names_the_valid_kinds(model):
    """`kind="cross"` is the Cross grid, in show, on the widget and in circuits; a kind that is none says which
    kinds there are, not that the model lacks cross-attention."""
    w = mha_viz.show(model, SOURCE, target=TARGET, kind="cross", display=False)
    assert w.kind == "Cross" and "Q" in w.grid
    w.kind = "DECODER"
    assert w.kind == "Decoder" and w.grid["kind"] == "Decoder"
    assert mha_viz.circuits(model, kind="cross") is mha_viz.circuits(model, kind="Cross")
    with pytest.raises(InputError, match="Encoder, Decoder, Cross") as err:
        mha_viz.show(model, SOURCE, target=TARGET, kind="sideways", display=False)
    assert "one self-attention stack" not in str(err.value)
