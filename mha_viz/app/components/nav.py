"""The views' navigation: a `<nav>` of groups (Look, Open up, Intervene, Learn), one button per view, the open one
marked `aria-current="page"`. Drawn by the browser (nav.js); a click comes back as a `view` trigger."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import streamlit as st

_HERE = Path(__file__).resolve().parent
_COMPONENT = st.components.v2.component(
    "mha_viz.nav", html="", css=(_HERE / "nav.css").read_text(), js=(_HERE / "nav.js").read_text(),
    isolate_styles=False,
)


def nav(groups: dict[str, list[str]], current: str, key: str, on_view: Callable[[str], None]) -> None:
    """Mount the navigation. `on_view(name)` runs, before the rerun it causes, when a view is clicked."""

    def _clicked() -> None:
        event = (st.session_state.get(key) or {}).get("view")
        if isinstance(event, str) and any(event in names for names in groups.values()):
            on_view(event)

    _COMPONENT(data={"groups": [[label, names] for label, names in groups.items()], "current": current},
               key=key, on_view_change=_clicked)
