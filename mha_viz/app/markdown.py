"""Text from a user, a link or a model, shown as typed inside Markdown. Below every other app module (it imports
nothing of the app), so the page's state and its widgets can both use it."""
from __future__ import annotations


def md_safe(text: str) -> str:
    """Text shown as typed inside Markdown: the characters that can make links, images, code, maths, HTML, tables
    or emphasis are backslash-escaped (CommonMark allows it for any ASCII punctuation; remark-math honours `\\$`);
    words like A_B stay as typed. The one escaper for everything from a user, a link or a model."""
    for ch in "\\`*[]()<>$!|~#":
        text = text.replace(ch, "\\" + ch)
    return text
