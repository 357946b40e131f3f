"""The saved figures' font (mha_viz/app/components/figure_font.py): a WOFF subset of DejaVu Sans that holds the
figure's characters and the tokens', keeps the font's copyright and licence, and never holds up a page."""
from __future__ import annotations

import io
import time

import pytest

from mha_viz.app.components import figure_font


def _ready(tokens, timeout_s: float = 120.0) -> bytes:
    deadline = time.monotonic() + timeout_s
    while (font := figure_font.font_for(tokens)) is None:  # the first call starts it in a thread
        assert time.monotonic() < deadline, "the subset was not made"
        time.sleep(0.1)
    return font


@pytest.mark.skipif(figure_font.font_file() is None, reason="no DejaVu Sans on this machine")
def test_subset_holds_the_tokens_characters_and_the_licence():
    from fontTools.ttLib import TTFont

    tokens = ["naïve", "Ωmega", "↵"]
    woff = _ready(tokens)
    assert woff[:4] == b"wOFF"
    font = TTFont(io.BytesIO(woff))
    cmap = font.getBestCmap()
    for ch in "".join(tokens) + figure_font.BASE:
        assert ord(ch) in cmap, ch
    names = {rec.nameID: rec.toUnicode() for rec in font["name"].names}
    assert "Bitstream" in names[0]  # the copyright notice the licence asks every copy to carry
    assert 13 in names  # the licence text
    assert names[1] == figure_font.FAMILY
    # Texts in the same characters share one subset: a second text is served from it at once.
    assert figure_font.font_for(["Ωmega", "naïve"]) is woff
