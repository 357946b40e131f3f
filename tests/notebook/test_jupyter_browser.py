"""The widget in real front ends: a Jupyter server started here on loopback (JupyterLab 4 and Notebook 7, one
process), headless Debian Chromium running the cells as a person does. Clicking a head's switch in the page must
rerun the model in the kernel, grey that head, change the pattern of the head it feeds and the readout, and leave
`w.heads_off` set for the next cell. Nothing may be fetched from outside loopback."""
from __future__ import annotations

import base64
import os
import re
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
from jupyter_harness import CHROMIUM, JupyterServer, Page, write_notebook
from test_widget import png_pixels

pytestmark = pytest.mark.e2e

# Repeated random words: the tiny model's layer-1 heads copy from after the first occurrence (induction), which
# needs the previous-token head of layer 0 (L0 H1 in assets/tiny, found by measuring in examples/).
TEXT = "reed night boat lamp river cold tree sun fish wall reed night boat lamp river cold tree sun fish wall"
CELLS = [
    f"import mha_viz\nw = mha_viz.show('tiny', {TEXT!r}, layer=1)",
    "from mha_viz import analysis\n"
    "kl = analysis.next_token_kl(w.model.run(w.text).logits, w.model.run(w.text, ablate={(0, 1)}).logits)\n"
    "print('off:', sorted(w.heads_off), 'ablated run:', sorted(w.run.ablated), f'kl: {kl:.4f}', 'layer:', w.layer)",
]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        if _in_ci():
            pytest.fail(f"{CHROMIUM} is missing; CI is set, so the notebook browser tests must run")
        pytest.skip(f"{CHROMIUM} is missing (make setup-browser)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-proxy-server"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("nbroot")
    log = Path(tmp_path_factory.mktemp("nblog")) / "jupyter.log"
    s = JupyterServer(root, log)
    try:
        yield s
    finally:
        s.stop()


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
        page.wait_for_selector(".mhw[data-drawn-at] .mhv-head[data-head='L1 H0'] canvas", timeout=60000)
        readout = page.locator("[data-testid=mhw-readout]")
        assert "0.0000 nats" in readout.inner_text()
        induction_before = _pixels(page, "L1 H0")
        # In the page only: hovering a heatmap reads a weight, clicking it opens the head large.
        box = page.locator(".mhv-head[data-head='L1 H0'] canvas").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.95)
        page.wait_for_function("document.querySelector('[data-testid=mhv-info]').innerText.includes('L1 H0 · query')")
        page.click(".mhv-head[data-head='L1 H0'] .mhv-wrap")
        page.wait_for_selector(".mhv-focus:not([hidden]) .mhv-focus-canvas")
        assert page.locator(".mhv-focus-title").inner_text() == "L1 H0"
        # The grid's own Save SVG button works inside the notebook's page.
        with page.expect_download() as download:
            page.click(".mhw button[data-save='svg']")
        svg = Path(download.value.path()).read_text()
        assert download.value.suggested_filename.endswith(".svg") and svg.lstrip().startswith(("<svg", "<?xml"))
        assert "L1 H3" in svg
        # Layer tabs are the page's own; the switch goes to the kernel.
        page.click(".mhv-tab[data-layer='0']")
        page.click(".mhv-head[data-head='L0 H1'] .mhv-switch")
        page.wait_for_selector(".mhv-head.mhv-off[data-head='L0 H1']", timeout=60000)
        page.wait_for_function("document.querySelector('[data-testid=mhw-readout]').innerText.includes('1 off')",
                               timeout=60000)
        shown_kl = readout.inner_text().split(" nats")[0].rsplit(": ", 1)[1]
        page.click(".mhv-tab[data-layer='1']")
        page.wait_for_selector(".mhv-grid[data-layer='1']")
        assert _pixels(page, "L1 H0") != induction_before, "the induction head's pattern did not change"
        page.click(".mhv-tab[data-layer='2']")  # the tab shown is Python's w.layer too
        p.run_cell(1)
        # Python sees what the page switched, and the readout's KL is the one recomputed from the model there.
        assert f"off: [(0, 1)] ablated run: [(0, 1)] kl: {shown_kl} layer: 2" in p.output_text(1)
        assert float(shown_kl) > 0
        assert not p.outside, f"requests left loopback: {p.outside}"
        # Saved from the front end, the grid's output carries the last picture for viewers without a kernel.
        page.keyboard.press("Control+s")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            saved = nbformat.read(server.root / name, as_version=4)
            pictures = [o.get("data", {}).get("image/svg+xml", "") for o in saved.cells[0].outputs]
            if any("layer 2, off: L0 H1" in pic for pic in pictures):
                break
            page.wait_for_timeout(500)
        assert any("tiny, layer 2, off: L0 H1" in pic for pic in pictures), [pic[:300] for pic in pictures]
        # ...and that picture is the grid's: L2 H0's pixels in the page equal the PNG inside the saved SVG.
        (pic,) = [pic for pic in pictures if "tiny, layer 2, off: L0 H1" in pic]
        href = re.search(r'data-head="L2 H0">.*?href="data:image/png;base64,([^"]+)"', pic, re.S).group(1)
        saved_rgb = png_pixels(base64.b64decode(href))  # (T, T, 3)
        page_rgba = np.array(_pixels(page, "L2 H0"), np.uint8).reshape(saved_rgb.shape[0], saved_rgb.shape[1], 4)
        assert np.array_equal(page_rgba[..., :3], saved_rgb)
    finally:
        p.close()
