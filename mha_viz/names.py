"""How a head and a layer are written, everywhere: the page, the notebook, the exports, the analysis's own sentences.

The one spelling of a head ("L3 H2"), of a layer ("L3") and of a head within its layer, a figure's column ("H2"),
formatted and parsed here only. This module sits at the
bottom of the package (it imports nothing of it), so every layer may use it: analysis sentences, figures, the app and
the notebook. How a token is written lives beside the figures (`plotting.token_text`) and the page (`app.names`).
"""
from __future__ import annotations

import re

Head = tuple[int, int]  # (layer, head)

_HEAD_NAME = re.compile(r"^L(\d+) H(\d+)$")
# What a link may write for a head: "L0H3", "l0 h3", "0.3", "0:3", "0-3", "0_3".
_HEAD_IN_LINK = re.compile(r"^\s*L?(\d{1,4})[\s.:_-]*H?(\d{1,4})\s*$", re.IGNORECASE)
MAX_HEADS_IN_LINK = 2000


def layer_name(layer: int) -> str:
    """3 -> "L3"."""
    return f"L{layer}"


def column_name(head: int) -> str:
    """11 -> "H11": a head within its layer, as a column of a layers x heads figure is labelled."""
    return f"H{head}"


def column_names(n_heads: int) -> list[str]:
    """4 -> ["H0", "H1", "H2", "H3"]: the columns of a layers x heads figure."""
    return [column_name(h) for h in range(n_heads)]


def head_name(head: Head) -> str:
    """(2, 11) -> "L2 H11", the one spelling of a head."""
    return f"{layer_name(head[0])} {column_name(head[1])}"


def head_names(heads) -> str:
    """[(0, 3), (2, 11)] -> "L0 H3, L2 H11": several heads in a sentence."""
    return ", ".join(head_name(h) for h in heads)


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
