"""The views' navigation: a `<nav>` of groups (Look, Open up, Intervene, In general, Learn), one button per view,
the open one marked `aria-current="page"`. Drawn by the browser (nav.js, compact in nav.css: one row at 1600 px);
a click comes back as a `view` trigger. It also shows the first-visit hint, which points to the Lesson."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import streamlit as st

_HERE = Path(__file__).resolve().parent
_COMPONENT = st.components.v2.component(
    "mha_viz.nav", html="", css=(_HERE / "nav.css").read_text(), js=(_HERE / "nav.js").read_text(),
    isolate_styles=False,
)


# The first-visit hint (drawn by nav.js over the sidebar's foot until dismissed in this browser).
FIRST_VISIT = (
    "New to attention heads? Start with the Lesson, first in the views above the heads: one claim a step, on live "
    "models.",
    "Or type a sentence in the box and press Show attention: each square is one head, a row per query token, a "
    "column per key token; hover a row to light it in every head, click a head to open it large.",
    "Switch a head off with the red switch in its corner and watch what changes, above the heads.",
)
HINT_VIEW = "Lesson"  # the hint's button opens it
# The same card seen from inside the Lesson: what the Lesson is and how to go through it (no link to itself).
IN_THE_LESSON = (
    "This is the Lesson: seven steps, one claim of multi-head attention each, measured on small live models.",
    "Each step asks you to predict first; pick an answer and the figure shows what the model measured.",
    "Replace a step's sentence with your own: every number follows it. Back and Next are at the top and the foot.",
)


def nav(groups: dict[str, list[str]], current: str, key: str, on_view: Callable[[str], None],
        on_layer: Callable[[int], None] | None = None) -> None:
    """Mount the navigation. `on_view(name)` runs, before the rerun it causes, when a view is clicked, after
    `on_layer(layer)` with the link's layer when the page has one (the Layer grid's tabs write it in the browser
    without a rerun, so the view opened shows the layer that was on screen)."""

    def _clicked() -> None:
        event = (st.session_state.get(key) or {}).get("view")
        layer = None
        if isinstance(event, dict):
            event, layer = event.get("view"), event.get("layer")
        if isinstance(event, str) and any(event in names for names in groups.values()):
            if on_layer is not None and isinstance(layer, int) and not isinstance(layer, bool):
                on_layer(layer)
            on_view(event)

    _COMPONENT(data={"groups": [[label, names] for label, names in groups.items()], "current": current,
                     "hint": list(IN_THE_LESSON if current == HINT_VIEW else FIRST_VISIT),
                     "hint_view": "" if current == HINT_VIEW else HINT_VIEW}, key=key, on_view_change=_clicked)
