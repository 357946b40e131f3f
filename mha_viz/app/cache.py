"""Shared resources: models (one per server), runs (shared by every session, bounded by bytes), torch threads.

Models are read-only after loading and every run gets its interventions as arguments, so one instance can
serve every browser session.
"""
from __future__ import annotations

import gc
import threading
from collections import OrderedDict

import streamlit as st
import torch

from mha_viz.analysis.patching import (DirectEffects, Metric, PatchingMap, attribution_patching, direct_effects,
                                       patching_map)
from mha_viz.contract import AttentionRun, Head, Model, TrainingEvidence, UnavailableError
from mha_viz.models import load_model
from mha_viz.settings import settings


def set_threads() -> None:
    """One torch thread per forward by default (MHA_VIZ_TORCH_THREADS): with another process on the second core,
    a two-thread forward waits at every barrier and runs 10-20x slower (benchmarks/RESULTS.md); sessions then
    share the cores instead of fighting over both."""
    wanted = settings().torch_threads
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


@st.cache_resource(show_spinner=False, max_entries=4)
def get_model(name: str) -> Model:
    model = load_model(name)
    # Streamlit runs a full gc.collect() after every rerun; walking the ~450k long-lived objects of torch,
    # transformers and the weights took ~0.25 s of each toggle (benchmarks/RESULTS.md). Freezing them moves
    # them out of the collector's way; later garbage is still collected.
    gc.collect()
    gc.freeze()
    return model


def run_bytes(run: AttentionRun) -> int:
    return sum(t.numel() * t.element_size() for t in (run.attentions, run.output, run.logits) if t is not None)


class RunCache:
    """Results shared by every session, least recently used first out, bounded by `size` summed over entries:
    by default the bytes of a run (one SmolLM2 run of 512 tokens holds 283 MB of attention, one of 20 tokens
    0.4 MB). Not st.cache_data, which would copy the tensors on every hit, nor st.cache_resource, which cannot
    replay a progress bar."""

    def __init__(self, budget_bytes: int, size=run_bytes):
        self.budget = budget_bytes
        self._size = size
        self._runs: OrderedDict[tuple, object] = OrderedDict()
        self._sizes: dict[tuple, int] = {}
        self._lock = threading.Lock()

    def peek(self, key: tuple):
        """The entry for `key`, or None when it has not been made (or was dropped)."""
        with self._lock:
            if key in self._runs:
                self._runs.move_to_end(key)
                return self._runs[key]
        return None

    def get(self, key: tuple, make):
        found = self.peek(key)
        if found is not None:
            return found
        run = make()  # outside the lock: sessions run their forwards in parallel
        size = self._size(run)
        with self._lock:
            self._runs[key], self._sizes[key] = run, size
            while len(self._runs) > 1 and sum(self._sizes.values()) > self.budget:
                oldest, _ = self._runs.popitem(last=False)
                del self._sizes[oldest]
        return run


RUNS = RunCache(settings().run_cache_mb * 2**20)


def get_run(name: str, text: str, off: tuple[Head, ...] | frozenset[Head] = (), ablation: str = "zero",
            patch: tuple[Head, ...] | frozenset[Head] = (), source: str | None = None) -> AttentionRun:
    """A run keyed by everything that shapes it: model, text, heads off and what "off" means, heads patched and
    the text they are patched from. Mean ablation averages over the model's example sentences."""
    off, patch = tuple(sorted(off)), tuple(sorted(patch))
    if not off:
        ablation = "zero"  # nothing is off: both meanings give the same run, so share it
    if not patch:
        source = None
    return RUNS.get((name, text, off, ablation, patch, source),
                    lambda: get_model(name).run(text, ablate=off, ablation=ablation, patch=patch, source=source))


@st.cache_resource(show_spinner=False, max_entries=8)
def norm_inputs(name: str, text: str, heads_off: tuple[Head, ...], ablation: str = "zero"):
    """Values and output projections for the norm view, from the same run (same heads off, same meaning of "off")
    as the weights they are drawn with."""
    return get_model(name).norm_inputs(text, heads_off, ablation)


@st.cache_resource(show_spinner=False, max_entries=8)
def inside_layer(name: str, text: str, layer: int, heads_off: tuple[Head, ...], ablation: str = "zero"):
    """Every head of `layer` opened up (`Model.inside_layer`), shared by sessions; small (a layer's q, k, v)."""
    return get_model(name).inside_layer(text, layer, heads_off, ablation)


# -- patching view: metrics, maps and direct effects, shared by every session ------------------------------------
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


@st.cache_resource(show_spinner=False, max_entries=2)
def _checkpoint_models(name: str) -> dict:
    """Every saved training step of `name` at once (the tiny model's are small): a step slider then never
    reloads a model, and `get_model`'s four slots stay free for the models a user picks."""
    from mha_viz.models import checkpoints

    models = {step: load_model(f"{name}@{step}") for step in checkpoints(name)}
    gc.collect()
    gc.freeze()  # as in get_model
    return models


def checkpoint_run(name: str, step: int, text: str) -> AttentionRun:
    """`name` at training step `step` on `text`, all heads on; shared by every session like `get_run`."""
    # The key has get_run's shape, so get_run(f"{name}@{step}", text) finds this run instead of making it again.
    return RUNS.get((f"{name}@{step}", text, (), "zero", (), None), lambda: _checkpoint_models(name)[step].run(text))


@st.cache_data(show_spinner=False, ttl=60)
def training_evidence(name: str) -> TrainingEvidence | None:
    """The training record of model `name` (`Model.training_evidence`), None for a model trained elsewhere.
    Re-read after a minute, so `make probe` on a running server shows up without a restart."""
    try:
        return get_model(name).training_evidence()
    except UnavailableError:
        return None
