"""The page's bounded cache of runs (RunCache) and what its entries weigh: a run's tensors, a model's parameters.
Shared by every session of a process (cache.py makes the one instance); a run that does not fit the budget raises
RunBudgetError, whose message says what to do."""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import OrderedDict

import torch

from mha_viz.contract import AttentionRun, InputError, Model

_SCOPE = threading.local()  # .open: the scope of the script run in this thread, if any (memory.memory_scope)


def tensor_bytes(value) -> int:
    """The bytes of every tensor `value` holds: itself, or in a dataclass's fields, a dict's values, a list's or
    a tuple's items (a side model's measurement, such as a training step's `Circuits`)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return sum(tensor_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def run_bytes(run: AttentionRun) -> int:
    return tensor_bytes((run.attentions, run.output, run.logits))


def model_bytes(model: Model) -> int:
    """The weights a loaded model holds: every parameter and buffer of the torch modules it keeps."""
    modules = [m for m in vars(model).values() if isinstance(m, torch.nn.Module)]
    return sum(tensor_bytes((*m.parameters(), *m.buffers())) for m in modules)


def entry_bytes(entry) -> int:
    """What an entry of the run cache holds: a run's tensors, a side model's weights (`side_model`), or the tensors
    of what was measured on one (`side_result`)."""
    if isinstance(entry, Model):
        return model_bytes(entry)
    return run_bytes(entry) if isinstance(entry, AttentionRun) else tensor_bytes(entry)


class RunBudgetError(InputError):
    """A run does not fit this process's memory budget for runs (MHA_VIZ_RUN_CACHE_MB); the message says what to
    do. An InputError, so the page shows it where it shows any text it cannot run."""


class RunCache:
    """Results shared by every session, least recently used first out, bounded by `size` summed over entries:
    by default the bytes of a run (one SmolLM2 run of 512 tokens holds 283 MB of attention, one of 20 tokens
    0.4 MB). Not st.cache_data, which would copy the tensors on every hit, nor st.cache_resource, which cannot
    replay a progress bar.

    The same budget covers work in flight: `get(..., need=bytes)` (what a run's work holds, known before the
    forward pass), `reserve(bytes)` and `hold(bytes)` (a page's whole work on a text, `memory_scope`) drop kept
    runs to make room, then wait up to `wait_s` for other sessions' work to finish, calling `on_wait` once when they
    start waiting, and raise RunBudgetError when the need alone exceeds the budget or the wait runs out. Two
    sessions asking for the same key at once share one forward pass."""

    def __init__(self, budget_bytes: int, size=run_bytes, wait_s: float = 180.0, beside=None, drop_beside=None):
        self.budget = budget_bytes
        # bytes held outside this cache that count against the same budget (the engine's layers kept for
        # incremental runs, `interventions.reuse_bytes`): () -> int, or None; `drop_beside()` frees them when the
        # cache's own kept runs are gone and a run still does not fit (they only save work; waiting frees nothing)
        self._beside = beside or (lambda: 0)
        self._drop_beside = drop_beside or (lambda: None)
        self._local = threading.local()  # .covered: this thread's work is already reserved (`reserve`)
        self.wait_s = wait_s
        self._size = size
        self._runs: OrderedDict[tuple, object] = OrderedDict()
        self._sizes: dict[tuple, int] = {}
        self._flight: dict[tuple, int] = {}  # key -> bytes reserved by the run being made
        self._changed = threading.Condition(threading.Lock())

    def kept_bytes(self) -> int:
        return sum(self._sizes.values())

    def flight_bytes(self) -> int:
        return sum(self._flight.values())

    def peek(self, key: tuple):
        """The entry for `key`, or None when it has not been made (or was dropped)."""
        with self._changed:
            if key in self._runs:
                self._runs.move_to_end(key)
                return self._runs[key]
        return None

    def _evict(self, room: int) -> None:
        """Drop the least recently used kept runs until `room` more bytes fit (the lock is held)."""
        while self._runs and self.kept_bytes() + self.flight_bytes() + self._beside() + room > self.budget:
            oldest, _ = self._runs.popitem(last=False)
            del self._sizes[oldest]
        if self._beside() and self.kept_bytes() + self.flight_bytes() + self._beside() + room > self.budget:
            self._drop_beside()

    def _admit(self, key: tuple, need: int, on_wait, what: str = "This run would need") -> bool:
        """Reserve `need` bytes for `key`; False when another session is already making `key` (wait for it)."""
        if need > self.budget:
            raise RunBudgetError(
                f"{what} about {need / 2**20:,.0f} MB, more than this server allows for the runs of one process "
                f"({self.budget / 2**20:,.0f} MB, MHA_VIZ_RUN_CACHE_MB). Use a shorter text: attention memory grows "
                "with the square of the number of tokens.")
        deadline = time.monotonic() + self.wait_s
        told = False
        while True:
            if key in self._runs:
                return False
            if key in self._flight:  # the same run is being made: wait for it instead of making it twice
                self._changed.wait(max(deadline - time.monotonic(), 0.01))
                if time.monotonic() > deadline:
                    break
                continue
            self._evict(need)
            if self.flight_bytes() + self._beside() + need <= self.budget:
                self._flight[key] = need
                return True
            if not told and on_wait is not None:
                told = True
                on_wait(self.flight_bytes(), len(self._flight))
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._changed.wait(left)
        raise RunBudgetError(
            f"The server is busy: other visitors' runs in flight hold {self.flight_bytes() / 2**20:,.0f} MB of "
            f"the {self.budget / 2**20:,.0f} MB this process has for runs, and yours (about {need / 2**20:,.0f} "
            f"MB) waited {self.wait_s:.0f} s without fitting. Try again in a moment, or use a shorter text.")

    @contextlib.contextmanager
    def reserve(self, need: int, on_wait=None, what: str = "This page would need"):
        """Hold `need` bytes of the budget while the block runs (a page's whole work on one text: its runs and
        the copies its views make); runs made inside it, in this thread, are covered and reserve nothing more."""
        if getattr(self._local, "covered", False):
            yield
            return
        key = ("reserved", object())
        with self._changed:
            self._admit(key, need, on_wait, what)
        self._local.covered = True
        try:
            yield
        finally:
            self._local.covered = False
            with self._changed:
                self._flight.pop(key, None)
                self._changed.notify_all()

    def hold(self, need: int, on_wait=None, what: str = "This page would need") -> tuple:
        """Reserve `need` bytes (waiting, or raising RunBudgetError, as a run would) until `release(key)`."""
        key = ("held", object())
        with self._changed:
            self._admit(key, need, on_wait, what)
        return key

    def release(self, key: tuple) -> None:
        with self._changed:
            self._flight.pop(key, None)
            self._changed.notify_all()

    def find(self, answers):
        """The most recently used entry whose key `answers(key)` accepts, or None."""
        with self._changed:
            for key in reversed(self._runs):
                if answers(key):
                    self._runs.move_to_end(key)
                    return self._runs[key]
        return None

    def get(self, key: tuple, make, need: int = 0, on_wait=None, scope_key=None, answers=None):
        """The entry for `key`, made by `make()` if missing. `need` (bytes) is reserved while it is made; inside a
        `memory_scope` it is instead held by the scope, once per `scope_key` (a page's text), until the scope
        ends, whether the run is found or made: the page's copies of a found run need the memory too.
        `answers(kept key)`: whether another kept entry answers the request as well (a run holding more logits
        than asked for); `key` itself always does."""
        scope = getattr(_SCOPE, "open", None)
        if getattr(self._local, "covered", False):
            need = 0  # reserved with the page's work
        elif need and scope is not None:
            if (self, scope_key) not in scope.texts:
                scope.held.append((self, self.hold(need, on_wait)))
                scope.texts.add((self, scope_key))
            need = 0
        found = self.peek(key) if answers is None else self.find(lambda k: k == key or answers(k))
        if found is not None:
            return found
        if need:
            with self._changed:
                mine = self._admit(key, need, on_wait)
            if not mine:  # another session made it meanwhile (or was making it and has finished)
                found = self.peek(key)
                if found is not None:
                    return found
                return self.get(key, make, need, on_wait, answers=answers)  # failed or dropped at once: make it
        try:
            run = make()  # outside the lock: sessions run their forwards in parallel
        finally:
            if need:
                with self._changed:
                    self._flight.pop(key, None)
                    self._changed.notify_all()
        size = self._size(run)
        with self._changed:
            self._runs[key], self._sizes[key] = run, size
            self._runs.move_to_end(key)
            while len(self._runs) > 1 and self.kept_bytes() + self.flight_bytes() + self._beside() > self.budget:
                oldest, _ = self._runs.popitem(last=False)
                del self._sizes[oldest]
            self._changed.notify_all()
        return run
