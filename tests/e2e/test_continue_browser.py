"""Continue in a real browser: pressed under the Layer grid, the model writes on; a second grid covers the sentence
and the written tokens, the written line names them, and the link carries ?write= so it reopens the same. In that
grid the step on screen lights the row that wrote its token in every head, with its top-5 and the chosen token's
probability, and hovering a written token shows the same (web/grid/written.js)."""
import re
import time
from urllib.parse import urlencode

from test_browser import _assert_no_exception

from harness import wait, wait_idle

TEXT = "anna met ben at the park . later ben gave the book to"  # in tiny's vocabulary
WRITTEN = re.compile(r"^Written: ")  # the panel's line (the sidebar lists "written: ..." models)
GRIDS = "() => document.querySelectorAll('.mhv-grid').length"


def test_continue_writes_and_the_link_reopens_it(page, streamlit_url):
    page.goto(f"{streamlit_url}/?{urlencode({'model': 'tiny', 'text': TEXT, 'view': 'Layer'})}",
              wait_until="domcontentloaded")
    wait(page, f"() => ({GRIDS})() === 1", "the Layer grid drawn")
    wait_idle(page)
    page.get_by_role("button", name="Continue", exact=True).click()
    wait(page, f"() => ({GRIDS})() === 2", "the continuation's grid drawn under the Layer grid")
    wait_idle(page)
    _assert_no_exception(page, "pressing Continue")
    written = page.locator("p").filter(has_text=WRITTEN).inner_text()
    assert "16 tokens" in written, written
    _steps_lit_in_the_grid(page)
    deadline = time.monotonic() + 30
    while "write=16" not in page.url and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "write=16" in page.url, page.url
    link = page.url
    page.goto(link, wait_until="domcontentloaded")
    wait(page, f"() => ({GRIDS})() === 2", "the link's continuation drawn")
    wait_idle(page)
    assert page.locator("p").filter(has_text=WRITTEN).inner_text() == written


def _steps_lit_in_the_grid(page):
    grid = page.locator(".mhv").nth(1)  # the continuation's grid, under the Layer grid
    info = grid.locator('[data-testid="mhv-info"]')
    n_prompt = grid.locator(".mhv-tok").count() - grid.locator(".mhv-tok-written").count()
    assert grid.locator(".mhv-tok-written").count() == 16
    shown = grid.locator(".mhv-grid")
    assert shown.get_attribute("data-step") == "0" and shown.get_attribute("data-row") == str(n_prompt - 1)
    lit = grid.locator(".mhv-row.mhv-row-step:not([hidden])")
    assert lit.count() == grid.locator(".mhv-head").count() > 1  # in every head of the layer
    text = info.inner_text()
    assert text.startswith("step 1: ") and "top-5: " in text and "(p = 0." in text, text
    grid.locator(".mhv-tok-written").nth(2).hover()  # the third written token: its step's row and words
    text = info.inner_text()
    assert text.startswith("step 3: ") and "top-5: " in text, text
    assert shown.get_attribute("data-step") == "2" and shown.get_attribute("data-row") == str(n_prompt + 1)
    assert "mhv-tok-step" in grid.locator(".mhv-tok-written").nth(2).get_attribute("class")
    page.mouse.move(0, 0)
    grid.locator(".mhv-tok").first.hover()
    page.mouse.move(0, 0)  # hovered nothing: back to the step on screen
    wait(page, "() => document.querySelectorAll('.mhv-grid')[1].dataset.step === '0'", "the step on screen lit again")
