"""A study run on Ray: every checkpoint of every run not yet in the study file becomes one task
(`mha_viz.study.measure.measure`), at most `workers` at a time; each result is written as it comes back, one
transaction per checkpoint (`mha_viz.study.store.write`).

Faults: a checkpoint that does not load comes back with its one-line reason and is recorded as failed; a worker
process that dies mid-task (killed, out of memory) is retried by Ray (`MAX_RETRIES`), then recorded as failed;
Ctrl-C cancels what is in flight and leaves every checkpoint already written whole, so the same command goes on
where it stopped. ray is imported here only: the app starts without it.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mha_viz.analysis.census_run import CensusConfig
from mha_viz.contract import InputError
from mha_viz.study import store
from mha_viz.study.find import Checkpoint, digest, find_checkpoints, run_names
from mha_viz.study.measure import CONTROL, Measured, config_fields, measure

MAX_RETRIES = 3  # a task whose worker died is run again this many times (Ray's max_retries)
CONNECT_SECONDS = 5.0  # how long a Ray address may take to answer before the study says it does not
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder holding mha_viz/, for local workers' path


class RayAddressError(InputError):
    """A Ray address that does not answer."""


@dataclass
class Progress:
    """Where a study stands: what the progress line says."""
    total: int
    done: int = 0
    failed: int = 0
    skipped: int = 0  # already in the file with the same digest
    started: float = field(default_factory=time.perf_counter)

    @property
    def left(self) -> int:
        return self.total - self.skipped - self.done - self.failed

    def seconds_left(self) -> float | None:
        measured = self.done + self.failed
        if not measured:
            return None
        return (time.perf_counter() - self.started) / measured * self.left

    def line(self) -> str:
        eta = self.seconds_left()
        when = ("finished" if not self.left else "time left: after the first checkpoint" if eta is None
                else f"about {_duration(eta)} left")
        kept = f", {self.skipped} already measured" if self.skipped else ""
        return f"study: {self.done} done, {self.failed} failed, {self.left} left{kept} · {when}"


@dataclass(frozen=True)
class StudySummary:
    out: str
    measured: int  # checkpoints measured by this call (done or failed)
    failed: int
    skipped: int
    seconds: float
    workers: int
    errors: tuple[tuple[str, int, str], ...] = ()  # (run, step, reason) of this call's failures


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 120 else (f"{s // 60} min" if s < 7200 else f"{s / 3600:.1f} h")


def check_address(address: str, timeout: float = CONNECT_SECONDS) -> None:
    """Raise RayAddressError (one line) unless something answers at `address` ("host:port", "ray://host:port")
    within `timeout` seconds: ray.init on an address that does not answer waits far longer before it fails."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise RayAddressError(f"--ray {address!r} is not an address: give HOST:PORT of the cluster's head "
                              "(`ray start --head` prints it), ray://HOST:10001, or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise RayAddressError(f"the Ray cluster at {address} does not answer ({err.strerror or err} within "
                              f"{timeout:.0f} s): start it with `ray start --head`, or check the address") from None


def _ray():
    try:
        import ray
    except ImportError:
        raise InputError("a study runs on Ray: pip install 'mha-viz[scale]' (ray and duckdb)") from None
    return ray


def start_ray(address: str | None, workers: int | None) -> tuple[object, bool]:
    """Ray, connected: to `address`, to the Ray this process already runs, or a local one started here with
    `workers` CPUs (default: this machine's cores). Returns (ray, whether this call started it)."""
    ray = _ray()
    if ray.is_initialized():
        return ray, False
    if address:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        return ray, True
    with worker_path(PACKAGE_ROOT):
        ray.init(num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, logging_level="ERROR",
                 log_to_driver=False)
    return ray, True


@contextlib.contextmanager
def worker_path(*folders: str):
    """PYTHONPATH with `folders` first while a local Ray starts: its workers inherit it and import mha_viz from
    this checkout. (A runtime_env with the same variable cost the first task 6 s more here, for its agent.)"""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (*folders, before or "") if p)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def plan(run_dirs: list[str | Path]) -> list[tuple[str, str, list[Checkpoint]]]:
    """(run name, folder, its checkpoints) per RUN_DIR; InputError for a folder without checkpoints."""
    if not run_dirs:
        raise InputError("give at least one RUN_DIR: a training run's output folder")
    return [(name, str(Path(d).resolve()), find_checkpoints(d, name)) for name, d in zip(run_names(run_dirs), run_dirs)]


def run_study(run_dirs: list[str | Path], out: str | Path, ray_address: str | None = None, workers: int | None = None,
              config: CensusConfig | None = None, progress: Callable[[Progress], None] | None = None,
              retries: int = MAX_RETRIES, task: Callable = measure) -> StudySummary:
    """Measure every checkpoint of `run_dirs` not yet in the study file `out` (same digest: skipped) on Ray, and
    write each as it comes back. `config`: the census's size (None: `CensusConfig.for_model`); kept in the file,
    so a rerun measures the same way. `progress(Progress)` is called at the start and after every checkpoint.
    `task(checkpoint, config fields, threads) -> Measured` is what each Ray task runs (`measure`; tests wrap it)."""
    runs = plan(run_dirs)
    if ray_address:
        check_address(ray_address)  # before the file is touched: an address that does not answer is one line
    con = store.connect(out)
    try:
        fields = store.settle_config(con, config_fields(config), CONTROL)
        store.add_runs(con, [(name, folder, cks[0].layout) for name, folder, cks in runs])
        have = store.kept(con)
        todo, state = [], Progress(total=sum(len(c) for _, _, c in runs))
        for _, _, cks in runs:
            for ck in cks:
                d = digest(ck)
                if have.get((ck.run, ck.step)) == d:
                    state.skipped += 1
                else:
                    todo.append((ck, d))
        if progress:
            progress(state)
        if not todo:
            return StudySummary(str(out), 0, 0, state.skipped, 0.0, 0)
        return _measure_all(con, todo, fields, state, ray_address, workers, progress, retries, str(out), task)
    finally:
        con.close()


def _measure_all(con, todo, fields, state: Progress, ray_address, workers, progress, retries, out,
                 fn: Callable) -> StudySummary:
    ray, started = start_ray(ray_address, workers)
    start = time.perf_counter()
    errors, running = [], {}
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        workers = max(1, min(workers or cpus, cpus))
        threads = max(1, cpus // workers)  # each task's share of the cores, for torch's threads
        task = ray.remote(fn).options(num_cpus=threads, max_retries=retries, retry_exceptions=False)
        waiting = list(todo)
        state.started = time.perf_counter()
        while waiting or running:
            while waiting and len(running) < workers:
                ck, d = waiting.pop(0)
                running[task.remote(ck, fields, threads)] = (ck, d)
            ready, _ = ray.wait(list(running), num_returns=1)
            for ref in ready:
                ck, d = running.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as err:  # the worker died on every try
                    result = Measured(step=ck.step, run=ck.run, error=f"the worker died {retries + 1} times: "
                                      f"{type(err).__name__}")
                store.write(con, ck, d, result)
                if result.error:
                    state.failed += 1
                    errors.append((ck.run, ck.step, result.error))
                else:
                    state.done += 1
                if progress:
                    progress(state)
    except BaseException:  # Ctrl-C or a failed write: what is in flight is dropped; what is written stays whole
        if not started:  # on a cluster this call did not start, its tasks are cancelled; ours end with its shutdown
            # Not force=True: killing a worker whose result is on its way aborted the driver (Ray 2.60's
            # task_manager "Tried to complete task that was not pending"), seen on Ctrl-C.
            for ref in running:
                try:
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - a task that finished meanwhile
                    pass
        raise
    finally:
        if started:
            ray.shutdown()
    return StudySummary(out, state.done + state.failed, state.failed, state.skipped, time.perf_counter() - start,
                        workers, tuple(errors))


def print_progress(state: Progress, stream=None) -> None:
    """The progress line, rewritten in place on a terminal, one line per checkpoint otherwise."""
    stream = stream or sys.stderr
    end = "\r" if stream.isatty() and state.left else "\n"
    stream.write(state.line() + end)
    stream.flush()
