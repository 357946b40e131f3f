"""The Continue panel's settings (app/continuation.py) in the session and in the link: ?write=N (how many tokens),
and for sampling sample=1, temp=T, seed=S. Read once with the rest of the link (state.read_url_once) and written
with it (state.write_url); checked where they are written, like typed settings, so a bad value is one line there."""
from __future__ import annotations

import streamlit as st

N_KEY, MODE_KEY, TEMP_KEY, SEED_KEY = "write_n", "write_mode", "write_temp", "write_seed"  # the boxes
ON_KEY = "write_on"  # the settings as typed when Continue was pressed (or the link carried them); absent: off
GREEDY, SAMPLING = "greedy", "sampling"


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
