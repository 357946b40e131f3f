"""The font the layer grid's saved figures carry: DejaVu Sans, cut down to the characters a figure can hold (printable
ASCII, Latin-1, the figure's arrows and marks, and the tokens' own characters), as a WOFF file the browser embeds in
the SVG it saves (`@font-face`, a data: URL) and draws the PNG with. So a saved picture looks the same on every
machine and in every tool that opens it, with its labels still text (searchable, selectable).

DejaVu Sans is under the Bitstream Vera licence (DejaVu's changes are public domain): it may be copied, embedded and
modified (a subset is a modification) as long as the copyright and licence notices stay with every copy and the
modified font is not called "Bitstream" or "Vera". The subset keeps every name-table entry of the original, so its
copyright (name ID 0) and licence (IDs 13, 14) travel inside the file; the SVG also says so in a comment.

No streamlit here. fontTools (pure Python) does the subsetting; a machine without it or without the font file
saves figures with a plain font stack instead (`font_for` returns None, and the SVG names the stack).
"""
from __future__ import annotations

import io
import logging
import os
import threading
from pathlib import Path

FAMILY = "DejaVu Sans"
# Debian/Ubuntu (fonts-dejavu-core), Fedora, Arch, macOS Homebrew; MHA_VIZ_FIGURE_FONT names another copy.
CANDIDATES = (
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/opt/homebrew/share/fonts/DejaVuSans.ttf",
)
LICENCE = ("DejaVu Sans (subset), Bitstream Vera licence; DejaVu changes public domain. Copyright (c) 2003 by "
           "Bitstream, Inc. Bitstream Vera is a trademark of Bitstream, Inc. The licence travels in the font's "
           "name table (IDs 0, 13, 14).")
# The figure's own words and marks: printable ASCII, Latin-1, and the arrows, ellipsis and symbols it writes.
BASE = "".join(chr(c) for c in range(0x20, 0x7F)) + "".join(chr(c) for c in range(0xA0, 0x100)) + "↓→…·√␣↵–—"


def font_file() -> Path | None:
    named = os.environ.get("MHA_VIZ_FIGURE_FONT")
    for path in ([named] if named else []) + list(CANDIDATES):
        if path and Path(path).is_file():
            return Path(path)
    return None


def font_for(tokens) -> bytes | None:
    """WOFF bytes of DejaVu Sans holding every character of BASE and of `tokens` that the font has, or None when
    the font or fontTools is missing, or while that subset is still being made. Subsetting takes about a second
    (several on a loaded machine), so it never holds up a page: the first call for a set of characters starts it
    in a thread and returns None (a figure saved meanwhile names the font stack instead); a later run sends it.
    Cached by the characters beyond BASE, so most texts share one subset, made once per process (`warm`)."""
    extra = "".join(sorted({ch for t in tokens for ch in str(t)} - set(BASE)))
    with _LOCK:
        if extra in _READY:
            return _READY[extra]
        if extra not in _STARTED and len(_STARTED) < MAX_SUBSETS:
            _STARTED.add(extra)
            threading.Thread(target=_make, args=(extra,), name="figure-font", daemon=True).start()
    return None


def warm() -> None:
    """Start making the common subset (BASE alone), so the first page that needs it finds it ready."""
    font_for([])


def _make(extra: str) -> None:
    try:
        font = _subset(extra)
    except Exception:  # a broken font file: figures fall back to the font stack
        font = None
    with _LOCK:
        _READY[extra] = font


MAX_SUBSETS = 64  # distinct character sets made per process; beyond that, figures use the font stack
_LOCK = threading.Lock()
_READY: dict[str, bytes | None] = {}
_STARTED: set[str] = set()


def _subset(extra: str) -> bytes | None:
    path = font_file()
    try:
        from fontTools import subset
        from fontTools.ttLib import TTFont
    except ImportError:
        return None
    if path is None:
        return None
    logging.getLogger("fontTools").setLevel(logging.ERROR)  # "FFTM NOT subset; dropped" is expected
    options = subset.Options()
    options.flavor = "woff"  # zlib: every browser and Inkscape read it; woff2 would need brotli
    options.name_IDs = ["*"]  # copyright and licence stay in the file
    options.name_languages = ["*"]
    options.hinting = False  # screen hints: not needed at figure sizes, a third of the bytes
    options.layout_features = ["kern", "liga"]
    options.notdef_outline = True
    font = TTFont(str(path), lazy=None)  # tables read as used: half the time of lazy=False
    subsetter = subset.Subsetter(options)
    subsetter.populate(text=BASE + extra)
    subsetter.subset(font)
    out = io.BytesIO()
    font.flavor = "woff"
    font.save(out)
    return out.getvalue()
