"""The Lesson in a real browser at 1000x800 and 1600x1000: first in the navigation, opened from the first-visit
hint's link, every step drawn with its figure and no exception, error, 'nan' or text cut with an ellipsis; Next walks
the steps, a reload keeps the step (the URL carries it). The page's sentence box is not drawn above the Lesson (each
step has its own input), and comes back on the Layer view. Visitors see no Deploy button. Screenshots of every step
go to the artifacts folder (MHA_VIZ_LESSON_SHOTS names another)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from test_browser import _assert_no_exception, _full_page_screenshot
from test_nothing_cut_browser import CUT

from mha_viz.app.lesson_steps import STEPS

from harness import new_page, settle, wait, wait_idle

N = len(STEPS)
HEADING = """(n) => [...document.querySelectorAll('[data-testid="stMain"] h4')]
  .some(h => h.innerText.startsWith(`Step ${n} of`))"""
# A step is drawn when its heading is there and, for a step with a figure, a plotly chart is drawn in the main column.
FIGURE = "() => document.querySelectorAll('[data-testid=\"stMain\"] .js-plotly-plot .main-svg').length > 0"
MAIN_TEXT = "() => document.querySelector('[data-testid=\"stMain\"]').innerText"
SENTENCE_BOX = "() => document.querySelectorAll('textarea[aria-label=\"Sentence\"]').length"
ALERTS = """() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stAlertContentError"], '
  + '[data-testid="stMain"] [data-testid="stAlertContentWarning"]')].map(e => e.innerText.slice(0, 200))"""


@pytest.mark.parametrize("width, height", [(1000, 800), (1600, 1000)])
def test_the_lesson_opens_first_and_every_step_draws_whole(browser, streamlit_url, artifacts, width, height):
    shots = Path(os.environ.get("MHA_VIZ_LESSON_SHOTS") or artifacts)
    shots.mkdir(parents=True, exist_ok=True)
    context, page = new_page(browser, width, height)
    try:
        page.goto(f"{streamlit_url}/?model=tiny", wait_until="domcontentloaded")
        wait(page, "() => document.querySelectorAll('.mhn .mhn-view').length > 0", "the views' navigation")
        wait_idle(page)
        assert page.locator(".mhn .mhn-view").first.inner_text() == "Lesson"
        assert page.locator('[data-testid="stAppDeployButton"]').count() == 0, "visitors must not see Deploy"
        page.locator(".mhn-hint a", has_text="Lesson").click()  # the first-visit hint's link
        for n in range(1, N + 1):
            if n > 1:
                page.get_by_role("button", name="Next →").click()
            wait(page, HEADING, f"step {n}'s heading", arg=n)
            if STEPS[n - 1].text:
                wait(page, FIGURE, f"step {n}'s figure")
            wait_idle(page)
            page.wait_for_timeout(400)  # plotly's relayout once the chart box settles
            settle(page)
            _assert_no_exception(page, f"opening step {n} at {width}x{height}")
            assert page.evaluate(ALERTS) == [], (n, page.evaluate(ALERTS))
            text = page.evaluate(MAIN_TEXT)
            assert not re.search(r"\b(nan|NaN|None)\b", text), (n, text[:2000])
            assert page.evaluate(CUT) == [], f"step {n}: text cut with an ellipsis at {width}x{height}"
            assert f"lesson={n}" in page.url, page.url
            # Opened from the hint, a fragment's rerun: the page must have been drawn whole again to drop the box.
            assert page.evaluate(SENTENCE_BOX) == 0, f"step {n}: the page's sentence box is above the Lesson"
            _full_page_screenshot(page, shots / f"lesson-{width}x{height}-step{n}.png")
        page.reload(wait_until="domcontentloaded")
        wait(page, HEADING, "the last step after a reload", arg=N)
        wait_idle(page)
        page.locator(".mhn .mhn-view[data-view=\"Layer\"]").click()
        wait(page, f"() => ({SENTENCE_BOX})() === 1", "the page's sentence box on the Layer view")
        wait_idle(page)
        assert not page.js_errors, page.js_errors
    finally:
        context.close()
