"""Continue in a real browser: pressed under the Layer grid, the model writes on; a second grid covers the sentence
and the written tokens, the written line names them, and the link carries ?write= so it reopens the same."""
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
    deadline = time.monotonic() + 30
    while "write=16" not in page.url and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "write=16" in page.url, page.url
    link = page.url
    page.goto(link, wait_until="domcontentloaded")
    wait(page, f"() => ({GRIDS})() === 2", "the link's continuation drawn")
    wait_idle(page)
    assert page.locator("p").filter(has_text=WRITTEN).inner_text() == written
