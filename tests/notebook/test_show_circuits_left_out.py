"""The notebook's show_circuits says what the maps leave out in the words the app's Circuits page uses (one
function, `mha_viz.analysis.circuits.left_out_words`): the norms, biases and MLPs every model's circuits leave
out, then what this model's attention does beyond its weights per head, as it declares it (OLMo's clip_qkv clamp
here; tests/app/test_circuits_left_out.py checks the page)."""
from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

import pytest

import mha_viz
from mha_viz.analysis.circuits import left_out_words
from mha_viz.app.markdown import md_safe
from mha_viz.app.views.circuits import left_out_words as page_words
from tests.models.hf import matrix
from tests.models.hf.architectures import BY_NAME, build

NS = "{http://www.w3.org/2000/svg}"


def _circuits(folder):
    with matrix.offline():
        return mha_viz.circuits(mha_viz.load_model(str(folder)))


@pytest.fixture(scope="module")
def olmo(tmp_path_factory):
    with matrix.offline():
        return _circuits(build(BY_NAME["OLMo"], tmp_path_factory.mktemp("olmo") / "OLMo"))  # clip_qkv=0.05


def _note(widget) -> str:
    """The picture's left-out note, its wrapped lines joined again."""
    doc = ET.fromstring(widget.picture)
    return " ".join(t.text for t in doc.iter(f"{NS}text") if t.get("class") == "mhm-left-out")


def test_show_circuits_says_the_clip_in_the_pages_words(olmo):
    assert olmo.left_out and olmo.left_out[0].startswith("clip_qkv")
    widget = mha_viz.show_circuits(olmo, display=False)
    note = _note(widget)
    assert note == left_out_words(olmo)  # the shared words, whole
    assert note.startswith("The norms between heads are left out") and "as are biases and MLPs" in note
    assert "clip_qkv: queries, keys and values are clamped to ±0.05 after the projection" in note
    assert page_words(olmo) == md_safe(note)  # the app's caption is the same words, escaped for Markdown
    widget.mode, widget.selected = "q", (1, 0)  # every picture the page is sent says it
    assert _note(widget) == note and widget.to_svg() == widget.picture


def test_a_model_that_declares_nothing_gets_the_common_words_only(tmp_path):
    unclipped = _circuits(build(dataclasses.replace(BY_NAME["OLMo"], args={**BY_NAME["OLMo"].args, "clip_qkv": None}),
                                tmp_path / "OLMo"))
    assert unclipped.left_out == ()
    note = _note(mha_viz.show_circuits(unclipped, display=False))
    assert note == left_out_words(None) and "This model's attention also" not in note
    tiny = mha_viz.circuits(mha_viz.load_model("tiny"))
    assert _note(mha_viz.show_circuits(tiny, display=False)) == left_out_words(None)
