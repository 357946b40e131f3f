"""The colour scales and the palette of heads every figure draws with (and the browser grid receives in its
payload, mha_viz/web/palette.py): one table, so a head is the same colour in every picture.
"""
from __future__ import annotations


def _scale(colors: list[str]) -> list[list]:
    return [[i / (len(colors) - 1), c] for i, c in enumerate(colors)]


# Spelled out rather than named: plotly.js's own "Blues" runs dark-to-light, the reverse of plotly.py's, and the
# fast path below hands names straight to plotly.js. White = no attention, dark = all of it.
ATTN_SCALE = _scale(["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c",
                     "#08306b"])


def sqrt_scale(scale: list[list]) -> list[list]:
    """A colour scale drawn with square-root contrast, the Layer grid's default (web/grid/colour.js CONTRASTS.sqrt): the
    colour at a weight w of the range's top is the linear scale's colour at sqrt(w), so a weight a quarter of the
    top is drawn half dark. The stops move (to position**2); the values, the hover and the colour bar's numbers stay
    the weights themselves."""
    return [[pos * pos, colour] for pos, colour in scale]


# An ablated head keeps its pattern, drawn grey, because its attention is still computed.
OFF_SCALE = _scale(["#ffffff", "#f0f0f0", "#d9d9d9", "#bdbdbd", "#969696", "#737373", "#525252", "#252525"])


DIFF_SCALE = [[0.0, "#2166ac"], [0.5, "#f7f7f7"], [1.0, "#b2182b"]]  # blue = less, red = more attention


# uint8 codes of tiled_figure: 0 gap (white), 1-127 ablated head (grey), 128-255 active head (blue).
TILE_SCALE = [
    [0.0, "#ffffff"], [0.002, "#ffffff"], [1 / 255, "#ececec"], [127 / 255, "#2b2b2b"],
    [127.5 / 255, "#ffffff"], [128 / 255, "#f7fbff"], [191 / 255, "#6baed6"], [1.0, "#08306b"],
]


# One colour per head of a layer (d3's category10, its grey swapped for indigo so no head looks switched off, then
# the lighter pairs), cycled past 20 heads.
HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#393b79", "#bcbd22",
                "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#9c9ede",
                "#dbdb8d", "#9edae5"]


OFF_COLOUR = "#bdbdbd"


def head_colour(head: int) -> str:
    return HEAD_COLOURS[head % len(HEAD_COLOURS)]


# Spelled out, as ATTN_SCALE: the fast path hands a name straight to plotly.js, whose named scales can run the other
# way from plotly.py's. White = at or below the random baseline, dark red = the largest score.
COMPOSITION_SCALE = _scale(["#ffffff", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d", "#99000d"])
