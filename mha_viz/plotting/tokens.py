"""How a token is written in every figure: control characters made visible, a leading space as ␣, escaped for
plotly's HTML-ish labels, and made unique as an axis's categories.
"""
from __future__ import annotations

import html

_VISIBLE = {"\n": "↵", "\t": "⇥", "\r": "␍"}


def visible_text(token: str) -> str:
    """Control characters, newlines and NUL made visible, so every token has a printable label."""
    return "".join(_VISIBLE.get(ch) or (ch if ch.isprintable() else f"\\x{ord(ch):02x}") for ch in token)


def token_text(token: str) -> str:
    """The one way a token is written on the page and in every figure: control characters made visible (a
    newline is ↵) and a leading space, which is part of the token (" She" is not "She"), as ␣; a token of spaces
    only as ␣s."""
    text = visible_text(token)
    if text.startswith(" ") or not text.strip():
        stripped = text.lstrip(" ")
        text = "␣" * (len(text) - len(stripped)) + stripped if stripped else text.replace(" ", "␣")
    return text


def safe_label(token: str) -> str:
    """A token as plain text inside plotly's HTML-ish labels: escaped, written as `token_text` does."""
    text = token_text(token)
    if len(text) > 24:
        text = text[:23] + "…"
    return html.escape(text, quote=False) or "∅"


def axis_labels(tokens: list[str]) -> list[str]:
    """Unique category labels: plotly merges equal categories, so a repeated token gets zero-width spaces."""
    seen: dict[str, int] = {}
    labels = []
    for tok in tokens:
        base = safe_label(tok)
        n = seen.get(base, 0)
        seen[base] = n + 1
        labels.append(base + "\u200b" * n)
    return labels
