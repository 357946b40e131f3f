"""A written model (compiled from a RASP program by Tracr) in a real browser, at 1000x800 and 1600x1000: the grid
draws its heads, the page shows the program's output and the program line behind each head, and switching the
written previous-token head off in the grid changes the program's output on the page."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest
from test_browser import _assert_no_exception, _full_page_screenshot

from harness import GRID_DRAWN, grid_switch, wait, wait_idle

TEXT = "a b c d a b c d"


@pytest.mark.parametrize("size", [(1000, 800), (1600, 1000)])
def test_written_induction_in_the_browser(page, streamlit_url, artifacts, size):
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(f"{streamlit_url}/?{urlencode({'model': 'written-induction', 'text': TEXT})}",
              wait_until="domcontentloaded")
    wait(page, f"() => ({GRID_DRAWN})() >= 1", "the written model's heads drawn in the grid")
    wait(page, "() => document.body.innerText.includes(\"The program's output\")", "the program's output")
    wait_idle(page)
    _assert_no_exception(page, "opening a written model")
    body = page.inner_text("body")
    assert "d→a" in body, body[-1500:]
    assert "Select(previous" in body and "written, not learned" in body.lower(), body[-1500:]
    _full_page_screenshot(page, artifacts / f"written-induction-{size[0]}x{size[1]}.png")
    # A layer with fewer heads than a row holds draws them at a row's tile size, not stretched across the grid.
    widths = page.evaluate("""() => [document.querySelector('.mhv-grid').clientWidth,
        ...[...document.querySelectorAll('.mhv-grid .mhv-head canvas')].map(c => c.getBoundingClientRect().width)]""")
    grid_width, tiles = widths[0], widths[1:]
    assert 0 < len(tiles) < 4 and all(w <= grid_width / 3 for w in tiles), widths
    # Its heading counts one head as one ("its one head", not "all 1 heads").
    heading = page.locator('[data-testid="mhv-heading"]').first.inner_text()
    assert heading == "Layer 0: its one head", heading
    grid_switch(page, "L0 H0").click()
    wait(page, "() => document.body.innerText.includes('with these heads off')", "the output with the head off")
    wait_idle(page)
    _assert_no_exception(page, "switching the written previous-token head off")
    assert "changed at" in page.inner_text("body")
