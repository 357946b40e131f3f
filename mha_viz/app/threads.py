"""Torch threads on this server: one per forward by default, and the idle cores a long job (an exact importance or
patching map) may borrow while nothing else in the machine or the process would be slowed (`long_job`). `BUSY`
counts the page runs and long jobs of this process; memory.memory_scope_of_run opens a page run.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time

import torch

from mha_viz.settings import settings


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
# other script run is open in the process (`BUSY.pages`: a page run, a toggle's fragment), and the other
# processes of the machine used under IDLE_OTHERS cores during its last chunk of heads. It looks again after every
# chunk (a few seconds at most), starting on the ordinary count. A page run that opens meanwhile puts the default
# back at once, for itself and every later thread (memory.memory_scope_of_run); the job drops its own at its next chunk.
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


BUSY = _Busy()


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
    with BUSY.lock:
        BUSY.long_jobs += 1
    last = [_cpu_sample()]

    def tick() -> int:
        now = _cpu_sample()
        others = _others_cores(last[0], now)
        last[0] = now
        with BUSY.lock:
            threads = long_job_threads(others, BUSY.pages, BUSY.long_jobs, cores, base)
            BUSY.borrowed = threads > base
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
        return threads

    try:
        if cores > base:  # nothing to borrow otherwise, and no reason to wait
            time.sleep(FIRST_LOOK_S)
            tick()
        yield tick
    finally:
        with BUSY.lock:
            BUSY.long_jobs -= 1
            if BUSY.borrowed:
                BUSY.borrowed = False
                torch.set_num_threads(base)
