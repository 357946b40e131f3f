"""The Patching view's maps, shared by every session: its metric, the attribution estimate, the exact patching map
(the last 8) and the direct effects. `metric_args` is ("logit_diff", position, answer id, other id) or ("cosine",):
plain values, so they hash.
"""
from __future__ import annotations

import streamlit as st
import torch

from mha_viz.analysis.patching import (
    DirectEffects,
    Metric,
    PatchingMap,
    attribution_patching,
    direct_effects,
    patching_map,
)
from mha_viz.app.cache import get_model, get_run
from mha_viz.app.run_cache import RunCache


# `metric_args` is ("logit_diff", position, answer id, other id) or ("cosine",): plain values, so they hash.
def metric_for(name: str, source: str, metric_args: tuple) -> Metric:
    if metric_args[0] == "cosine":
        return Metric("cosine", target=get_run(name, source).output)
    _, position, answer, other = metric_args
    return Metric("logit_diff", position=position, answer=answer, other=other)


@st.cache_resource(show_spinner=False, max_entries=16)
def attribution_map(name: str, text: str, source: str, metric_args: tuple) -> torch.Tensor:
    return attribution_patching(get_model(name), text, source, metric_for(name, source, metric_args))


_EXACT = RunCache(8, size=lambda _: 1)  # the last 8 exact maps


def exact_patching_map(name: str, text: str, source: str, metric_args: tuple, progress=None,
                       compute: bool = True) -> PatchingMap | None:
    """The exact patching map, shared by every session (the last 8); None when not computed yet and `compute`
    is False."""
    key = (name, text, source, metric_args)
    if not compute:
        return _EXACT.peek(key)
    return _EXACT.get(key, lambda: patching_map(get_model(name), text, source, metric_for(name, source, metric_args),
                                                progress=progress))


@st.cache_resource(show_spinner=False, max_entries=16)
def direct_effect_map(name: str, text: str, position: int, answer: int, other: int) -> DirectEffects | None:
    readout = get_model(name).readout(text)
    return None if readout is None else direct_effects(readout, position, answer, other)
