"""Heatmaps that keep their aspect (the square heatmaps, the All-layers overview) leave no band of white under them
in a narrow window (1000x800). Plotly keeps a square square by shrinking it inside a figure whose height
the server fixed, so in Rollout's ~260 px columns a 196 px square stood over 196 px of white (Ablation effects: 249
px under a 103 px square). The chart's height now follows its column's width (common.fitted_chart)."""
from __future__ import annotations

import pytest
from test_browser import _assert_no_exception

from harness import open_app

TEXT = "The keys to the old cabinet were on the table, so she took them."
CHARTS = "[data-testid=stPlotlyChart]"
# Each drawn heatmap's plot area and the white under it: down to its colour bar strip where it has one (the strip
# sits at the figure's bottom), else to the chart's bottom edge.
BLANK = f"""() => [...document.querySelectorAll('{CHARTS}')]
  .filter(el => el.querySelector('.heatmaplayer') && el.querySelector('.nsewdrag'))
  .map(el => {{
    const box = el.getBoundingClientRect(), plot = el.querySelector('.nsewdrag').getBoundingClientRect();
    const bar = el.querySelector('.colorbar'), strip = bar && bar.getBoundingClientRect();
    const under = strip && strip.height > 0 && strip.top > plot.bottom ? strip.top : box.bottom;
    return {{key: [...el.closest('[class*="st-key-"]')?.classList || []].join(' '),
             plot: plot.height, blank: under - plot.bottom}};
  }})"""
SQUARES = {  # view -> (link params, keys of its charts that keep their aspect)
    "Rollout & norms": ({}, ["roll_raw", "roll_fig", "norm_raw", "norm_fig"]),
    "Ablation effects": ({"off": "L0H3"}, ["fx_base", "fx_abl", "fx_diff"]),
    "All layers": ({}, ["overview", "focused_fig"]),
}


@pytest.mark.parametrize("view", list(SQUARES))
def test_square_heatmaps_leave_no_blank_band_at_1000x800(browser, streamlit_url, view):
    params, keys = SQUARES[view]
    ready = (f"() => {len(keys)} <= [...document.querySelectorAll('{CHARTS}')]"
             ".filter(el => el.querySelector('.heatmaplayer .hm')).length")
    context, page = open_app(browser, streamlit_url, {"model": "minilm", "text": TEXT, "view": view, **params},
                             ready, f"the {view} view's heatmaps")
    try:
        _assert_no_exception(page, f"opening {view}")
        page.wait_for_timeout(500)  # plotly's own relayout after the chart box settles
        found = {next((k for k in keys if f"st-key-{k}" in c["key"].split()), None): c for c in page.evaluate(BLANK)}
        missing = [k for k in keys if k not in found]
        assert not missing, f"charts not found: {missing}; found {list(found)}"
        for key in keys:
            plot, blank = found[key]["plot"], found[key]["blank"]
            assert plot > 60, f"{view} {key}: the heatmap is {plot:.0f} px tall"
            assert blank < max(24.0, 0.12 * plot), \
                f"{view} {key}: {blank:.0f} px of white under a {plot:.0f} px heatmap at 1000x800"
    finally:
        context.close()
