"""Clicking a tile of the all-layers overview focuses that head (a real click, in the real browser)."""
from urllib.parse import urlencode

from test_browser import _assert_no_exception

from harness import wait, wait_idle

_TILE_CENTRE = """([layer, head]) => {
  const plot = [...document.querySelectorAll('.js-plotly-plot')].find(p => p.data && p.data.length === 2
      && p.data[1].type === 'scatter' && p.data[1].customdata);
  if (!plot) return null;
  const trace = plot.data[1];
  const i = trace.customdata.findIndex(c => c[0] === layer && c[1] === head);
  const xa = plot._fullLayout.xaxis, ya = plot._fullLayout.yaxis, box = plot.getBoundingClientRect();
  return [box.left + xa._offset + xa.l2p(trace.x[i]), box.top + ya._offset + ya.l2p(trace.y[i])];
}"""


def test_clicking_a_tile_focuses_its_head(browser, streamlit_url, page):
    query = urlencode({"model": "minilm", "text": "Birds sing early in the morning.", "view": "All layers"})
    page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
    wait(page, f"() => ({_TILE_CENTRE})([3, 5]) !== null", "the overview with its clickable tiles")
    wait_idle(page)
    _assert_no_exception(page, "opening the overview")
    page.locator('.js-plotly-plot').filter(has=page.locator('.scatterlayer')).first.scroll_into_view_if_needed()
    x, y = page.evaluate(_TILE_CENTRE, [3, 5])
    page.mouse.click(x, y)
    wait(page, """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                     .some(t => t.textContent === 'L3 H5')""", "the focused head L3 H5 drawn large")
    wait_idle(page)
    _assert_no_exception(page, "clicking a tile")
    picker = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stSelectbox"]')]
        .filter(e => e.innerText.includes('Focused head')).map(e => e.outerHTML).join('')""")
    assert "L3 H5" in picker, picker[:2000]
