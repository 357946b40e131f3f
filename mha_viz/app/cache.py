"""Models and runs shared by every session: the models a user picks (one per server), side models beside them
(a training step, a seed, an untrained twin), runs (bounded by bytes, app/run_cache.py), what is measured on them
(inside a head, norms, the censuses made, training records).

Models are read-only after loading and every run gets its interventions as arguments, so one instance can
serve every browser session. Beside this module: threads.py (torch threads, long jobs), memory.py (what work
holds, sized before it runs), maps.py (the Patching view's maps), estimates.py (what a long step will take).
"""
from __future__ import annotations

import functools
import gc
import threading

import streamlit as st
import torch

from mha_viz.app.memory import queued, work_bytes
from mha_viz.app.run_cache import RunCache, entry_bytes
from mha_viz.contract import AttentionRun, EncodedText, Head, Model, UnavailableError
from mha_viz.models import load_model, registry
from mha_viz.models.interventions import reuse_bytes, reuse_clear
from mha_viz.settings import settings
from mha_viz.training_record import TrainingEvidence
from mha_viz.web import kinds


@st.cache_resource(show_spinner=False, max_entries=4)
def get_model(name: str) -> Model:
    model = load_model(name)
    # Streamlit runs a full gc.collect() after every rerun; walking the ~450k long-lived objects of torch,
    # transformers and the weights took ~0.25 s of each toggle (benchmarks/RESULTS.md). Freezing them moves
    # them out of the collector's way; later garbage is still collected.
    gc.collect()
    gc.freeze()
    return model


@functools.lru_cache(maxsize=1)
def runs() -> RunCache:
    """The run cache of this process, made on first use rather than at import: a bad MHA_VIZ_RUN_CACHE_MB then
    raises SettingsError inside page.main, which shows it as the page's own message, not as a traceback."""
    return RunCache(settings().run_cache_mb * 2**20, size=entry_bytes, beside=reuse_bytes, drop_beside=reuse_clear)


_SIDE_LOCK = threading.Lock()  # two sessions asking for the same side model load it once


def side_model(name: str) -> Model:
    """A model loaded beside the one the user picked (a training step for a slider or timeline, another seed of the
    recipe, an untrained twin as the census's control): kept in the run cache, under its memory budget, by the
    bytes of its weights, and dropped least recently used like a run; `get_model`'s slots stay free for the models
    a user picks. Meant for the small in-repo models (a tiny step is about 1 MB)."""
    key = ("side-model", name)
    found = runs().peek(key)
    if found is not None:
        return found
    with _SIDE_LOCK:
        return runs().get(key, lambda: _loaded(name))


def side_result(kind: str, name: str, make):
    """What `make()` measures on side model `name` (e.g. kind "circuits": a training step's weights read once), kept
    in the run cache beside the model, by the bytes of its tensors, and dropped least recently used like a run."""
    return runs().get((kind, name), make)


def _loaded(name: str) -> Model:
    model = load_model(name)
    gc.collect()
    gc.freeze()  # as in get_model
    return model


def census_control(model: Model, control: Model | str | None = "auto") -> Model | str | None:
    """What the census of `model` compares with, "auto" resolved with the untrained twin as a side model."""
    return registry.census_control(model, control, load=side_model)


TARGET = "target"  # the session's target text, sent from the target box (text.py)


def current_target(model) -> str | None:
    """The target the page runs a model with cross-attention on: the target box's last sent text, None when it was
    empty (the model's own greedy continuation, `Model.run`'s target=None) or the model reads one text."""
    if not model.has_cross_attention:
        return None
    target = str(st.session_state.get(TARGET, "") or "").rstrip()  # trimmed as text.read_text trims the source
    return target if target.strip() else None


def get_run(name: str, text: str | EncodedText, off: tuple[Head, ...] | frozenset[Head] = (), ablation: str = "zero",
            patch: tuple[Head, ...] | frozenset[Head] = (), source: str | None = None,
            logits_at=None, on_layer=None) -> AttentionRun:
    """A run keyed by everything that shapes it: model, text, heads off and what "off" means, heads patched and
    the text they are patched from, and the positions whose logits it holds. Mean ablation averages over the
    model's example sentences.

    logits_at: the positions whose logits the caller reads (negative ones count from the end); None, the default,
    every position. The LM head then runs at those positions only (`Model.run`'s logits_at), and `logit_row`
    reads a row by its position. A kept run of the same request holding every position, or a superset of
    these, answers it instead of a new run; a position no kept run holds makes a new one.

    on_layer(layer, weights): handed each layer's attention as the run computes it (the engine's `run`), where this
    call makes the run; a run from the cache, or one another session is making, calls nothing. Not part of the
    key: it changes nothing the run holds. A one-stack model only (a model with cross-attention ignores it).

    A model with cross-attention: `text` is its source, the target is the page's target box (current_target),
    and `off` (and `patch`) is the page's one set of heads (web/kinds.py: cross-attention layers after the
    decoder's), split into `ablate` and `ablate_cross` (`patch` and `patch_cross`). Its logits are over the
    target, always every position."""
    off, patch = tuple(sorted(off)), tuple(sorted(patch))
    if not off:
        ablation = "zero"  # nothing is off: both meanings give the same run, so share it
    if not patch:
        source = None
    model = get_model(name)
    # Checked and encoded once: the size estimate and the run both read it. The page passes the EncodedText it
    # made for the positions it reads (heads_off.logits_at), taken as it is; runs are keyed by the checked text.
    read = model.encode_text(text)
    text = read.text
    need, scope = work_bytes(model, read), (name, text)
    if model.has_cross_attention:
        target, (ablate, cross) = current_target(model), kinds.split(model, off)
        patch_self, patch_cross = kinds.split(model, patch)  # the same one set, patched from a second source
        return runs().get((name, text, off, ablation, patch, source, target, None),
                          lambda: model.run(read, ablate=ablate, ablation=ablation, patch=patch_self, source=source,
                                            target=target, ablate_cross=cross, patch_cross=patch_cross),
                          need=need, on_wait=queued, scope_key=scope)
    at = None if logits_at is None else tuple(sorted({p % read.n_tokens for p in logits_at}))
    request = (name, text, off, ablation, patch, source)
    return runs().get(request + (at,),
                      lambda: model.run(read, ablate=off, ablation=ablation, patch=patch, source=source,
                                        logits_at=None if at is None else list(at), on_layer=on_layer),
                      need=need, on_wait=queued, scope_key=scope,
                      answers=None if at is None else lambda k: _holds(k, request, at))


def _holds(key: tuple, request: tuple, at: tuple[int, ...]) -> bool:
    """Whether the kept run under `key` answers `request` at positions `at`: the same request, holding every
    position's logits or at least these."""
    return (len(key) == len(request) + 1 and key[:-1] == request
            and (key[-1] is None or set(at) <= set(key[-1])))


def logit_row(run: AttentionRun, position: int) -> torch.Tensor:
    """The logits (V,) of `run` at `position` (from the end when negative), whether the run holds every position's
    or only some (`run.logits_at`); a position it does not hold is a LookupError naming the fix."""
    if run.logits_at is None:
        return run.logits[position]
    n = len(run.tokens)
    wanted = position % n if -n <= position < 0 else position
    if wanted not in run.logits_at:
        raise LookupError(f"this run holds the logits of positions {list(run.logits_at)} only, not {position}: "
                          "ask get_run for the run with logits_at naming every position the view reads")
    return run.logits[run.logits_at.index(wanted)]


@st.cache_resource(show_spinner=False, max_entries=8)
def norm_inputs(name: str, text: str, heads_off: tuple[Head, ...], ablation: str = "zero"):
    """Values and output projections for the norm view, from the same run (same heads off, same meaning of "off")
    as the weights they are drawn with."""
    return get_model(name).norm_inputs(text, heads_off, ablation)


@st.cache_resource(show_spinner=False, max_entries=8)
def inside_layer(name: str, text: str, layer: int, heads_off: tuple[Head, ...], ablation: str = "zero",
                 kind: str | None = None, target: str | None = None):
    """Every head of `layer` opened up (`Model.inside_layer`), shared by sessions; small (a layer's q, k, v).
    A model with cross-attention: `layer` is within `kind` (web/kinds.py), `text` the source, `target` the
    page's (`current_target`), and `heads_off` the page's one set, split into `ablate` and `ablate_cross`."""
    model = get_model(name)
    if kind is None:
        return model.inside_layer(text, layer, heads_off, ablation)
    ablate, cross = kinds.split(model, heads_off)
    return model.inside_layer(text, layer, ablate, ablation, kind=kind, target=target, ablate_cross=cross)


# The last 8 censuses, shared by every session, keyed (model name, seed, texts or None): the Census view makes them;
# the Layer view and Inside a head read one where it was made (`census_made`), to set one input against it.
CENSUSES = RunCache(8, size=lambda _: 1)


def census_made(name: str, seed: int = 0):
    """The census of `name` on its default texts (seed `seed`), where some session has made it; else None."""
    return CENSUSES.peek((name, seed, None))


def checkpoint_run(name: str, step: int, text: str) -> AttentionRun:
    """`name` at training step `step` on `text`, all heads on; shared by every session like `get_run`."""
    # The key has get_run's shape, so get_run(f"{name}@{step}", text) finds this run instead of making it again.
    model = side_model(f"{name}@{step}")
    return runs().get((f"{name}@{step}", text, (), "zero", (), None, None), lambda: model.run(text),
                      need=work_bytes(model, text), on_wait=queued, scope_key=(f"{name}@{step}", text))


@st.cache_data(show_spinner=False, ttl=60)
def training_evidence(name: str) -> TrainingEvidence | None:
    """The training record of model `name` (`Model.training_evidence`), None for a model trained elsewhere.
    Re-read after a minute, so `make probe` on a running server shows up without a restart."""
    from mha_viz.models import training_record

    try:  # read from disk where that can be done without loading the model
        record = training_record(name)
        return record if record is not None else get_model(name).training_evidence()
    except UnavailableError:
        return None


