"""Long steps' times: the instant estimate of head importance (a few backward passes), and what an exact map of
single-head runs will take on this server (`exact_seconds`), corrected by how long the last finished one took
(`exact_finished`).
"""
from __future__ import annotations

import threading
import time

import streamlit as st

from mha_viz.app.cache import get_model
from mha_viz.contract import Head, InputError

ESTIMATE_SAMPLES = 8
_FORWARD_SECONDS: dict[tuple[str, int], float] = {}  # (model, tokens) -> a measured forward pass, on this server
_FORWARD_LOCK = threading.Lock()
# model -> how long its last exact map took over what the forward-pass arithmetic predicted for it: the batches'
# real cost per forward on this server, which a lone forward misjudges (it read ~1.3x high on SmolLM2), and the
# load at the time. Learned from every finished map; 1 until one has finished.
_EXACT_FACTOR: dict[str, float] = {}
EXACT_FACTOR_RANGE = (0.1, 10.0)  # a map stopped by a hung machine or a clock jump does not wreck the next estimate


@st.cache_resource(show_spinner="Estimating every head's importance...", max_entries=16)
def importance_estimate_cached(name: str, text: str, heads_off: tuple[Head, ...], position: int, ablation: str):
    """`importance_estimate` (a few backward passes), shared by sessions."""
    from mha_viz.analysis.importance import importance_estimate

    return importance_estimate(get_model(name), text, frozenset(heads_off), position, ablation,
                               samples=ESTIMATE_SAMPLES)


# A lone forward of a short text is mostly per-call cost that the map's batches (up to WAVE_TOKENS rows x tokens at
# once) do not pay: SmolLM2 at 14 tokens took 0.34 s alone (24 ms a token) and 7.4 ms a token at 126, while its
# importance map, 140 forwards' worth, took 10.9 s (5.5 ms a token). Timed alone, the button said about 48 s. So a
# text shorter than this is timed per token on itself said over again to this length.
CALIBRATION_TOKENS = 128


def exact_seconds(name: str, text: str, n_heads: int, source: str | None = None) -> float:
    """What a map of `n_heads` single-head passes will take here (head importance, or patching from `source`): one
    measured forward pass of this text (all heads on; measured once per model and token count on this server; a
    text under CALIBRATION_TOKENS as its share of a forward of about that many tokens), times the forwards' worth
    the engine's batches recompute (`Model.single_head_work`: the layers before a head are reused, and on causal
    models a patch recomputes only the positions where the texts differ), per head; scaled by how far off the last
    finished map of this model was (`exact_finished`)."""
    model = get_model(name)
    n = model.token_count(text)
    with _FORWARD_LOCK:
        seconds = _FORWARD_SECONDS.get((name, n))
    if seconds is None:
        sample = text
        if n < CALIBRATION_TOKENS:
            sample = " ".join([text] * -(-CALIBRATION_TOKENS // max(n, 1)))  # cut to max_tokens by the model
        try:
            m = model.token_count(sample)
        except InputError:  # a compiled program refuses a text past its length instead of cutting it: time the text
            sample, m = text, n
        start = time.perf_counter()
        model.head_outputs(sample)  # one forward of one row
        seconds = (time.perf_counter() - start) * n / m
        with _FORWARD_LOCK:
            _FORWARD_SECONDS[(name, n)] = seconds
    per_head = model.single_head_work(text, source) / (model.n_layers * model.n_heads)
    with _FORWARD_LOCK:
        factor = _EXACT_FACTOR.get(name, 1.0)
    return seconds * n_heads * per_head * factor


def exact_finished(name: str, predicted: float, took: float) -> None:
    """An exact map of `name` that `exact_seconds` priced at `predicted` seconds finished in `took`: later
    estimates for this model are scaled so that this one would have been right."""
    if predicted <= 0 or took <= 0:
        return
    with _FORWARD_LOCK:
        raw = predicted / _EXACT_FACTOR.get(name, 1.0)
        low, high = EXACT_FACTOR_RANGE
        _EXACT_FACTOR[name] = min(high, max(low, took / raw))
