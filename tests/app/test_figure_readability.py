"""What the screenshot matrix found in the plotly heatmaps, through the page (AppTest): token labels of
a long text drawn at 6 px, every one of them (unreadable, overlapping); colour bars at the far edge of a wide column,
away from the square they explain, or missing (Rollout, Inside a head, the pattern-shift maps); a title on top of
the "key →" axis title; Compare's heads nearly white on a long text. Where things land on screen, at 1000x800 too:
tests/e2e/test_screenshot_findings.py."""
from __future__ import annotations

import json

import pytest

from helpers import LONG_TEXT as LONG
from helpers import open_link
from page_steps import open_view

SHORT = "The keys to the old cabinet were on the table, so she took them."


def _charts(at) -> dict[str, dict]:
    """The page's plotly charts by their key (the part after Streamlit's prefix)."""
    out = {}
    for chart in at.get("plotly_chart"):
        key = chart.proto.id.rsplit("-", 1)[-1] if chart.proto.id else ""
        out[key] = json.loads(chart.proto.spec)
    return out


def _chart(at, key: str) -> dict:
    found = [fig for k, fig in _charts(at).items() if key in k]
    assert found, f"no chart {key!r} among {list(_charts(at))}"
    return found[0]


def _page(view: str, text: str = LONG):
    at = open_link({"model": "minilm", "text": text})
    return open_view(at, view)


def _token_axes(fig: dict):
    """(axis layout, pixels per token) of each token axis of a heatmap figure."""
    heat = [t for t in fig["data"] if t.get("type") == "heatmap"]
    n = len(heat[0]["x"])
    plot_h = fig["layout"]["height"] - fig["layout"]["margin"]["t"] - fig["layout"]["margin"]["b"]
    for name, axis in fig["layout"].items():
        if name.startswith(("xaxis", "yaxis")):
            yield name, axis, plot_h / n


@pytest.mark.parametrize("view, key", [("Compare", "cmp_row"), ("Compare", "cmpdiff"),
                                       ("Rollout & norms", "roll_fig"), ("Inside a head", "inside_pattern")])
def test_long_text_labels_are_readable_and_apart(view, key):
    """At 122 tokens every token was labelled at 6 px (Compare, the Inside-a-head pattern), forced one per row:
    now at least 8 px, and plotly picks every k-th token from the axis's drawn length (on a category axis it keeps
    labels 1.2 fonts apart), so they never overlap, also in a column narrower than planned (a browser test checks
    the drawn labels at 1000x800: tests/e2e/test_screenshot_findings.py)."""
    fig = _chart(_page(view), key)
    for name, axis, px in _token_axes(fig):
        assert axis["tickfont"]["size"] >= 8, f"{name}: {axis['tickfont']['size']} px labels"
        assert axis.get("tickmode") == "auto" and "tickvals" not in axis, name
        assert axis["tickfont"]["size"] * 1.2 > px, f"{name}: a row of {px:.1f} px holds no label, so thin them"


def test_short_text_labels_every_token():
    """18 tokens: a font plotly can fit on every row (1.2 fonts a row at most), so each token keeps its label."""
    fig = _chart(_page("Compare", SHORT), "cmp_row")
    for name, axis, px in _token_axes(fig):
        font = axis["tickfont"]["size"]
        assert font >= 8 and font * 1.2 <= px, (name, font, px)


@pytest.mark.parametrize("view, keys", [("All layers", ["focused_fig"]),
                                        ("Rollout & norms", ["roll_raw", "roll_fig", "norm_raw", "norm_fig"]),
                                        ("Inside a head", ["inside_pattern"])])
def test_every_heatmap_has_a_colour_bar_next_to_it(view, keys):
    """The enlarged head of All layers had its colour bar ~330 px right of the square (the figure stretched over a
    1150 px column); Rollout's first three maps and the Inside-a-head pattern had none. Each now has a bar, a strip
    under the square, and a width of its own: the square and its labels, no empty band beside them (where the bar
    stands on screen: tests/e2e/test_screenshot_findings.py)."""
    at = _page(view, SHORT)
    for key in keys:
        fig = _chart(at, key)
        heat = [t for t in fig["data"] if t.get("type") == "heatmap"][0]
        assert heat.get("showscale") is True, f"{key} has no colour bar"
        layout = fig["layout"]
        plot = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]  # the square's side
        assert "width" in layout and layout["width"] <= plot + 160, (key, layout.get("width"), plot)
        assert heat["colorbar"]["orientation"] == "h", key


def test_title_clears_the_key_axis_title():
    """The title of a square heatmap sat on the "key →" title above the labels (Inside a head, 122 tokens): the
    top margin now holds the title, the axis title and the rotated labels."""
    from mha_viz import plotting

    fig = _chart(_page("Inside a head"), "inside_pattern")
    labels = [t for t in fig["data"] if t.get("type") == "heatmap"][0]["x"]
    room = plotting._label_room(labels, fig["layout"]["xaxis"]["tickfont"]["size"])
    assert fig["layout"]["margin"]["t"] >= 26 + 14 + room


def test_compare_draws_weak_weights_visible_and_says_how():
    """Screenshot matrix: Compare's heads at 122 tokens were nearly white (one linear scale to the largest weight of
    the heads, one cell near it), while the Layer grid defaults to square-root contrast. Compare now draws with the
    same contrast, says so, and keeps the weights themselves as the values and the colour bar's range."""
    from mha_viz import plotting

    at = _page("Compare")
    fig = _chart(at, "cmp_row")
    heat = [t for t in fig["data"] if t.get("type") == "heatmap"]
    for trace in heat:
        assert trace["colorscale"] == [list(s) for s in plotting.sqrt_scale(plotting.ATTN_SCALE)], trace["colorscale"]
        assert trace["zmin"] == 0.0 and trace["zmax"] == heat[0]["zmax"]
    assert any("square-root contrast" in c.value for c in at.caption)
    # At a quarter of the top a weight gets the colour half way along the scale.
    stops = plotting.sqrt_scale(plotting.ATTN_SCALE)
    middle = len(stops) // 2
    assert abs(stops[middle][0] - 0.25) < 1e-9 and stops[middle][1] == plotting.ATTN_SCALE[middle][1]


def test_rollout_and_norm_maps_draw_weak_values_visible_and_say_how():
    """Screenshot matrix: on SmolLM2's 121-token text the Rollout maps were nearly white (linear colours to each map's
    top, which the first token's column sets). All four maps now use the Layer grid's square-root contrast, the page
    says so, and the values and colour bars stay the numbers themselves."""
    from mha_viz import plotting

    at = _page("Rollout & norms")
    for key in ("roll_raw", "roll_fig", "norm_raw", "norm_fig"):
        heat = [t for t in _chart(at, key)["data"] if t.get("type") == "heatmap"][0]
        assert heat["colorscale"] == [list(s) for s in plotting.sqrt_scale(plotting.ATTN_SCALE)], key
        assert heat["zmin"] == 0.0 and heat["zmax"] > 0.0 and heat["showscale"], key
    assert any("square-root contrast" in c.value for c in at.caption)
