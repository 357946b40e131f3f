"""Figures carry what the views promise: unique axes for repeated tokens, escaped labels, hover fields, tiles."""
import torch

from mha_viz import plotting


def _pattern(n):
    return torch.softmax(torch.randn(n, n, generator=torch.Generator().manual_seed(0)), dim=-1)  # (Q, K)


def test_repeated_tokens_keep_their_own_rows():
    tokens = ["the", "cat", "saw", "the", "dog"]
    fig = plotting.head_figure(_pattern(5), tokens, "L0 H0")
    x = list(fig.data[0].x)
    assert len(set(x)) == 5  # plotly would merge two equal "the" categories into one
    assert [label.replace("\u200b", "") for label in x] == tokens
    assert "query" in fig.data[0].hovertemplate and "key" in fig.data[0].hovertemplate
    assert fig.data[0].z.dtype.name == "float32"


def test_labels_are_text_not_html():
    tokens = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "a\x00b", "\n"]
    fig = plotting.head_figure(_pattern(4), tokens, "<b>title</b>")
    for label in fig.data[0].x:
        assert "<" not in label and ">" not in label
    assert "\x00" not in "".join(fig.data[0].x)
    assert "<b>" not in fig.layout.title.text


def test_off_heads_are_grey_and_titled():
    fig = plotting.head_figure(_pattern(3), ["a", "b", "c"], "L1 H2", off=True)
    assert fig.layout.title.text.endswith("(off)")
    def scale(f):
        return [list(stop) for stop in f.data[0].colorscale]

    assert scale(fig) == plotting.OFF_SCALE
    assert scale(plotting.head_figure(_pattern(3), ["a", "b", "c"], "x")) == plotting.ATTN_SCALE


def test_fast_figures_serialise_like_validated_ones():
    import json

    import plotly.graph_objects as go

    fig = plotting.head_figure(_pattern(4), ["a", "b", "c", "d"], "L0 H0")
    fast = json.loads(fig.to_json())
    slow = json.loads(go.Figure(fig.to_dict()).to_json())  # the same spec through plotly's validation
    assert fast["layout"]["template"] == slow["layout"]["template"] or slow["layout"]["template"] == {}
    assert fast["data"][0]["type"] == "heatmap" and fast["layout"]["yaxis"]["autorange"] == "reversed"
    assert fast["data"][0]["hovertemplate"] == slow["data"][0]["hovertemplate"]


def test_tiled_figure_places_every_head_once():
    grid = torch.rand(3, 4, 5, 5)  # (R, C, Q, K)
    fig = plotting.tiled_figure(grid, ["L0", "L1", "L2"], ["H0", "H1", "H2", "H3"], off={(1, 2)})
    heat, clicks = fig.data
    assert heat.z.shape == (3 * 6 - 1, 4 * 6 - 1)  # tiles plus one-cell gaps
    assert len(clicks.customdata) == 12
    assert [list(c) for c in clicks.customdata][6] == [1, 2]
    # one byte per cell: the ablated tile uses the grey codes (1-127), the others the blue codes (128-255)
    assert heat.z.dtype.name == "uint8"
    assert (heat.z[6:11, 12:17] < 128).all() and (heat.z[6:11, 12:17] >= 1).all()
    assert (heat.z[0:5, 0:5] >= 128).all() and (heat.z[5, :] == 0).all()


def test_long_texts_are_pooled_in_the_overview_keeping_strong_weights():
    grid = torch.zeros(2, 2, 300, 300)  # (R, C, Q, K)
    grid[1, 0, 250, 17] = 1.0  # one sharp weight must survive the shrinking
    fig = plotting.tiled_figure(grid, ["L0", "L1"], ["H0", "H1"])
    tile = plotting.MAX_TILE
    assert fig.data[0].z.shape == (2 * (tile + 1) - 1, 2 * (tile + 1) - 1)
    assert fig.data[0].z[tile + 1:, :tile].max() == 255  # the strongest weight is still drawn at full colour
