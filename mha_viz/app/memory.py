"""What a page's work holds in this server process's memory, sized before it runs: a run's attention
(`attention_bytes`), a page's work on one text (`work_bytes`, PAGE_FACTOR times it), and the scope that holds a
page's share of the run cache's budget until the page is drawn (`memory_scope`). The budget itself and what it
keeps are app/run_cache.py's.
"""
from __future__ import annotations

import contextlib
import functools

import streamlit as st
import torch

from mha_viz.app import threads
from mha_viz.app.run_cache import _SCOPE, RunCache
from mha_viz.contract import EncodedText, Model
from mha_viz.settings import settings


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


def queued(flight: int, n: int) -> None:
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
    with threads.BUSY.lock:  # a page run opens: a long job's borrowed threads go back at once (see long_job)
        threads.BUSY.pages += 1
        if threads.BUSY.borrowed:
            threads.BUSY.borrowed = False
            torch.set_num_threads(settings().torch_threads)
    try:
        yield
    finally:
        with threads.BUSY.lock:
            threads.BUSY.pages -= 1
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
