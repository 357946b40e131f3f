"""Shared resources: models (one per server), runs (shared by every session, bounded by bytes), torch threads.

Models are read-only after loading and every run gets its interventions as arguments, so one instance can
serve every browser session.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import os
import threading
import time

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
from mha_viz.app.run_cache import (  # noqa: F401  (the page and tests read them here)
    _SCOPE,
    RunBudgetError,
    RunCache,
    entry_bytes,
    model_bytes,
    run_bytes,
    tensor_bytes,
)
from mha_viz.contract import AttentionRun, EncodedText, Head, InputError, Model, UnavailableError
from mha_viz.models import load_model, registry
from mha_viz.models.interventions import reuse_bytes, reuse_clear
from mha_viz.settings import settings
from mha_viz.training_record import TrainingEvidence
from mha_viz.web import kinds


def set_threads() -> None:
    """One torch thread per forward by default (MHA_VIZ_TORCH_THREADS): with another process on the second core,
    a two-thread forward waits at every barrier and runs 10-20x slower (benchmarks/RESULTS.md); sessions then
    share the cores instead of fighting over both. A long job that borrowed the idle cores (`long_job`) gives
    them back here too."""
    wanted = settings().torch_threads
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


# -- long jobs (the exact importance and patching maps) may use the idle cores ---------------------------------
# torch.set_num_threads is not the job's alone: it sets the calling thread's count AND the process-wide default
# that every thread adopts at its first parallel op (Streamlit runs each rerun in a new thread; a fragment's rerun
# does not call set_threads). And two threads on two busy cores make an OpenMP forward wait at every barrier. So a
# long job borrows the cores only while nothing else could be slowed: it is the only long job of the process, no
# other script run is open in the process (`_BUSY.pages`: a page run, a toggle's fragment), and the other
# processes of the machine used under IDLE_OTHERS cores during its last chunk of heads. It looks again after every
# chunk (a few seconds at most), starting on the ordinary count. A page run that opens meanwhile puts the default
# back at once, for itself and every later thread (memory_scope_of_run); the job drops its own at its next chunk.
IDLE_OTHERS = 0.5  # cores the rest of the machine may use while a long job borrows them
# The machine is looked at over this long before the first chunk too: a short job is one or two chunks (SmolLM2's
# exact patching map at 18 tokens), and without a first look it ran them on the setting's threads, nearly twice as
# slow as on both cores of an idle machine (benchmarks/RESULTS.md, "Long steps on SmolLM2").
FIRST_LOOK_S = 0.1


class _Busy:
    def __init__(self):
        self.lock = threading.Lock()
        self.pages = 0  # script runs of this process inside memory_scope_of_run
        self.long_jobs = 0  # long jobs running in this process
        self.borrowed = False  # a long job runs with more threads than the setting


_BUSY = _Busy()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _cpu_sample() -> tuple[float, float, float] | None:
    """(wall s, machine busy core-seconds, this process's core-seconds) now; None where /proc/stat is unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return time.monotonic(), (sum(fields[:8]) - idle) / tick, own.user + own.system


def _others_cores(before, after) -> float:
    """Cores the rest of the machine used between two samples (this process's own use taken out)."""
    if before is None or after is None or after[0] - before[0] <= 0:
        return float("inf")
    return max(0.0, ((after[1] - before[1]) - (after[2] - before[2])) / (after[0] - before[0]))


def long_job_threads(others: float, pages: int, long_jobs: int, cores: int, base: int) -> int:
    """The torch threads a long job may use: every core when the machine is otherwise idle (`others` cores used
    by other processes, under IDLE_OTHERS), it is the only long job and at most its own script run is open in the
    process; the setting otherwise."""
    if cores > base and long_jobs == 1 and pages <= 1 and others < IDLE_OTHERS:
        return cores
    return base


@contextlib.contextmanager
def long_job():
    """Run a long job (many forward passes in chunks) that may borrow the idle cores. Looks at the machine for
    FIRST_LOOK_S before the first chunk, then yields `tick()`, to call after each chunk: it looks at the machine
    again and sets the threads for the next chunk. Yields the threads
    back at the end, whatever happens (a Stop ends the job with an exception)."""
    base, cores = settings().torch_threads, _cores()
    with _BUSY.lock:
        _BUSY.long_jobs += 1
    last = [_cpu_sample()]

    def tick() -> int:
        now = _cpu_sample()
        others = _others_cores(last[0], now)
        last[0] = now
        with _BUSY.lock:
            threads = long_job_threads(others, _BUSY.pages, _BUSY.long_jobs, cores, base)
            _BUSY.borrowed = threads > base
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
        return threads

    try:
        if cores > base:  # nothing to borrow otherwise, and no reason to wait
            time.sleep(FIRST_LOOK_S)
            tick()
        yield tick
    finally:
        with _BUSY.lock:
            _BUSY.long_jobs -= 1
            if _BUSY.borrowed:
                _BUSY.borrowed = False
                torch.set_num_threads(base)


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


def attention_bytes(model: Model, text: str | EncodedText) -> int:
    """What a run of `text` will hold, before running it: (L, H, T, T) float32 attention, T from the tokenizer."""
    n = model.token_count(text)
    return model.n_layers * model.n_heads * n * n * 4


# What a page's work on one text holds at its peak, in units of its run's attention: the run itself, the copies
# the page makes from it (display, the head grid's bytes) and the forward pass's own. Measured with
# benchmarks/bench_serve_memory.py: one 512-token SmolLM2 page took 1.0-1.2 GB over the idle process, 3.5-4.2 x
# its 283 MB of attention (four at once: 4.7 GB).
PAGE_FACTOR = 4


def work_bytes(model: Model, text: str | EncodedText) -> int:
    """What work on `text` holds at its peak, before it starts: PAGE_FACTOR x its run's attention. A forward pass
    alone counts as much as a page (its own copies: the per-layer attentions and their stack, the logits), so four
    sessions' first forwards cannot all start at once beside each other's pages."""
    return PAGE_FACTOR * attention_bytes(model, text)


def _queued(flight: int, n: int) -> None:
    st.toast(f"Queued: {n} run(s) of other visitors hold {flight / 2**20:,.0f} MB of this server process's memory "
             "for runs; yours starts when they finish.", icon="⏳")


class _Scope:
    def __init__(self):
        self.held: list[tuple[RunCache, tuple]] = []  # reservations to release when the scope ends
        self.texts: set = set()  # (cache, scope key) already reserved for




@contextlib.contextmanager
def memory_scope_of_run():
    """While the block runs, each run this thread asks for holds its share of the budget (work_bytes) until the
    block ends, once per text: the page keeps its runs, and the copies it makes of them, until it is drawn. A
    scope inside a scope is the outer one."""
    if getattr(_SCOPE, "open", None) is not None:
        yield
        return
    scope = _SCOPE.open = _Scope()
    with _BUSY.lock:  # a page run opens: a long job's borrowed threads go back at once (see long_job)
        _BUSY.pages += 1
        if _BUSY.borrowed:
            _BUSY.borrowed = False
            torch.set_num_threads(settings().torch_threads)
    try:
        yield
    finally:
        with _BUSY.lock:
            _BUSY.pages -= 1
        _SCOPE.open = None
        for cache, key in scope.held:
            cache.release(key)


def memory_scope(page_function):
    """A page function (page.main, the heads-and-views fragment) whose runs hold their share of the process's
    memory budget until it returns: a session whose work does not fit waits its turn (the "Queued" notice), or
    gets the page's warning with what to do. Touches no setting until a run is asked for, so page.main can still
    show a bad setting as its own message."""
    @functools.wraps(page_function)
    def scoped(*args, **kwargs):
        with memory_scope_of_run():
            return page_function(*args, **kwargs)

    return scoped


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
                          need=need, on_wait=_queued, scope_key=scope)
    at = None if logits_at is None else tuple(sorted({p % read.n_tokens for p in logits_at}))
    request = (name, text, off, ablation, patch, source)
    return runs().get(request + (at,),
                      lambda: model.run(read, ablate=off, ablation=ablation, patch=patch, source=source,
                                        logits_at=None if at is None else list(at), on_layer=on_layer),
                      need=need, on_wait=_queued, scope_key=scope,
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
# The last 8 censuses, shared by every session, keyed (model name, seed, texts or None): the Census view makes them;
# the Layer view and Inside a head read one where it was made (`census_made`), to set one input against it.
CENSUSES = RunCache(8, size=lambda _: 1)


def census_made(name: str, seed: int = 0):
    """The census of `name` on its default texts (seed `seed`), where some session has made it; else None."""
    return CENSUSES.peek((name, seed, None))


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


def checkpoint_run(name: str, step: int, text: str) -> AttentionRun:
    """`name` at training step `step` on `text`, all heads on; shared by every session like `get_run`."""
    # The key has get_run's shape, so get_run(f"{name}@{step}", text) finds this run instead of making it again.
    model = side_model(f"{name}@{step}")
    return runs().get((f"{name}@{step}", text, (), "zero", (), None, None), lambda: model.run(text),
                      need=work_bytes(model, text), on_wait=_queued, scope_key=(f"{name}@{step}", text))


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


# -- long steps: an instant estimate, and what the exact map will cost on this server --------------------------
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
