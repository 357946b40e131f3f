"""How the page writes a head, a layer and a token: one spelling each, formatted and parsed here only.

The browser components receive the spellings in their payload (`grid_names`: layers and heads) instead of a copy of
the format in JavaScript, so a head reads "L3 H2" in the grid, the switches, the URL notices and every figure.
A token is written one way everywhere (`token_label`, on plotting.token_text, which the figures use too):
control characters made visible (a newline is ↵), a leading space as ␣ (" She" reads ␣She), cut at `limit`.
Where the same label appears twice in one picker, `distinct_labels` adds the position, so "the" at 3 and "the" at
8 can be told apart (and picked apart: a picker keys its options by label).
"""
from __future__ import annotations

from mha_viz import plotting

# A head and a layer are spelled in mha_viz.names (the bottom of the package, so analysis and the notebook use
# the same function); re-exported here for the page.
from mha_viz.names import (  # noqa: F401
    MAX_HEADS_IN_LINK,
    column_name,
    column_names,
    grid_names,
    head_name,
    head_names,
    layer_name,
    link_heads,
    parse_head,
    parse_link_heads,
)

_SUBSCRIPT = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
# Appended to a token the tokenizer mapped to its unknown token, on every axis and picker: the model saw its unknown
# token there, not the word shown (`marked_tokens`).
UNKNOWN_MARK = " (?)"


def marked_tokens(tokens, unknown) -> list[str]:
    """`tokens` with `UNKNOWN_MARK` after each position in `unknown` (`run.unknown`), for the figures' axes."""
    unknown = set(unknown)
    return [t + UNKNOWN_MARK if i in unknown else t for i, t in enumerate(tokens)]


def unknown_words(n_unknown: int, n_content: int, model_title: str) -> str:
    """ "9 of 14 words are unknown to tiny": the page's one sentence for it."""
    return (f"{n_unknown} of {n_content} word{'s' if n_content != 1 else ''} {'is' if n_unknown == 1 else 'are'} "
            f"unknown to {model_title}")


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
