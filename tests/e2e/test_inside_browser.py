"""The token views in a real browser: click a token in the strip, and both "Inside a head" and "Follow a token"
follow it; the link carries it. Also the README screenshots of both views (MiniLM, SmolLM2, tiny), copied to
assets/ only with MHA_VIZ_UPDATE_SCREENSHOT=1 so a plain run leaves git clean."""
from __future__ import annotations

import os
import re
import shutil
from urllib.parse import parse_qs, urlparse

import pytest
from test_browser import REPO, _assert_no_exception, _settle

from harness import open_app, wait, wait_idle

SCREENSHOT_MAX_BYTES = 400_000
# The title of the figure each view draws (plotly writes a figure title as .gtitle).
_TITLES = "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')].map(t => t.textContent)"
# Page coordinates of cell (row, key) of the clickable pattern: its transparent scatter point.
_CELL_CENTRE = """(row, key) => {
  const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p.data && p.data.length === 2
      && p.data[1].type === 'scatter' && p.data[1].customdata);
  if (!plot) return null;
  const n = Math.round(Math.sqrt(plot.data[1].customdata.length));
  const xa = plot._fullLayout.xaxis, ya = plot._fullLayout.yaxis, box = plot.getBoundingClientRect();
  return [box.left + xa._offset + xa.l2p(key), box.top + ya._offset + ya.l2p(row)];
}"""


def _open(browser, url: str, model: str, text: str, view: str, layer: int = 0):
    """(context, page) at 1400x1000 on `view`, once its token strip is drawn; close the context when done."""
    context, page = open_app(browser, url, {"model": model, "text": text, "view": view, "layer": layer},
                             "() => document.querySelectorAll('[data-testid=\"stButtonGroup\"] button').length > 0",
                             f"the token strip of {view}", 1400, 1000)
    try:
        _assert_no_exception(page, f"opening {view} for {model}")
    except BaseException:
        context.close()
        raise
    return context, page


def _click_token(page, token: str) -> None:
    # A repeated token's pill carries its position as subscript digits ("the₃").
    pill = page.locator('[data-testid="stButtonGroup"] button').filter(
        has_text=re.compile(f"^{re.escape(token)}[₀-₉]*$"))
    pill.first.click()


def _switch_view(page, view: str) -> None:
    page.locator(f'nav[aria-label=Views] button[data-view="{view}"]').click()


def _wait_title(page, fragment: str, what: str) -> None:
    wait(page, f"() => ({_TITLES})().some(t => t.includes({fragment!r}))", what)
    wait_idle(page)


def test_clicking_a_token_moves_both_views(browser, streamlit_url, artifacts):
    context, page = _open(browser, streamlit_url, "minilm", "Dogs chase cats in the yard.", "Inside a head")
    try:
        _token_clicks_move_both_views(page)
    except BaseException:
        page.screenshot(path=str(artifacts / "FAILED-test_clicking_a_token_moves_both_views.png"), full_page=True)
        raise
    finally:
        context.close()


def _token_clicks_move_both_views(page) -> None:
    _click_token(page, "cats")
    _wait_title(page, "query cats", "Inside a head to open the clicked token 'cats'")
    _assert_no_exception(page, "clicking 'cats'")
    assert parse_qs(urlparse(page.url).query).get("token") == ["3"], page.url

    _switch_view(page, "Follow a token")
    _wait_title(page, "Where “cats” (position 3)", "Follow a token to follow the same token")
    # One heatmap row per head of the layer, the sentence in each row.
    rows = page.evaluate("""() => { const p = [...document.querySelectorAll('.js-plotly-plot')]
        .find(p => p.data && p.data[0].type === 'heatmap' && p.data[0].texttemplate);
        return p ? [p.data[0].y.length, p.data[0].text[0].join(' ')] : null; }""")
    assert rows and rows[0] == 12 and "dogs chase cats" in rows[1], rows

    _click_token(page, "dogs")
    _wait_title(page, "Where “dogs” (position 1)", "Follow a token to follow the newly clicked 'dogs'")
    _switch_view(page, "Inside a head")
    _wait_title(page, "query dogs", "Inside a head to show 'dogs', clicked in the other view")
    assert parse_qs(urlparse(page.url).query).get("token") == ["1"], page.url

    # A click on a cell of the head's pattern opens that cell's row: row 2 ("chase"), key 5.
    wait(page, f"() => ({_CELL_CENTRE})(2, 5) !== null", "the clickable pattern")
    page.locator('.js-plotly-plot').filter(has=page.locator('.scatterlayer')).first.scroll_into_view_if_needed()
    x, y = page.evaluate(f"() => ({_CELL_CENTRE})(2, 5)")
    page.mouse.click(x, y)
    _wait_title(page, "query chase", "Inside a head to open the clicked row 'chase'")
    assert parse_qs(urlparse(page.url).query).get("token") == ["2"], page.url
    _assert_no_exception(page, "the whole session")
    assert not page.js_errors, f"JavaScript errors in the page: {page.js_errors}"


SHOTS = {  # model: (text, token to click, layer)
    "minilm": ("The keys to the old cabinet are on the table, so Anna gave the keys to Ben.", "keys", 2),
    "smollm2": ("Alice put the book on the shelf, and later Alice took the", "␣took", 3),  # the token " took"
    "tiny": ("the keys to the cabinet are on the table .", "are", 1),
}


@pytest.mark.parametrize("model", list(SHOTS))
def test_both_views_draw_for_each_model(browser, streamlit_url, artifacts, model):
    text, token, layer = SHOTS[model]
    context, page = _open(browser, streamlit_url, model, text, "Inside a head", layer)
    try:
        _click_token(page, token)
        _wait_title(page, f"query {token}", f"Inside a head on {token!r} for {model}")
        _shot(page, artifacts, f"inside-{model}-head.png", "Inside a head", height=1900)  # steps, how heads combine
        _switch_view(page, "Follow a token")
        _wait_title(page, f"Where “{token}”", f"Follow a token on {token!r} for {model}")
        _shot(page, artifacts, f"inside-{model}-follow.png", "Follow a token")
        _assert_no_exception(page, f"both views for {model}")
    except BaseException:
        page.screenshot(path=str(artifacts / f"FAILED-both-views-{model}.png"), full_page=True)
        raise
    finally:
        context.close()


def _shot(page, artifacts, name: str, heading: str, height: int = 1000) -> None:
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": height})
    wait_idle(page)
    page.evaluate("() => document.querySelector('.mhn-hint')?.remove()")  # the first-visit hint, not the view
    page.evaluate("""(h) => [...document.querySelectorAll('h3')].find(e => e.textContent.startsWith(h))
        .scrollIntoView({block: 'start'})""", heading)
    _settle(page)
    path = artifacts / name
    try:
        page.screenshot(path=str(path))
    finally:
        page.set_viewport_size(size)
    size = path.stat().st_size
    assert size < SCREENSHOT_MAX_BYTES, f"{name} is {size:,} bytes; keep it under {SCREENSHOT_MAX_BYTES:,}"
    if os.environ.get("MHA_VIZ_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(path, REPO / "assets" / name)
