"""The widget in real front ends: a Jupyter server started here on loopback (JupyterLab 4 and Notebook 7, one
process), headless Debian Chromium running the cells as a person does. Clicking a head's switch in the page must
rerun the model in the kernel, grey that head, change the pattern of the head it feeds and the readout, and leave
`w.heads_off` set for the next cell. Nothing may be fetched from outside loopback."""
from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import numpy as np
import pytest

# Before the harness, which writes notebooks with it.
nbformat = pytest.importorskip("nbformat", reason="needs nbformat (requirements-test.txt)")
from jupyter_harness import Page, write_notebook  # noqa: E402
from test_widget import png_pixels  # noqa: E402

from mha_viz.models.tiny.evidence import context_roles, load_evidence  # noqa: E402

pytestmark = pytest.mark.e2e

# Repeated random words: the tiny model's induction head copies from after the first occurrence, which needs its
# previous-token head. Both are read from the shipped evidence (assets/tiny/probes.json), not named here.
_ROLES = context_roles(load_evidence()["final"]["context"])
PREV, IND = tuple(_ROLES["previous"]["head"]), tuple(_ROLES["induction"]["head"])
assert PREV[0] == 0 and IND[0] == 1, f"the test opens layers 0 and 1; the shipped roles are {PREV} and {IND}"
PREV_NAME, IND_NAME = f"L0 H{PREV[1]}", f"L1 H{IND[1]}"
TEXT = "reed night boat lamp river cold tree sun fish wall reed night boat lamp river cold tree sun fish wall"
CELLS = [
    f"import mha_viz\nw = mha_viz.show('tiny', {TEXT!r}, layer=1)",
    "from mha_viz import analysis\n"
    f"kl = analysis.next_token_kl(w.model.run(w.text).logits, w.model.run(w.text, ablate={{{PREV}}}).logits)\n"
    "print('off:', sorted(w.heads_off), 'ablated run:', sorted(w.run.ablated), f'kl: {kl:.4f}', 'layer:', w.layer)",
]


def _pixels(page, head: str) -> list[int]:
    return page.evaluate("""(name) => {
        const c = document.querySelector(`.mhv-head[data-head="${name}"] canvas`);
        return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data);
    }""", head)


@pytest.mark.parametrize("front_end", ["lab", "notebook7"])
def test_switching_a_head_off_in_the_page(browser, server, front_end):
    name = f"switch-{front_end}.ipynb"
    write_notebook(server.root / name, CELLS)
    p = Page(browser, server)
    try:
        p.open(front_end, name)
        p.run_cell(0)
        page = p.page
        page.wait_for_selector(f".mhw[data-drawn-at] .mhv-head[data-head='{IND_NAME}'] canvas", timeout=60000)
        readout = page.locator("[data-testid=mhw-readout]")
        assert "0.0000 nats" in readout.inner_text()
        induction_before = _pixels(page, IND_NAME)
        # In the page only: hovering a heatmap reads a weight, clicking it opens the head large.
        box = page.locator(f".mhv-head[data-head='{IND_NAME}'] canvas").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.95)
        page.wait_for_function("document.querySelector('[data-testid=mhv-info]').innerText"
                               f".includes('{IND_NAME} · query')")
        page.click(f".mhv-head[data-head='{IND_NAME}'] .mhv-wrap")
        page.wait_for_selector(".mhv-focus:not([hidden]) .mhv-focus-canvas")
        assert page.locator(".mhv-focus-title").inner_text() == IND_NAME
        # The grid's own Save SVG button works inside the notebook's page.
        with page.expect_download() as download:
            page.click(".mhw button[data-save='svg']")
        svg = Path(download.value.path()).read_text()
        assert download.value.suggested_filename.endswith(".svg") and svg.lstrip().startswith(("<svg", "<?xml"))
        assert "L1 H3" in svg
        # Layer tabs are the page's own; the switch goes to the kernel.
        page.click(".mhv-tab[data-layer='0']")
        page.click(f".mhv-head[data-head='{PREV_NAME}'] .mhv-switch")
        page.wait_for_selector(f".mhv-head.mhv-off[data-head='{PREV_NAME}']", timeout=60000)
        page.wait_for_function("document.querySelector('[data-testid=mhw-readout]').innerText.includes('1 off')",
                               timeout=60000)
        shown_kl = readout.inner_text().split(" nats")[0].rsplit(": ", 1)[1]
        page.click(".mhv-tab[data-layer='1']")
        # The head's own canvas, not only its grid: a grid draws its heads one after another.
        page.wait_for_selector(f".mhv-grid[data-layer='1'] .mhv-head[data-head='{IND_NAME}'] canvas")
        assert _pixels(page, IND_NAME) != induction_before, "the induction head's pattern did not change"
        page.click(".mhv-tab[data-layer='2']")  # the tab shown is Python's w.layer too
        p.run_cell(1)
        # Python sees what the page switched, and the readout's KL is the one recomputed from the model there.
        assert f"off: [{PREV}] ablated run: [{PREV}] kl: {shown_kl} layer: 2" in p.output_text(1)
        assert float(shown_kl) > 0
        assert not p.outside, f"requests left loopback: {p.outside}"
        # Saved from the front end, the grid's output carries the last picture for viewers without a kernel.
        page.keyboard.press("Control+s")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            saved = nbformat.read(server.root / name, as_version=4)
            pictures = [o.get("data", {}).get("image/svg+xml", "") for o in saved.cells[0].outputs]
            if any(f"layer 2, off: {PREV_NAME}" in pic for pic in pictures):
                break
            page.wait_for_timeout(500)
        assert any(f"tiny, layer 2, off: {PREV_NAME}" in pic for pic in pictures), [pic[:300] for pic in pictures]
        # ...and that picture is the grid's: L2 H0's pixels in the page equal the PNG inside the saved SVG.
        (pic,) = [pic for pic in pictures if f"tiny, layer 2, off: {PREV_NAME}" in pic]
        href = re.search(r'data-head="L2 H0">.*?href="data:image/png;base64,([^"]+)"', pic, re.S).group(1)
        saved_rgb = png_pixels(base64.b64decode(href))  # (T, T, 3)
        page_rgba = np.array(_pixels(page, "L2 H0"), np.uint8).reshape(saved_rgb.shape[0], saved_rgb.shape[1], 4)
        assert np.array_equal(page_rgba[..., :3], saved_rgb)
    finally:
        p.close()


MAP_CELLS = [
    "import mha_viz\n"
    "tiny = mha_viz.load_model('tiny')\n"
    "cfg = mha_viz.CensusConfig(n_random=2, random_length=10, n_repeated=2, n_templates=4, n_loss=2, n_boot=10)\n"
    "census = mha_viz.head_census(tiny, texts=['anna berg went to the market .', 'one , two , three .'], "
    "config=cfg, control=None)\n"
    "cw = mha_viz.show_census(census, 'previous')\n"
    "print('T_SHOW', repr(cw.t_show))",
    "print('selected:', cw.selected, 'score:', cw.score, 'examples:', [t for _, t in cw.examples()])",
    "cc = mha_viz.show_circuits(mha_viz.circuits(tiny), 'k')",
    "print('circuits selected:', cc.selected)",
]


def _tip(page) -> str:
    return page.locator("[data-testid=mhm-tip]").first.inner_text()


@pytest.mark.parametrize("front_end", ["lab", "notebook7"])
def test_census_and_circuits_widgets_in_the_page(browser, server, front_end):
    """show_census on tiny: hover a head (its value and interval), pick a score, click a head: `cw.selected`
    changes in the kernel and the picture redraws with that head outlined and its top examples; the Save SVG button
    downloads it; the saved notebook keeps it. Then show_circuits: hover the composition map, click a head."""
    name = f"maps-{front_end}.ipynb"
    write_notebook(server.root / name, MAP_CELLS)
    p = Page(browser, server)
    try:
        p.open(front_end, name)
        p.run_cell(0)
        page = p.page
        census_box = page.locator(".jp-Notebook .jp-Cell").nth(0).locator(".mhm")
        census_box.locator("svg.mhm-picture[data-kind=census]").wait_for(timeout=60000)
        page.wait_for_selector(".mhm[data-drawn-at]")
        t_show = float(re.search(r"T_SHOW ([\d.]+)", p.output_text(0)).group(1))
        drawn_ms = int(census_box.get_attribute("data-drawn-at")) - t_show * 1000
        print(f"show_census(tiny) -> drawn in the page: {drawn_ms:.0f} ms")
        # Hover: the head, its value and its bootstrap interval.
        census_box.locator("rect.mhm-cell[data-lh='0,1']").hover()
        page.wait_for_function("document.querySelector('[data-testid=mhm-tip]').innerText.startsWith('L0 H1 · "
                               "previous: ')")
        assert "95% interval" in _tip(page)
        # The score picker redraws the map of another score.
        census_box.locator("select[data-trait=score]").select_option("induction")
        page.wait_for_function("document.querySelector(\".mhm rect.mhm-cell[data-lh='0,0']\")"
                               ".getAttribute('data-tip').includes(' · induction: ')", timeout=60000)
        cell = census_box.locator("rect.mhm-cell[data-lh='1,0']")
        assert cell.get_attribute("stroke") != "#d62728"
        cell.click()
        # The kernel redraws the picture: the clicked head outlined red (the only one), its numbers below.
        page.wait_for_selector(".mhm[data-selected='1,0'] rect.mhm-cell[data-lh='1,0'][stroke='#d62728']",
                               timeout=60000)
        assert census_box.locator("rect.mhm-cell[stroke='#d62728']").count() == 1
        assert "Selected: L1 H0" in census_box.locator("svg.mhm-picture").inner_html()
        with page.expect_download() as download:
            census_box.locator("button[data-save=svg]").click()
        saved_svg = Path(download.value.path()).read_text()
        assert download.value.suggested_filename == "census-tiny-0.svg" and "Selected: L1 H0" in saved_svg
        p.run_cell(1)
        out = p.output_text(1)
        assert "selected: (1, 0) score: induction examples: [" in out, out
        assert "anna berg went to the market ." in out
        # The circuits: the composition map's hover reads the cell under the pointer; a click selects a head.
        p.run_cell(2)
        circ_box = page.locator(".jp-Notebook .jp-Cell").nth(2).locator(".mhm")
        image = circ_box.locator("image[data-map=composition]")
        image.wait_for(timeout=60000)
        image.scroll_into_view_if_needed()
        box = image.bounding_box()
        n = 12  # tiny: 3 layers x 4 heads
        # the cell of row L2 H0 (reads), column L0 H1 (writes)
        page.mouse.move(box["x"] + (1 + 0.5) * box["width"] / n, box["y"] + (8 + 0.5) * box["height"] / n)
        page.wait_for_function("[...document.querySelectorAll('[data-testid=mhm-tip]')]"
                               ".some(e => e.innerText.startsWith('L0 H1 → L2 H0 (key): '))")
        circ_box.locator("rect.mhm-cell[data-lh='2,3']").click()
        page.wait_for_selector(".jp-Cell .mhm[data-selected='2,3']", timeout=60000)
        assert "L2 H3: singular values" in circ_box.locator("svg.mhm-picture").inner_html()
        p.run_cell(3)
        assert "circuits selected: (2, 3)" in p.output_text(3)
        assert not p.outside, f"requests left loopback: {p.outside}"
        # Saved from the front end, the outputs carry the last pictures for viewers without a kernel.
        page.keyboard.press("Control+s")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            saved = nbformat.read(server.root / name, as_version=4)
            pics = [o.get("data", {}).get("image/svg+xml", "") for i in (0, 2) for o in saved.cells[i].outputs]
            if any("Selected: L1 H0" in s for s in pics) and any("L2 H3: singular values" in s for s in pics):
                break
            page.wait_for_timeout(500)
        assert any("Selected: L1 H0" in s and "data-kind=\"census\"" in s for s in pics), [s[:200] for s in pics]
        assert any("L2 H3: singular values" in s for s in pics)
    finally:
        p.close()
