"""Every colour the head grid draws with, in one table: the grid receives it in its payload (`colours`), and the
notebook's SVG picture of a layer (notebook/svg.py) reads the same table, so the browser and the saved picture agree.

The attention scales and the heads' colours are the figures' own (mha_viz.plotting.colours); the rest is what a
picture of heads needs around them.
"""
from __future__ import annotations

from mha_viz.plotting.colours import ATTN_SCALE, HEAD_COLOURS, OFF_COLOUR, OFF_SCALE

# Around the heatmaps: the picture's ground, its words, token labels, a heatmap's frame, a head's name when off,
# a measured badge, and the hovered row's outline.
PICTURE = {"paper": "#ffffff", "ink": "#222222", "label": "#444444", "frame": "#cccccc", "ink_off": "#888888",
           "note": "#555555", "mark": "#d62728"}


def grid_colours() -> dict:
    """The `colours` of the grid's payload: the on and off colour stops (white to dark), one colour per head (the
    lines view), an off head's colour, and PICTURE."""
    return {"on": [c for _, c in ATTN_SCALE], "off": [c for _, c in OFF_SCALE], "heads": list(HEAD_COLOURS),
            "head_off": OFF_COLOUR, **PICTURE}
