"""show_census and show_circuits as widgets, without a browser: what they draw (every cell's hover text read back
from the picture and compared with the census / circuits object), what the page's messages do (a click on a head,
a picker; delivered as ipywidgets delivers them), what is sent back (one update with the new picture), what Python
reads (`selected`, `examples()`, callbacks), the SVG export and the saved notebook's fallback picture."""
from __future__ import annotations

import base64
import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from test_widget import png_pixels, recorder

import mha_viz
from mha_viz.contract import InputError
from mha_viz.notebook import circuit_map, maps
from mha_viz.notebook import svg as svg_mod

NS = {"s": "http://www.w3.org/2000/svg"}
TEXTS = ["anna berg went to the market .", "one , two , three .", "tom lind saw anna berg at the park ."]


@pytest.fixture(scope="module")
def tiny():
    return mha_viz.load_model("tiny")


@pytest.fixture(scope="module")
def census(tiny):
    cfg = mha_viz.CensusConfig(n_random=2, random_length=10, n_repeated=2, n_templates=4, n_loss=2, n_boot=10)
    return mha_viz.head_census(tiny, texts=TEXTS, config=cfg, control="auto")  # the untrained twin: a control


@pytest.fixture(scope="module")
def circuits(tiny):
    return mha_viz.circuits(tiny)


def page_sets(widget, **state) -> None:
    """The page changed traits (model.set + save_changes in maps.js): the comm message ipywidgets handles."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}},
                        "buffers": []})


def _num(text: str) -> float:
    return float("nan") if text == "n/a" else float(text)


def census_cells(svg: str) -> dict[tuple[int, int], tuple[str, ET.Element]]:
    """The map's cells: (layer, head) -> (hover text, element)."""
    out = {}
    for rect in ET.fromstring(svg).iter(f"{{{NS['s']}}}rect"):
        if rect.get("class") == "mhm-cell":
            layer, head = (int(v) for v in rect.get("data-lh").split(","))
            assert rect.find("s:title", NS).text == rect.get("data-tip")  # the saved file's hover says the same
            out[(layer, head)] = (rect.get("data-tip"), rect)
    return out


def test_census_map_draws_each_head_with_its_value_and_interval(census):
    w = mha_viz.show_census(census, "induction", display=False)
    assert (w.score, w.x, w.y, w.selected) == ("induction", "previous", "induction", None)
    assert w.picture == w.to_svg()
    cells = census_cells(w.picture)
    assert set(cells) == {(l, h) for l in range(census.n_layers) for h in range(census.n_heads)}
    pattern = re.compile(r"L(\d+) H(\d+) · induction: (\S+) \(95% interval (\S+)–(\S+), (\d+) inputs\); "
                         r"uniform (\S+); control (\S+)")
    for lh, (tip, rect) in cells.items():
        m = pattern.fullmatch(tip)
        assert m, tip
        assert (int(m.group(1)), int(m.group(2))) == lh
        for got, want in zip(m.groups()[2:5], (census.scores, census.low, census.high)):
            v, t = _num(got), float(want["induction"][lh])
            assert (math.isnan(v) and math.isnan(t)) or v == pytest.approx(t, abs=5e-4)
        assert int(m.group(6)) == census.n_inputs["induction"]
        assert _num(m.group(8)) == pytest.approx(float(census.control["induction"][lh]), abs=5e-4)
    outlined = {lh for lh, (_, rect) in cells.items() if rect.get("stroke") == "#000"}
    assert outlined == {lh for lh, _ in census.top("induction", 3)}
    # The colour: the app's Viridis on 0..max(1, top); the strongest head is the brightest.
    best = census.top("induction", 1)[0][0]
    lo, hi = maps.census_range(census, "induction")
    want = svg_mod.lut(maps.VIRIDIS)[int(round((float(census.scores["induction"][best]) - lo) / (hi - lo) * 255))]
    assert cells[best][1].get("fill") == "#%02x%02x%02x" % tuple(want)


def test_census_legend_marks_the_baselines(census):
    relation = next(n for n in census.names if n in census.offset and math.isfinite(census.offset[n][1]))
    for name in ("previous", relation):
        w = mha_viz.show_census(census, name, display=False)
        labels = [t.text for t in ET.fromstring(w.picture).iter(f"{{{NS['s']}}}text")
                  if t.get("class") == "mhm-baseline-label"]
        assert f"uniform {census.uniform[name]:.3g}" in labels
        ctrl = float(census.control[name].max())
        assert f"control {ctrl:.3g}" in labels
        if name == relation:
            offset, acc = census.offset[name]
            assert f"offset {offset:+d} {acc:.3g}" in labels


def test_a_click_in_the_page_selects_a_head_and_redraws_once(census):
    w = mha_viz.show_census(census, "previous (text)", display=False)
    seen = []
    w.on_select(seen.append)
    sent = recorder(w)
    page_sets(w, selected=[1, 0])
    assert w.selected == (1, 0) and seen == [(1, 0)]
    updates = [d for d, _ in sent if d.get("method") == "update" and "picture" in d["state"]]
    assert len(updates) == 1 and updates[0]["state"]["picture"] == w.to_svg()
    cells = census_cells(w.picture)
    assert cells[(1, 0)][1].get("stroke") == maps.SELECTED
    assert [lh for lh, (_, r) in cells.items() if r.get("stroke") == maps.SELECTED] == [(1, 0)]
    # Its top examples: the natural texts ranked by its per-text value of the shown score, recomputed here.
    values = census.text_values["previous (text)"][:, 1, 0]  # (N,)
    order = sorted(range(len(TEXTS)), key=lambda i: -float(values[i]))
    assert [t for _, t in w.examples()] == [TEXTS[i] for i in order]
    assert [v for v, _ in w.examples()] == pytest.approx([float(values[i]) for i in order])
    info = [t.text for t in ET.fromstring(w.picture).iter(f"{{{NS['s']}}}text") if t.get("class") == "mhm-head-info"]
    assert info[0] == "Selected: L1 H0" and any(TEXTS[order[0]] in line for line in info)
    # The scatter rings the same head.
    rings = [c.get("data-lh") for c in ET.fromstring(w.picture).iter(f"{{{NS['s']}}}circle")
             if c.get("stroke") == maps.SELECTED]
    assert rings == ["1,0"]


def test_pickers_from_the_page_and_from_code(census):
    w = mha_viz.show_census(census, display=False)
    assert [c["trait"] for c in w.controls] == ["score", "x", "y"]
    assert [o[0] for o in w.controls[0]["options"]] == census.names
    page_sets(w, score="duplicate", x="first", y="special")
    assert (w.score, w.x, w.y) == ("duplicate", "first", "special")
    assert all(" · duplicate: " in tip for tip, _ in census_cells(w.picture).values())
    points = {c.get("data-lh"): c.get("data-tip") for c in ET.fromstring(w.picture).iter(f"{{{NS['s']}}}circle")}
    assert len(points) == census.n_layers * census.n_heads
    assert points["2,1"] == (f"L2 H1 · first: {float(census.scores['first'][2, 1]):.3f}, "
                             f"special: {float(census.scores['special'][2, 1]):.3f}")
    with pytest.raises(InputError, match="not a score of this census"):
        w.score = "nope"
    with pytest.raises(InputError, match=r"head \(3, 0\) does not exist"):
        w.selected = (3, 0)
    w.selected = (0, 1)
    assert w.selected == (0, 1)
    w.selected = None
    assert w.examples() == [] and "Click a head" in w.picture
    only = mha_viz.show_census(census, scores=["previous", "induction"], display=False)
    assert [o[0] for o in only.controls[0]["options"]] == ["previous", "induction"]
    with pytest.raises(InputError, match="not scores of this census"):
        mha_viz.show_census(census, scores=["nope"], display=False)


def test_the_saved_notebook_keeps_the_last_picture(census, tmp_path):
    w = mha_viz.show_census(census, display=False)
    data, _ = w._bundle()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == w.model_id
    assert data["image/svg+xml"] == w.to_svg()
    updates = []

    class Handle:
        def update(self, obj, **kwargs):
            updates.append(obj)

    w._handles.append(Handle())
    page_sets(w, selected=[2, 3])
    assert updates[-1]["image/svg+xml"] == w.to_svg() and "Selected: L2 H3" in updates[-1]["image/svg+xml"]
    assert "selected L2 H3" in updates[-1]["text/plain"]
    assert w.save_svg(tmp_path / "c.svg").read_text() == w.to_svg()
    ET.fromstring(w.to_svg())  # a well-formed SVG document


def test_circuits_composition_map_and_its_hover_values(circuits):
    c = circuits
    w = mha_viz.show_circuits(c, display=False)
    best = c.top_pairs("k", 1)[0]
    assert w.mode == "k" and w.selected == best[1]  # the later head of the strongest pair, at first
    L, H = c.n_layers, c.n_heads
    N = L * H
    for mode in ("k", "q", "v"):
        page_sets(w, mode=mode)
        assert w.mode == mode and w.hover["composition"]["mode"] == mode
        values = np.frombuffer(w.hover_values, "<f4").reshape(N, N)  # (later, earlier)
        want = c.composition[mode].reshape(N, N).T.numpy()  # (later, earlier)
        assert np.allclose(values, want, equal_nan=True, atol=1e-6)
        assert w.hover["composition"]["base"] == c.baseline[mode].mean
        # The map's pixels: white at or below the random mean, the app's darkest red at the top, grey where the
        # column's layer is not earlier than the row's.
        image = next(e for e in ET.fromstring(w.picture).iter(f"{{{NS['s']}}}image") if e.get("data-map"))
        pixels = png_pixels(base64.b64decode(image.get("href").split(",", 1)[1]))  # (N, N, 3)
        finite = np.isfinite(want)
        assert (pixels[~finite] == 244).all()
        assert (pixels[finite & (want <= c.baseline[mode].mean)] == 255).all()
        r, k = np.unravel_index(np.nanargmax(want), want.shape)
        assert "#%02x%02x%02x" % tuple(pixels[r, k]) == circuit_map.COMPOSITION[-1].lower()
        labels = [t.text for t in ET.fromstring(w.picture).iter(f"{{{NS['s']}}}text")
                  if t.get("class") == "mhm-baseline-label"]
        assert f"random 99th pct {c.baseline[mode].p99:.3g}" in labels
    with pytest.raises(InputError, match="kind of composition"):
        mha_viz.show_circuits(c, modes=("x",), display=False)


def test_circuits_selected_head_shows_its_singular_values_and_copying(circuits):
    c = circuits
    w = mha_viz.show_circuits(c, "k", display=False)
    sent = recorder(w)
    page_sets(w, selected=[2, 1])
    assert w.selected == (2, 1)
    assert len([d for d, _ in sent if d.get("method") == "update" and "picture" in d["state"]]) == 1
    doc = ET.fromstring(w.picture)
    tips = [e.get("data-tip") for e in doc.iter(f"{{{NS['s']}}}circle") if e.get("class") == "mhm-sv"]
    qk = [float(re.search(r"QK #\d+: (\S+)", t).group(1)) for t in tips if " QK #" in t]
    ov = [float(re.search(r"OV #\d+: (\S+)", t).group(1)) for t in tips if " OV #" in t]
    assert qk == pytest.approx(c.qk_singular[2, 1].tolist(), rel=1e-3)
    assert ov == pytest.approx(c.ov_singular[2, 1].tolist(), rel=1e-3)
    copying = {e.get("data-lh"): e.get("data-tip") for e in doc.iter(f"{{{NS['s']}}}rect")
               if e.get("class") == "mhm-cell"}
    assert copying["0,3"] == f"L0 H3 · OV copying {float(c.copying[0, 3]):+.3f}"
    assert copying["2,1"] and len(copying) == c.n_layers * c.n_heads
    info = " ".join(t.text for t in doc.iter(f"{{{NS['s']}}}text") if t.get("class") == "mhm-head-info")
    reads = c.composition["k"][:2, :, 2, 1]  # (2, H) the earlier heads into L2 H1
    l, h = divmod(int(reads.argmax()), c.n_heads)
    assert f"reads most, through its key, from: L{l} H{h} {float(reads.max()):.3f}" in info
    w.selected = (0, 0)
    assert "reads from no earlier head" in " ".join(
        t.text for t in ET.fromstring(w.picture).iter(f"{{{NS['s']}}}text") if t.get("class") == "mhm-head-info")


def test_the_widgets_ship_their_javascript_inline():
    from mha_viz.notebook.maps_widget import CensusMaps, CircuitsMaps

    for cls in (CensusMaps, CircuitsMaps):
        assert "export default" in cls._esm and "http" not in re.sub(r"http://www\.w3\.org/\S+", "", cls._esm)


def test_show_census_refuses_what_is_not_a_census(census):
    with pytest.raises(InputError, match="not a score of this census"):
        mha_viz.show_census(census, "nope", display=False)
    with pytest.raises(InputError, match=r"selected must be \(layer, head\)"):
        mha_viz.show_census(census, selected="L1", display=False)


def test_show_census_without_anywidget_says_how_to_install_it():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; sys.modules['anywidget'] = None\n"
            "import mha_viz\n"
            "try:\n    mha_viz.show_circuits(object(), display=False)\n"
            "except ImportError as err:\n    print(err)\n")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert "show_census / show_circuits need anywidget" in out.stdout
    assert "pip install 'mha-viz[notebook]'" in out.stdout
