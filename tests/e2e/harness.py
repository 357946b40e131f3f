"""The one browser harness: start/stop the app on loopback, launch Debian's Chromium, wait for Streamlit to be idle.

Used by the real-browser tests (tests/e2e/conftest.py) and by the benchmarks (benchmarks/_app.py), so both drive
the same server the same way. Servers listen on 127.0.0.1 only and are stopped by their own PID.
"""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # tests/e2e/harness.py -> repo root
sys.path.insert(0, str(REPO / "deploy"))
# The app launcher lives with the deployment, which must not depend on the tests; re-exported for tests and benchmarks.
from launch import HEALTH_TIMEOUT_S, Server, ServerError, free_port, healthy, tail  # noqa: E402,F401

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

# Streamlit is idle when no status widget ("Running..."/"Stop") shows and no element is greyed as stale: the moment
# a user can act again.
IDLE = """() => {
  const running = [...document.querySelectorAll('[data-testid="stStatusWidget"]')]
    .some(el => el.offsetParent !== null || el.getClientRects().length > 0);
  return !running && document.querySelectorAll('[data-stale="true"]').length === 0;
}"""

def chromium_missing() -> str | None:
    """Why the browser cannot start here, or None."""
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the `playwright` Python package is not installed"
    return None


@contextmanager
def chromium():
    """Headless Debian Chromium through Playwright (it cannot download its own browser here)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser, width: int = 1400, height: int = 1000):
    """(context, page): a fresh browser context at width x height, 90 s default timeout, the page's JS errors
    collected in `page.js_errors`. The one way tests open a page at a viewport (conftest's `page`, the layout
    tests' two sizes). Close the context when done."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.js_errors = []
    page.on("pageerror", lambda exc: page.js_errors.append(str(exc)))
    return context, page


def files_page(browser, files: dict[str, str], origin: str):
    """(context, page): `new_page` on a blank document at `origin`, where each path of `files` ({"/bundle.js":
    its text}) is served (a .js path as JavaScript) and any other path is a 404: the grid's modules in a browser
    with no server. Close the context when done."""
    context, page = new_page(browser)
    page.route(f"{origin}/**", lambda route: route.fulfill(
        status=200 if route.request.url[len(origin):] in files or route.request.url == f"{origin}/" else 404,
        content_type="text/javascript" if route.request.url.endswith(".js") else "text/html",
        body=files.get(route.request.url[len(origin):], "<!doctype html><body></body>")))
    page.goto(f"{origin}/")
    return context, page


def settle(page) -> None:
    """Two animation frames, so the last redraw is on screen."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def page_problems(page) -> str:
    """Streamlit exceptions and error boxes on the page, for failure messages."""
    texts = page.evaluate("""() => [...document.querySelectorAll(
        '[data-testid="stException"], [data-testid="stAlertContentError"], [data-testid="stAlertContentWarning"]'
      )].map(e => e.innerText.slice(0, 600))""")
    return "\n---\n".join(texts) or "(no exception or error box on the page)"


def wait(page, js: str, what: str, arg=None) -> None:
    """Wait for the JS predicate `js` to be truthy, bounded by the page's default timeout (new_page: 90 s; a test
    of many sessions sets a longer one with page.set_default_timeout); on timeout fail the test saying what was
    awaited, what the page shows and its JS errors. The one wait of the browser tests."""
    try:
        page.wait_for_function(js, arg=arg, polling=200)
    except Exception as err:
        if type(err).__name__ != "TimeoutError":
            raise
        import pytest  # only here: the benchmarks import this module without pytest's runner

        pytest.fail(f"timed out waiting for {what} ({str(err).splitlines()[0]}).\n"
                    f"Page shows: {page_problems(page)}\nJS errors: {getattr(page, 'js_errors', [])}")


def wait_idle(page, what: str = "Streamlit to finish its rerun (status widget gone, no stale elements)") -> None:
    wait(page, IDLE, what)


def open_app(browser, url: str, params: dict, ready: str, what: str, width: int = 1000, height: int = 800):
    """(context, page): a fresh page at width x height on the app with query `params`, once the JS predicate
    `ready` holds (`what` names it for the failure message) and Streamlit is idle. Close the context when done."""
    from urllib.parse import urlencode

    context, page = new_page(browser, width, height)
    try:
        page.goto(f"{url}/?{urlencode(params)}", wait_until="domcontentloaded")
        wait(page, ready, what)
        wait_idle(page)
    except BaseException:  # a failed wait closes what it opened, as the tests' own finally would have
        context.close()
        raise
    return context, page


# The heads-off line of the summary above the views, as one string (several sessions' pages are checked by it).
HEADS_OFF = """() => [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
  .map(e => e.innerText).filter(t => t.startsWith('Heads off')).join(' | ')"""


# -- the Layer view's head grid (mha_viz/app/components/head_grid): probes shared by the tests and benchmarks --------
GRID_DRAWN = "() => document.querySelectorAll('.mhv-grid .mhv-head canvas').length"
GRID_TITLES = "() => [...document.querySelectorAll('.mhv-grid .mhv-title')].map(t => t.textContent)"
GRID_TOKENS = "() => [...document.querySelectorAll('.mhv-strip .mhv-tok')].map(t => t.textContent)"


def grid_switch(page, name: str):
    """The on/off switch in the corner of head `name` ("L0 H3") in the browser-drawn grid."""
    return page.locator(f'.mhv-grid .mhv-switch[aria-label="{name}"]')


# A Lesson step is drawn to its foot: the Back/Next bar under its figure is there beside the one at its top. A page
# opened by its link can be idle for a moment before its first run has drawn the step (its question among it).
STEP_DRAWN = """() => [...document.querySelectorAll('[data-testid="stMain"] button')]
  .filter(b => b.innerText.includes('Next') && !b.closest('[data-stale="true"]')).length >= 2"""
# A Lesson step's prediction not yet answered: its choices, in the main column.
OPEN_PREDICTION = ('[data-testid="stMain"] [data-testid="stRadio"]:not(:has(input:checked)) '
                   '[data-testid="stRadioOption"]')
# (the unanswered questions' "Pick an answer" notes, the questions) in the main column: a pick's run has ended when
# the first falls or the second grows (a step that asks on). Idle alone is no proof: right after a click the page
# is idle for a moment before its run starts, and the radio shows the pick before the server has it.
_PENDING = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  return [main.innerText.split('Pick an answer:').length - 1, main.querySelectorAll('[data-testid="stRadio"]').length];
}"""


def answer_predictions(page, then) -> None:
    """Pick the first choice of each prediction a Lesson step asks (at most 4), waiting for the step to have drawn
    what the pick reveals, then calling `then(page)`, so the step draws its figure and its measured lines."""
    for _ in range(4):
        choices = page.locator(OPEN_PREDICTION)
        if choices.count() == 0:
            return
        notes, asked = page.evaluate(_PENDING)
        choices.first.locator("div").last.click()
        page.wait_for_function(f"() => {{ const [n, q] = ({_PENDING})(); return n < {notes} || q > {asked}; }}",
                               polling=100)
        then(page)
