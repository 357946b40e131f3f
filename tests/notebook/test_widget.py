"""The notebook widget's Python side, without a browser: what `mha_viz.show` sends to the page (the comm messages,
recorded where ipywidgets hands them to the kernel), what the page's messages do (a head's switch, reset, SVG), and
what Python code reads back (`heads_off`, `run`, `readout`). Every expected value is recomputed here through the
model's own `run` and the analysis functions, not read from the widget."""
from __future__ import annotations

import ast
import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

import mha_viz
from mha_viz import analysis, measures
from mha_viz.contract import InputError
from mha_viz.notebook import svg as svg_mod
from mha_viz.web.payload import encode, grid_data

ROOT = Path(__file__).resolve().parents[2]
TINY_TEXT = "anna berg went to the market . tom lind saw anna berg at the park ."
MINILM_TEXT = "The cat sat on the mat because it was warm."


@pytest.fixture(scope="module")
def tiny():
    return mha_viz.load_model("tiny")


@pytest.fixture(scope="module")
def minilm():
    return mha_viz.load_model("minilm")


def recorder(widget) -> list[tuple[dict, list]]:
    """Every message the widget sends from now on, as ipywidgets passes it to its comm: (data, buffers)."""
    sent = []
    widget.comm.send = lambda data=None, metadata=None, buffers=None: sent.append((data, list(buffers or [])))
    return sent


def page_says(widget, content: dict) -> None:
    """A custom message from the browser (widget.js's model.send), delivered as ipywidgets delivers it."""
    widget._handle_custom_msg(content, [])


def inflate_parts(att: bytes, parts) -> bytes:
    """The widget's `att`, each layer's deflated codes one after another (grid["parts"]), inflated in order."""
    out, at = [], 0
    for layer, (index, n) in enumerate(parts):
        assert index == layer
        out.append(zlib.decompress(att[at:at + n]))
        at += n
    assert at == len(att)
    return b"".join(out)


def codes_of(widget) -> np.ndarray:
    L, H, T = widget.grid["L"], widget.grid["H"], widget.grid["T"]
    codes = inflate_parts(widget.att, widget.grid["parts"])
    return np.frombuffer(codes, np.uint8).reshape(L, H, T, T)  # (L, H, T, T)


def test_show_sends_the_app_payload_for_every_layer(tiny):
    w = mha_viz.show(tiny, TINY_TEXT, layer=1, display=False)
    run = tiny.run(TINY_TEXT)
    assert w.heads_off == frozenset() and w.layer == 1
    assert torch.equal(w.run.attentions, run.attentions)
    want_codes, want_scale = encode(run.attentions, False)
    assert codes_of(w).tobytes() == want_codes
    assert w.grid["scale"] == pytest.approx(want_scale)
    assert (w.grid["L"], w.grid["H"], w.grid["T"]) == tuple(run.attentions.shape[:3])
    assert w.grid["tokens"] == [t for t in run.tokens]  # tiny's tokens are printable words
    # The badge under each head is its strongest measured score on this run, as the app words it.
    scores, baselines = analysis.run_scores(run, True)
    support = analysis.run_support(run, True)
    name, value = analysis.top_badges(scores, baselines, 0, 1, n=1, support=support)[0]
    assert w.grid["badges"]["0,1"] == \
        f"measured: {value:.0%} → {measures.get(name).label}, {measures.queries_words(support[name])}"


def test_the_app_component_builds_the_same_payload(tiny):
    """head_grid.py (the streamlit host) and the widget share web/payload.py: same codes, same JSON. The app's
    element carries the layer on screen and names the others (`rest`) for its second element."""
    from mha_viz.app.components.head_grid import payload, unpack
    from mha_viz.web.payload import layer_codes

    run = tiny.run(TINY_TEXT)
    data, codes = grid_data(run.tokens, run.attentions, 2, {(0, 1)}, 4, False, {(0, 1): "x"})
    app = payload(run.tokens, run.attentions, 2, {(0, 1)}, 4, False, {(0, 1): "x"})
    assert unpack(app.pop("att")) == {2: layer_codes(codes, data, 2)}
    assert app.pop("rest") == [0, 1]
    app.pop("font")  # the saved figures' font's name: the page's, which the notebook does not send
    assert app == data


def test_a_switch_clicked_in_the_page_reruns_and_sends_one_update(tiny):
    w = mha_viz.show(tiny, TINY_TEXT, layer=1, display=False)
    before_digest = w.grid["digest"]
    sent = recorder(w)
    page_says(w, {"type": "toggle", "layer": 0, "head": 1, "on": False})
    assert w.heads_off == {(0, 1)}
    want = tiny.run(TINY_TEXT, ablate={(0, 1)})
    assert torch.equal(w.run.attentions, want.attentions) and w.run.ablated == {(0, 1)}
    # One state message carries the new grid, the readout and the weights (as a binary buffer, not JSON).
    updates = [(d, b) for d, b in sent if d.get("method") == "update"]
    assert len(updates) == 1
    data, buffers = updates[0]
    assert {"grid", "readout"} <= set(data["state"]) and data["buffer_paths"] == [["att"]]
    assert inflate_parts(bytes(buffers[0]), data["state"]["grid"]["parts"]) == encode(want.attentions, False)[0]
    assert data["state"]["grid"]["off"] == [[0, 1]] and data["state"]["grid"]["digest"] != before_digest
    # The readout: KL at the last position and the top 5 before and after, recomputed here.
    base = tiny.run(TINY_TEXT)
    r = w.readout
    assert r["kind"] == "lm" and r["position"] == len(base.tokens) - 1 and r["off"] == 1
    assert r["kl"] == pytest.approx(analysis.next_token_kl(base.logits, want.logits, -1), rel=1e-5)
    assert r["kl"] > 0
    probs, ids = analysis.topk_predictions(want.logits[-1], 5)
    assert r["after"] == [[tiny.decode(int(i)), pytest.approx(float(p))] for p, i in zip(probs, ids)]
    # Switched back on from the page: the all-on run again, KL 0.
    page_says(w, {"type": "toggle", "layer": 0, "head": 1, "on": True})
    assert w.heads_off == frozenset() and w.readout["kl"] == 0.0
    assert w.readout["before"] == w.readout["after"]


def test_heads_off_from_code_and_reset_from_the_page(tiny):
    w = mha_viz.show(tiny, TINY_TEXT, display=False)
    w.heads_off = {(0, 1), (1, 2)}
    assert w.heads_off == {(0, 1), (1, 2)} and w.grid["off"] == [[0, 1], [1, 2]]
    assert torch.equal(w.run.attentions, tiny.run(TINY_TEXT, ablate={(0, 1), (1, 2)}).attentions)
    page_says(w, {"type": "reset"})
    assert w.heads_off == frozenset() and w.grid["off"] == []
    with pytest.raises(InputError, match=r"head \(7, 0\) does not exist"):
        w.heads_off = {(7, 0)}


def test_an_error_in_a_callback_reaches_the_page_not_the_log(tiny):
    w = mha_viz.show(tiny, TINY_TEXT, display=False)
    rev = w.grid["rev"]
    page_says(w, {"type": "toggle", "layer": 9, "head": 0, "on": False})
    assert "layer" in w.status and w.heads_off == frozenset()
    assert w.grid["rev"] == rev + 1  # the grid is sent again, so the page clears the switch it marked pending


def test_mean_ablation_is_passed_through(tiny):
    w = mha_viz.show(tiny, TINY_TEXT, ablation="mean", heads_off={(0, 1)}, display=False)
    want = tiny.run(TINY_TEXT, ablate={(0, 1)}, ablation="mean")
    assert torch.equal(w.run.attentions, want.attentions) and w.run.ablation == want.ablation


def test_encoder_readout_is_the_sentence_embedding_cosine(minilm):
    w = mha_viz.show(minilm, MINILM_TEXT, layer=2, display=False)
    assert w.readout == {"kind": "encoder", "cosine": pytest.approx(1.0), "off": 0, "note": ""}
    w.toggle(2, 3)
    base, run = minilm.run(MINILM_TEXT), minilm.run(MINILM_TEXT, ablate={(2, 3)})
    assert w.readout["cosine"] == pytest.approx(analysis.cosine_change(base.output, run.output), abs=1e-6)
    assert w.readout["cosine"] < 1.0 and w.readout["off"] == 1


def test_show_a_run_without_its_model(tiny):
    run = tiny.run(TINY_TEXT, ablate={(1, 0)})
    w = mha_viz.show(run, display=False)
    assert w.heads_off == {(1, 0)} and w.run is run and w.grid["off"] == [[1, 0]]
    page_says(w, {"type": "toggle", "layer": 0, "head": 0, "on": False})
    assert "mha_viz.show(model, text)" in w.status and w.heads_off == {(1, 0)}
    with pytest.raises(InputError, match="without its model"):
        w.heads_off = set()
    # With its model and text it can rerun; the all-on run is made when first needed.
    w2 = mha_viz.show(run, model=tiny, text=TINY_TEXT, display=False)
    w2.heads_off = set()
    assert torch.equal(w2.run.attentions, tiny.run(TINY_TEXT).attentions)


def test_show_refuses_what_it_cannot_draw(tiny):
    with pytest.raises(InputError, match="layers 0 to 2"):
        mha_viz.show(tiny, TINY_TEXT, layer=3, display=False)
    with pytest.raises(InputError, match="give the sentence"):
        mha_viz.show(tiny, display=False)
    with pytest.raises(InputError, match="a model"):
        mha_viz.show(42, "text", display=False)
    w = mha_viz.show(tiny, TINY_TEXT, display=False)
    with pytest.raises(InputError, match="layers 0 to 2"):
        w.layer = 5
    assert w.layer == 0


def png_pixels(data: bytes) -> np.ndarray:
    """An 8-bit RGB PNG without filters (what svg.png writes) back to (h, w, 3)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", None
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h = size
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 3 * w)
    assert (rows[:, 0] == 0).all()
    return rows[:, 1:].reshape(h, w, 3)


def test_svg_export_from_code(tiny, tmp_path):
    import base64

    w = mha_viz.show(tiny, TINY_TEXT, layer=0, heads_off={(0, 1)}, display=False)
    doc = ET.fromstring(w.to_svg())
    ns = {"s": "http://www.w3.org/2000/svg"}
    heads = doc.findall("s:g", ns)
    assert [g.get("data-head") for g in heads] == [f"L0 H{h}" for h in range(4)]
    assert heads[1].find("s:text", ns).text == "L0 H1 (off)" and heads[0].find("s:text", ns).text == "L0 H0"
    # Each heatmap's pixels are the grid's codes through the grid's default contrast and colour scale (greys for
    # the head that is off); the browser test compares them with the grid's own pixels.
    on_lut, off_lut = (svg_mod.lut(c) for c in svg_mod.colour_stops())
    codes = codes_of(w)[0]  # (H, T, T)
    for h, g in enumerate(heads):
        href = g.find("s:image", ns).get("href")
        pixels = png_pixels(base64.b64decode(href.split(",", 1)[1]))
        assert np.array_equal(pixels, (off_lut if h == 1 else on_lut)[svg_mod.contrast_map()[codes[h]]])
    assert w.save_svg(tmp_path / "l0.svg").read_text() == w.to_svg(0)
    assert ET.fromstring(w.to_svg(2)).findall("s:g", ns)[0].get("data-head") == "L2 H0"


def test_colour_stops_are_the_ones_the_grid_receives(tiny):
    w = mha_viz.show(tiny, TINY_TEXT, display=False)
    on, off = svg_mod.colour_stops()
    assert (on, off) == (w.grid["colours"]["on"], w.grid["colours"]["off"]) and len(on) >= 2 and len(off) >= 2
    # lut() interpolates as the grid's lut() (web/grid/colour.js): the ends are the first and last stops.
    table = svg_mod.lut(on)
    assert "#%02x%02x%02x" % tuple(table[0]) == on[0].lower() and "#%02x%02x%02x" % tuple(table[255]) == on[-1].lower()
    remap = svg_mod.contrast_map()
    assert remap[0] == 0 and remap[255] == 255 and remap[64] == round((64 / 255) ** 0.5 * 255)


def test_the_output_bundle_carries_the_last_picture(tiny):
    """A notebook saved without its kernel (nbconvert, GitHub) shows the image/svg+xml beside the widget view;
    displayed once, every rerun updates it through the display handle."""
    w = mha_viz.show(tiny, TINY_TEXT, display=False)
    data, _ = w._bundle()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == w.model_id
    assert data["image/svg+xml"] == w.to_svg() and "L0 H1 (off)" not in data["image/svg+xml"]

    updates = []

    class Handle:
        def update(self, obj, **kwargs):
            updates.append(obj)

    w._handles.append(Handle())
    w.toggle(0, 1)
    assert "L0 H1 (off)" in updates[-1]["image/svg+xml"] and "off: L0 H1" in updates[-1]["text/plain"]
    w.layer = 2
    assert 'data-head="L2 H0"' in updates[-1]["image/svg+xml"]


def test_the_notebook_package_imports_no_streamlit_and_no_jupyter_until_show():
    files = sorted((ROOT / "mha_viz" / "notebook").glob("*.py"))
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad = [n for n in names if n.startswith(("streamlit", "mha_viz.app"))]
            assert not bad, f"{f.name} imports {bad}"
    code = ("import sys, mha_viz, mha_viz.notebook, mha_viz.web.payload; "
            "print(sorted(m for m in ('anywidget', 'ipywidgets', 'streamlit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_show_without_anywidget_says_how_to_install_it():
    code = ("import sys; sys.modules['anywidget'] = None\n"
            "import mha_viz\n"
            "try:\n    mha_viz.show('tiny', 'one , two .', display=False)\n"
            "except ImportError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert "pip install 'mha-viz[notebook]'" in out.stdout


def test_the_widget_shows_a_written_model_and_its_switches_rerun_it():
    """A model compiled from a RASP program in the notebook: the grid of its heads, the registry's badges, and a head
    switched off from the page reruns the model as `run` does."""
    model = mha_viz.load_model("written-induction")
    text = "a b c d a b c d"
    w = mha_viz.show(model, text, display=False)
    assert (w.grid["L"], w.grid["H"], w.grid["T"]) == (2, 1, 9)
    assert "→ previous token, " in w.grid["badges"]["0,0"] and "→ induction, " in w.grid["badges"]["1,0"]
    page_says(w, {"type": "toggle", "layer": 0, "head": 0, "on": False})
    want = model.run(text, ablate={(0, 0)})
    assert w.heads_off == {(0, 0)} and torch.equal(w.run.attentions, want.attentions)
    assert model.program_output(w.run) == model.program_output(want) != model.program_output(model.run(text))
