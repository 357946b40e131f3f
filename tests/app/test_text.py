"""The sentence as the page reads it (app/text.py) and the token strip above the views, through AppTest."""
from __future__ import annotations

import re

import pytest

from helpers import loaded, open_link
from page_steps import open_view

LONG = " ".join(["The keys to the old cabinet are on the table, so Anna gave the keys to Ben."] * 6)


def _page_text(at) -> list[str]:
    return ([e.label for e in at.expander] + [c.value for c in at.caption]
            + [m.value for m in at.markdown if "token-strip" not in m.value])


def _counts(at, n: int) -> list[str]:
    """The lines that give the strip's token count ("Tokens (n)", "n tokens · ..."), not a sentence that
    mentions the count to explain something else."""
    return [t for t in _page_text(at) if re.match(rf"(Tokens \({n}\)|{n} tokens)(\b|$)", t)]


@pytest.mark.parametrize("view", ["Follow a token", "All layers"])
def test_a_long_texts_token_count_is_written_once(view):
    """A strip of more than LONG_STRIP tokens folds into a "Tokens (N)" expander; the caption under it said
    "N tokens" as well (issue 19, after its items: the count shown twice)."""
    from mha_viz.app.text import LONG_STRIP

    at = open_view(open_link({"model": "minilm", "text": LONG}), view)
    n = len(loaded("minilm").run(LONG).tokens)
    assert n > LONG_STRIP
    assert _counts(at, n) == [f"Tokens ({n})"], _counts(at, n)


def test_a_short_texts_token_count_is_written_once():
    text = "Dogs chase cats."
    at = open_view(open_link({"model": "minilm", "text": text}), "Follow a token")
    n = len(loaded("minilm").run(text).tokens)
    assert not at.expander or not any(e.label.startswith("Tokens (") for e in at.expander)
    assert _counts(at, n) == [f"{n} tokens"], _counts(at, n)
