"""Did this session replace one its server process no longer has? Then say so on the page.

When the app process a browser's session lived in dies (a crash, `kill -9`, a restart by deploy/serve.py's
supervisord), the browser reconnects by itself and, in the websocket handshake (Sec-WebSocket-Protocol's third
entry), names the session it had. A process that does not know that session starts a new one, which
`state.read_url_once` rebuilds from the page's link (model, text, layer, heads off, view). Without a word the
visitor would take the redrawn page for the old one; with it they know what was kept and what was not.
"""
from __future__ import annotations

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

REBUILT = ("This page's server process restarted (or its visitors were moved to another one), so your session "
           "was rebuilt from the page's link: the model, the text, the layer, the heads that are off and the view "
           "are as the link has them; display options in the sidebar are back to their defaults.")


def previous_session() -> str | None:
    """The session id the browser asked to resume, when it named one this process is not running."""
    raw = st.context.headers.get("Sec-WebSocket-Protocol") or ""
    entries = [e.strip() for e in raw.split(",")]
    asked = entries[2] if len(entries) >= 3 and entries[2] else None
    ctx = get_script_run_ctx()
    if asked is None or ctx is None or asked == ctx.session_id:
        return None
    return asked


def say_if_rebuilt() -> None:
    """On the session's first run only: a notice when it replaced a session its process lost."""
    if st.session_state.get("_rebuilt_checked"):
        if st.session_state.get("_rebuilt"):
            st.info(REBUILT, icon="🔄")
        return
    st.session_state["_rebuilt_checked"] = True
    st.session_state["_rebuilt"] = previous_session() is not None
    if st.session_state["_rebuilt"]:
        st.info(REBUILT, icon="🔄")
