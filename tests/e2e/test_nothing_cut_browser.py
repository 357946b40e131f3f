"""Nothing on the page is cut at 1000x800: the screenshot matrix found metric values that Streamlit cut
with an ellipsis ("+1…" for a sum of head effects, "1.9438 n…" for a KL divergence), labels cut the same way, a head
picker that showed "L0 H(" and a chart legend drawn over its axis title. Checked on the views where they were seen,
in a real browser at that narrow size. Also: a square heatmap's colour-bar title ("weight") drawn over
the top edge of its bar (Rollout & norms, Inside a head)."""
from __future__ import annotations

import pytest
from test_browser import _assert_no_exception

from harness import open_app

TEXT = "Anna met Ben at the park. Later Ben gave the book to"

# Text the page cut: every element of the main column whose text is wider than its box and whose style ends it with
# an ellipsis (the browser then draws one), and every select box whose chosen value is wider than the box (the
# browser clips it), with the text it holds. The heads-off summary's lines are left out: they are cut on purpose,
# to one line each, and said in full below the view.
CUT = """() => [...document.querySelectorAll('[data-testid="stMain"] *')]
  .filter(el => el.offsetParent !== null && el.scrollWidth > el.clientWidth + 1
          && !el.closest('.st-key-heads_off_summary')
          && (getComputedStyle(el).textOverflow === 'ellipsis'
              || (el.tagName === 'INPUT' && el.closest('[data-testid="stSelectbox"]'))))
  .map(el => (el.innerText || el.value || '').slice(0, 80))"""
# Metric labels and values wider than their metric's box (drawn over the next column when not cut).
SPILL = """() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stMetric"]')]
  .flatMap(m => [...m.querySelectorAll('[data-testid="stMetricLabel"], [data-testid="stMetricValue"]')]
    .filter(el => el.getBoundingClientRect().right > m.getBoundingClientRect().right + 1
                  || el.scrollWidth > el.clientWidth + 1)
    .map(el => el.innerText.slice(0, 80)))"""
# Plotly legends that overlap their own chart's x-axis title: (chart title, legend box, axis title box).
OVERLAP = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(p => {
  const leg = p.querySelector('.legend'), title = p.querySelector('.xtitle');
  if (!leg || !title || !title.textContent) return [];
  const a = leg.getBoundingClientRect(), b = title.getBoundingClientRect();
  const hit = a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  return hit ? [[p.querySelector('.gtitle')?.textContent || '', title.textContent]] : [];
})"""
# Colour bars whose title is drawn over the bar itself: (chart title, colour bar title).
BAR_TITLE = """() => [...document.querySelectorAll('.js-plotly-plot .colorbar')].flatMap(bar => {
  const title = bar.querySelector('.cbtitle text'), fill = bar.querySelector('.cbfill');
  if (!title || !fill || !title.textContent) return [];
  const a = title.getBoundingClientRect(), b = fill.getBoundingClientRect();
  const hit = a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  return hit ? [[bar.closest('.js-plotly-plot').querySelector('.gtitle')?.textContent || '', title.textContent]] : [];
})"""
# Words written in heatmap cells that are wider than their cell (they run into the next one: Follow a token at
# 1000x800 drew "cabinet" over "were"): (chart title, the word, its width, the cell's).
CELL_TEXT = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(p => {
  const area = p.querySelector('.nsewdrag'), trace = (p.data || [])[0];
  if (!area || !trace || trace.type !== 'heatmap' || !trace.x) return [];
  const cell = area.getBoundingClientRect().width / trace.x.length;
  return [...p.querySelectorAll('.heatmaplayer text')]
    .filter(t => t.textContent && t.getBoundingClientRect().width > cell + 0.5)
    .map(t => [p.querySelector('.gtitle')?.textContent || '', t.textContent,
               Math.round(t.getBoundingClientRect().width), Math.round(cell)]);
})"""
VIEWS = {  # view -> the JS predicate that says it is drawn
    "Patching": "() => [...document.querySelectorAll('[data-testid=stMetric]')].length >= 5"
                " && [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
                ".some(t => t.textContent.startsWith('Top-'))",
    "Inside a head": "() => [...document.querySelectorAll('[data-testid=stMetric]')].length >= 4",
    "Rollout & norms": "() => document.querySelectorAll('.js-plotly-plot .colorbar .cbtitle text').length >= 4",
    "Follow a token": "() => document.querySelectorAll('.js-plotly-plot .heatmaplayer text').length > 0",
}
# The model and text of each view's check: Follow a token needs words longer than its cells, which MiniLM's
# sentence has.
OPEN = {"Follow a token": ("minilm", "The keys to the old cabinet were on the table, so she took them.")}


@pytest.mark.parametrize("view", list(VIEWS))
def test_nothing_is_cut_at_1000x800(browser, streamlit_url, view):
    model, text = OPEN.get(view, ("tiny", TEXT))
    context, page = open_app(browser, streamlit_url, {"model": model, "text": text, "view": view}, VIEWS[view],
                             f"the {view} view")
    try:
        _assert_no_exception(page, f"opening {view}")
        page.wait_for_timeout(500)  # plotly's own relayout after the chart box settles
        assert page.evaluate(CUT) == [], f"{view}: text cut with an ellipsis at 1000x800"
        assert page.evaluate(SPILL) == [], f"{view}: metric text wider than its box at 1000x800"
        assert page.evaluate(OVERLAP) == [], f"{view}: a legend drawn over its chart's axis title at 1000x800"
        assert page.evaluate(BAR_TITLE) == [], f"{view}: a colour bar's title drawn over the bar at 1000x800"
        assert page.evaluate(CELL_TEXT) == [], f"{view}: words wider than their heatmap cells at 1000x800"
        assert not page.js_errors, page.js_errors
    finally:
        context.close()
