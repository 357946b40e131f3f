"""Did this session replace one its server process no longer has? Then say so on the page.

When the app process a browser's session lived in dies (a crash, `kill -9`, a restart by deploy/serve.py's
supervisord), the browser reconnects by itself and, in the websocket handshake (Sec-WebSocket-Protocol's third
entry), names the session it had. A process that does not know that session starts a new one, which
`state.read_url_once` rebuilds from the page's link (model, layer, heads off, view, the Lesson's step). The
sentence is the exception: on reconnecting, the browser resends its widgets' values, the sentence box's among them,
which is the last sentence the visitor sent from it. That one may be newer than the link's (sent as the process
died, so never run nor written to the link), so a rebuilt session leaves the box to the browser and runs what it
holds (text.text_input); the sidebar's display options come back the same way. Without a word the visitor would
take the redrawn page for the old one; with it they know what was kept and what was not.
"""
from __future__ import annotations

from datetime import timedelta

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

REBUILT = ("This page's server process restarted (or its visitors were moved to another one), so your session "
           "was rebuilt from the page's link and from your browser: the model, the layer, the heads that are off, "
           "the view and the Lesson's step are as the link has them; the sentence is the last one you sent from the "
           "box (even one sent as the process stopped), and the sidebar's display options are as you left them.")
_KEY = "_rebuilt"  # decided on the session's first run, kept for its life
DRAWN = "_boxes_drawn"  # the keys of the input boxes this session has drawn: from then on their value is its own
_WATCH = "reconnect_watch"  # the hidden container of the fragment below
# A style only (Streamlit gives it no room): the container and its layout wrapper take no room either, so the page
# below does not move by a gap.
_HIDDEN = (f"<style>.st-key-{_WATCH},[data-testid='stLayoutWrapper']:has(> .st-key-{_WATCH}){{display:none}}"
           "</style>")


def previous_session() -> str | None:
    """The session id the browser asked to resume, when it named one this process is not running."""
    raw = st.context.headers.get("Sec-WebSocket-Protocol") or ""
    entries = [e.strip() for e in raw.split(",")]
    asked = entries[2] if len(entries) >= 3 and entries[2] else None
    ctx = get_script_run_ctx()
    if asked is None or ctx is None or asked == ctx.session_id:
        return None
    return asked


def rebuilt() -> bool:
    """Whether this session replaced one its process lost (asked on the session's first run, the answer kept)."""
    if _KEY not in st.session_state:
        st.session_state[_KEY] = previous_session() is not None
    return st.session_state[_KEY]


def resends(box: str) -> bool:
    """Whether input box `box` (its widget key) takes the browser's value on this run: its first draw in a session
    rebuilt after its process died. The browser resends the box's value, which may be newer than the link's (sent
    or typed as the process died, never run); the box is then left to take it, with the link's value only as its
    default. Its caller marks the box `drawn` once it has drawn it."""
    return rebuilt() and box not in st.session_state.get(DRAWN, ())


def drawn(box: str) -> bool:
    """Input box `box` has been drawn in this session: its value is the session's own from now on. True when this
    was its first draw."""
    boxes = st.session_state.setdefault(DRAWN, set())
    first = box not in boxes
    boxes.add(box)
    return first


def say_if_rebuilt() -> None:
    """On every run of a session that replaced one its process lost: a notice saying what was kept. On every run of
    any session: the fragment that has the browser ask for a run as soon as it reconnects."""
    st.html(_HIDDEN)
    with st.container(key=_WATCH):
        _run_on_reconnect()
    if rebuilt():
        st.info(REBUILT, icon="🔄")


@st.fragment(run_every=timedelta(days=1))
def _run_on_reconnect() -> None:
    """Draws nothing; it is here for its `run_every`. On reconnecting, Streamlit's browser side asks the (new)
    process for a run only when a run was under way, the last run was a fragment's, or the page has a fragment that
    reruns by itself. Without one, a page idle after a full run reconnects to a new, empty session and shows the
    old page until the visitor acts: a sentence sent as the process died was neither run nor said to be lost. With
    it the new session runs at once, from the link and the widget values the browser resends (text.text_input runs
    the sentence among them). Its own rerun, once a day, draws nothing."""
