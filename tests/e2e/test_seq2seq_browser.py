"""An encoder-decoder folder in a real browser at 1000x800 and 1600x1000: the source and target boxes, the Layer
view's switch between the Encoder, Decoder and Cross grids, a cross-attention heatmap drawn as target rows by
source columns with hover naming both tokens, and a cross head switched off from its corner."""
from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from test_browser import _assert_no_exception

from harness import GRID_DRAWN, GRID_TITLES, new_page, wait, wait_idle

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SOURCE = "the cat sat on the mat"
TARGET = "a dog ran"
N_HEADS = 4
# Each head's heatmap canvas: its pixel size (one pixel per cell) and its drawn size.
CANVASES = """() => [...document.querySelectorAll('.mhv-grid .mhv-head canvas')].map(c => {
  const r = c.getBoundingClientRect(); return [c.width, c.height, r.width, r.height]; })"""
# Anything wider than the window: a box or a column pushed off the page.
OVERFLOW = "() => document.documentElement.scrollWidth - window.innerWidth"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from tests.models.hf.test_seq2seq import seq2seq_folder

    return seq2seq_folder(tmp_path_factory.mktemp("bart"))


def _kind(page, kind: str) -> None:
    page.locator('[data-testid="stMain"] button').filter(has_text=kind).first.click()
    wait(page, f"() => ({GRID_TITLES})().length === {N_HEADS} && "
               f"[...document.querySelectorAll('p')].some(p => p.innerText.startsWith('{kind}:'))",
         f"the {kind} grid")
    wait_idle(page)


@pytest.mark.parametrize("size", [(1000, 800), (1600, 1000)], ids=["1000x800", "1600x1000"])
def test_three_grids_and_a_cross_head_in_the_browser(browser, streamlit_url, folder, size, artifacts):
    context, page = new_page(browser, *size)
    try:
        query = urlencode({"model": str(folder), "text": SOURCE, "view": "Layer"})
        page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
        page.get_by_role("button", name="Load this model").click()
        wait(page, f"() => ({GRID_DRAWN})() === {N_HEADS}", "the encoder's grid")
        wait_idle(page)
        _assert_no_exception(page, "loading the folder")
        page.get_by_role("textbox", name="Target (the decoder's text)").fill(TARGET)
        page.get_by_role("button", name="Show attention").click()
        wait(page, "() => [...document.querySelectorAll('[data-testid=\"stDataFrame\"]')].length > 0",
             "the predictions along the target")
        wait_idle(page)
        S = page.locator(".mhv-strip .mhv-tok").count()  # the encoder's strip: the source's tokens
        assert page.evaluate(OVERFLOW) <= 0, "the page is wider than the window"

        _kind(page, "Decoder")
        T = page.locator(".mhv-strip .mhv-tok").count()  # the decoder's strip: start token + the target's
        assert T == 4 and S == 7, (S, T)
        assert all(w == h == T for w, h, _, _ in page.evaluate(CANVASES))

        _kind(page, "Cross")
        _assert_no_exception(page, "opening the Cross grid")
        canvases = page.evaluate(CANVASES)
        assert all((w, h) == (S, T) for w, h, _, _ in canvases), canvases  # S source columns, T target rows
        assert all(abs(rw / rh - S / T) < 0.05 for _, _, rw, rh in canvases), canvases  # square cells
        assert page.locator(".mhv-strip .mhv-tok").count() == T  # the strip names the rows: the target
        canvas = page.locator('.mhv-grid .mhv-head[data-head="L0 H2"] canvas')
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        canvas.hover(position={"x": box["width"] * 1.5 / S, "y": box["height"] * 2.5 / T})
        info = page.locator(".mhv-info").inner_text()
        assert '(2) → key' in info and '(1):' in info, info  # target row 2 reading source column 1
        assert page.evaluate(OVERFLOW) <= 0, "the Cross grid is wider than the window"
        page.screenshot(path=str(artifacts / f"seq2seq-cross-{size[0]}x{size[1]}.png"), full_page=True)

        page.locator('.mhv-grid .mhv-switch[aria-label="L0 H2"]').click()
        wait(page, "() => document.querySelector('.mhv-grid .mhv-head[data-head=\"L0 H2\"]')"
                   ".classList.contains('mhv-off')", "the cross head drawn off")
        wait_idle(page)
        _assert_no_exception(page, "switching a cross head off")
        assert page.get_by_text("The decoder's next-token prediction along the target (1 head off)").count() == 1
        _kind(page, "Encoder")
        assert page.locator(".mhv-grid .mhv-head.mhv-off").count() == 0  # a cross head is no encoder head
        assert page.js_errors == [], page.js_errors
    finally:
        context.close()


@pytest.mark.parametrize("size", [(1000, 800), (1600, 1000)], ids=["1000x800", "1600x1000"])
@pytest.mark.parametrize("view, heading", [("Inside a head", "Inside a head"), ("Patching", "two sources")])
def test_inside_and_patching_open_from_a_cross_link(browser, streamlit_url, folder, size, view, heading, artifacts):
    """A link naming the Cross kind and a target opens Inside a head and Patching on that model: drawn, no
    traceback, nothing wider than the window."""
    context, page = new_page(browser, *size)
    try:
        query = urlencode({"model": str(folder), "text": SOURCE, "target": TARGET, "kind": "Cross", "view": view})
        page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
        page.get_by_role("button", name="Load this model").click()
        wait(page, f"() => [...document.querySelectorAll('h3')].some(h => h.innerText.includes({heading!r}))",
             f"the {view} view")
        wait_idle(page)
        _assert_no_exception(page, f"opening {view} on the Cross kind")
        if view == "Inside a head":  # its steps are drawn over the source's tokens, the query a target token
            wait(page, "() => document.querySelectorAll('.js-plotly-plot').length > 0", "the head's figures")
        assert page.evaluate(OVERFLOW) <= 0, f"{view} is wider than the window"
        page.screenshot(path=str(artifacts / f"seq2seq-{view.split()[0].lower()}-{size[0]}x{size[1]}.png"),
                        full_page=True)
        assert page.js_errors == [], page.js_errors
    finally:
        context.close()


@pytest.mark.parametrize("size", [(1000, 800), (1600, 1000)], ids=["1000x800", "1600x1000"])
def test_importance_maps_of_every_kind_in_the_browser(browser, streamlit_url, folder, size, artifacts):
    """Ablation effects on an encoder-decoder model: the exact map switches every head of every kind off alone and
    draws one map per kind (Encoder, Decoder, Cross), no traceback, nothing wider than the window."""
    context, page = new_page(browser, *size)
    try:
        query = urlencode({"model": str(folder), "text": SOURCE, "target": TARGET, "view": "Ablation effects"})
        page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
        page.get_by_role("button", name="Load this model").click()
        button = page.get_by_role("button", name=re.compile("Compute the exact map"))
        button.wait_for()
        wait_idle(page)
        button.click()
        wait(page, """() => ['Encoder', 'Decoder', 'Cross'].every(k => [...document.querySelectorAll('.gtitle')]
                 .some(t => t.textContent.startsWith(k + ':')))""", "a map per kind")
        wait_idle(page)
        _assert_no_exception(page, "the importance maps of every kind")
        assert page.evaluate(OVERFLOW) <= 0, "Ablation effects is wider than the window"
        page.screenshot(path=str(artifacts / f"seq2seq-importance-{size[0]}x{size[1]}.png"), full_page=True)
        assert page.js_errors == [], page.js_errors
    finally:
        context.close()
