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


def _tile_rows(fig) -> int:
    """Rows of the canvas that hold a tile (not only gaps)."""
    return int((fig.data[0].z > 0).any(axis=1).sum())


def test_overview_of_a_long_text_is_filled_by_its_tiles():
    # At 128 tokens MiniLM's overview was 1224 px tall with its tiles in 446 px of it.
    grid = torch.rand(6, 12, 128, 128)  # (L, H, Q, K)
    fig = plotting.tiled_figure(grid, [f"L{i}" for i in range(6)], [f"H{h}" for h in range(12)], width=900)
    heat = fig.data[0]
    cell_px = (900 - fig.layout.margin.l - fig.layout.margin.r) / heat.z.shape[1]
    tiles_px = heat.z.shape[0] * cell_px
    assert fig.layout.height - fig.layout.margin.t - fig.layout.margin.b >= tiles_px * 0.95
    assert fig.layout.height < 600, fig.layout.height
    # No tile has more cells than pixels: 12 tiles across ~850 px.
    assert fig.layout.meta["tile"] * 12 <= 900 and fig.layout.meta["tile"] < 128  # no more cells than pixels


def test_a_deep_model_wraps_its_layers_into_blocks_that_fit_a_screen():
    # SmolLM2: 30 layers x 9 heads, one column of layers was mostly white space on the first screen.
    grid = torch.rand(30, 9, 16, 16)  # (L, H, Q, K)
    grid[25, 4] = 0.0
    grid[25, 4, 3, 7] = 1.0  # a marker to find tile (25, 4)
    fig = plotting.tiled_figure(grid, [f"L{i}" for i in range(30)], [f"H{h}" for h in range(9)], width=900,
                                zscale="head", selected=(25, 4))
    heat, clicks = fig.data
    blocks = fig.layout.meta["blocks"]
    assert blocks > 1 and fig.layout.height < 700, (blocks, fig.layout.height)
    assert heat.z.shape[1] > heat.z.shape[0]  # wider than tall
    assert sorted(map(tuple, clicks.customdata)) == [(r, c) for r in range(30) for c in range(9)]
    # Tile (25, 4): its click point sits on the tile drawn from grid[25, 4], and the selection outlines it.
    i = [tuple(c) for c in clicks.customdata].index((25, 4))
    x0, y0 = int(clicks.x[i] - 7.5), int(clicks.y[i] - 7.5)
    tile = heat.z[y0:y0 + 16, x0:x0 + 16]
    assert tile[3, 7] == 255 and (tile[tile != 255] == 128).all()
    rect = fig.layout.shapes[0]
    assert (rect.x0, rect.y0) == (x0 - 0.5, y0 - 0.5)
    assert any("L25" in t for t in fig.layout.yaxis.ticktext)
