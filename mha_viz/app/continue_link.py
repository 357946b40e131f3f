"""The Continue panel's settings (app/continuation.py) in the session and in the link: ?write=N (how many tokens),
and for sampling sample=1, temp=T, seed=S. Read once with the rest of the link (state.read_url_once) and written
with it (state.write_url); checked where they are written, like typed settings, so a bad value is one line there.

The continuations themselves are entries of the run cache (app/run_cache.py), counted in its byte budget like a
run; the session keeps only their keys (`KEPT`), and `let_go` drops them once the page moves to another model or
text (state.write_url calls it on every run)."""
from __future__ import annotations

import streamlit as st

from mha_viz.app import cache

N_KEY, MODE_KEY, TEMP_KEY, SEED_KEY = "write_n", "write_mode", "write_temp", "write_seed"  # the boxes
ON_KEY = "write_on"  # the settings as typed when Continue was pressed (or the link carried them); absent: off
GREEDY, SAMPLING = "greedy", "sampling"
# The session's last request: {"key": (model, text, settings, heads off, ablation), "entries": the run cache's keys
# of its continuations (every head on; with heads off, that too)}. Keys only: the tensors are the cache's.
KEPT = "_written"


def read_link(get: dict) -> None:
    """The link's continuation (?write=N, sample=1, temp=T, seed=S) into the session: the boxes show it as the link
    had it and it is written on the first run, checked there like typed settings (a bad value: one line)."""
    if "write" not in get:
        return
    raw = {"tokens": get["write"], "sampling": get.get("sample", "0") == "1", "temperature": get.get("temp", "1"),
           "seed": get.get("seed", "0")}
    st.session_state[ON_KEY] = raw
    st.session_state[MODE_KEY] = SAMPLING if raw["sampling"] else GREEDY
    st.session_state[SEED_KEY] = str(raw["seed"])
    for key, value, kind in ((N_KEY, raw["tokens"], int), (TEMP_KEY, raw["temperature"], float)):
        try:
            st.session_state[key] = kind(value)
        except ValueError:
            pass  # the box keeps its default; the settings (ON_KEY) carry the bad value, which is reported


def link_params() -> dict:
    """What the link carries of the continuation on screen: {} when none is."""
    raw = st.session_state.get(ON_KEY)
    if not raw:
        return {}
    params = {"write": str(raw["tokens"])}
    if raw["sampling"]:
        params.update(sample="1", temp=str(raw["temperature"]), seed=str(raw["seed"]))
    return params


def let_go(name: str | None = None, text: str | None = None, keep: tuple = ()) -> None:
    """Drop the session's continuations from the run cache unless they were written for model `name` on `text`
    (no name: drop them whatever they were written for); entries in `keep` stay (the next request reuses them).
    Another session that asked for the same continuation writes it again when it next needs it."""
    kept = st.session_state.get(KEPT)
    if kept is None or (name is not None and kept["key"][:2] == (name, text)):
        return
    st.session_state.pop(KEPT, None)
    for key in kept["entries"]:
        if key not in keep:
            cache.runs().drop(key)
