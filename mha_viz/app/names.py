"""How the page writes a head, a layer and a token: one spelling each, formatted and parsed here only.

The browser components receive the spellings in their payload (`grid_names`: layers and heads) instead of a copy of
the format in JavaScript, so a head reads "L3 H2" in the grid, the switches, the URL notices and every figure.
A token is written one way everywhere (`token_label`, on plotting.token_text, which the figures use too):
control characters made visible (a newline is ↵), a leading space as ␣ (" She" reads ␣She), cut at `limit`.
Where the same label appears twice in one picker, `distinct_labels` adds the position, so "the" at 3 and "the" at
8 can be told apart (and picked apart: a picker keys its options by label).
"""
from __future__ import annotations

import re

from mha_viz import plotting
from mha_viz.contract import Head

_HEAD_NAME = re.compile(r"^L(\d+) H(\d+)$")
# What a link may write for a head: "L0H3", "l0 h3", "0.3", "0:3", "0-3", "0_3".
_HEAD_IN_LINK = re.compile(r"^\s*L?(\d{1,4})[\s.:_-]*H?(\d{1,4})\s*$", re.IGNORECASE)
MAX_HEADS_IN_LINK = 2000
_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def layer_name(layer: int) -> str:
    """3 -> "L3"."""
    return f"L{layer}"


def head_name(head: Head) -> str:
    """(2, 11) -> "L2 H11", the one spelling of a head on the page."""
    return f"{layer_name(head[0])} H{head[1]}"


def parse_head(name: str) -> Head:
    """"L2 H11" -> (2, 11); the inverse of `head_name`."""
    match = _HEAD_NAME.match(name)
    if not match:
        raise ValueError(f"{name!r} is not a head name like 'L2 H11'")
    return int(match.group(1)), int(match.group(2))


def link_heads(heads) -> str:
    """[(0, 3), (2, 11)] -> "L0H3,L2H11": heads as a link carries them (no spaces to escape)."""
    return ",".join(head_name(h).replace(" ", "") for h in sorted(heads))


def parse_link_heads(raw: str) -> tuple[list[Head], list[str]]:
    """"0.3,2.11" or "L0H3,L2H11" -> [(0, 3), (2, 11)], plus the items that did not parse."""
    heads, bad = [], []
    for item in raw.split(",")[:MAX_HEADS_IN_LINK]:
        if not item.strip():
            continue
        match = _HEAD_IN_LINK.match(item)
        if match:
            heads.append((int(match.group(1)), int(match.group(2))))
        else:
            bad.append(item[:20])
    return heads, bad


def grid_names(n_layers: int, n_heads: int) -> dict:
    """The spellings a browser component needs: {"layers": ["L0", ...], "heads": [["L0 H0", ...], ...]}."""
    return {"layers": [layer_name(i) for i in range(n_layers)],
            "heads": [[head_name((i, h)) for h in range(n_heads)] for i in range(n_layers)]}


def token_label(token: str, limit: int = 40) -> str:
    """A token as a short printable label: the one way a token is written on the page."""
    text = plotting.token_text(token) or "∅"  # a leading space as ␣, a newline as ↵
    return text if len(text) <= limit else text[:limit - 1] + "…"


def quoted(token: str, limit: int = 24) -> str:
    """A token inside a sentence of the page: its label (`token_label`) in “curly quotes”, so a token that is
    punctuation or a space reads as a token (“.”, “␣She”), never as the sentence's own punctuation or as Python's
    repr (' She'). The one way prose names a token; labels on axes, chips and pickers stay unquoted."""
    return f"“{token_label(token, limit)}”"


def distinct_labels(tokens: list[str], limit: int = 24) -> list[str]:
    """Each token's label; a label that occurs more than once carries its position as a subscript ("the₃",
    "the₈"), so every label in the list is different."""
    labels = [token_label(t, limit) for t in tokens]
    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    out = [f"{label}{str(i).translate(_SUBSCRIPT)}" if counts[label] > 1 else label for i, label in enumerate(labels)]
    seen: set[str] = set()
    for i, label in enumerate(out):  # a token that itself ends in subscript digits could still collide
        while label in seen:
            label += "′"
        seen.add(label)
        out[i] = label
    return out
