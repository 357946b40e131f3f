"""What the two tests behind the real proxy share (test_proxy.py: sticky sessions; test_supervised.py: faults):
the launcher, the deployment fixture's body, the page probes and a wait that says what the page shows."""
from __future__ import annotations

import os
import sys

import pytest

from harness import REPO, page_problems

sys.path.insert(0, str(REPO / "deploy"))
import serve  # noqa: E402  (deploy/serve.py: the launcher `make serve` runs)

N_HEADS = 12  # all-MiniLM-L6-v2, the default model
TIMEOUT_MS = 150_000  # cold app processes and several sessions on 2 shared cores

STRIP = "() => document.querySelector('[data-testid=\"token-strip\"]')?.innerText ?? ''"
HEADS_OFF = """() => [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
  .map(e => e.innerText).filter(t => t.startsWith('Heads off')).join(' | ')"""


def sentence(marker: str) -> str:
    return f"The {marker} near the station was quiet before the evening train."


def deployment(n_procs: int, log_dir, what: str):
    """A generator for a module fixture: a Deployment of `n_procs` app processes, stopped by PID afterwards
    (SIGCONT, SIGTERM, SIGKILL to every child: a stopped process too). Without nginx or supervisord the test is
    skipped locally and fails under CI, like the browser."""
    require(what)
    try:
        d = serve.Deployment(n_procs, log_dir=log_dir)
    except serve.DeployError as err:
        pytest.fail(str(err))
    try:
        yield d
    finally:
        d.stop()


def require(what: str) -> None:
    """Skip `what` without nginx or supervisord locally; fail it under CI, where it must run."""
    why = serve.nginx_missing() or serve.supervisor_missing()
    if why:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(f"{why}; CI is set, so {what} must run")
        pytest.skip(why)


def wait(page, js: str, what: str, timeout_ms: int = TIMEOUT_MS, arg=None) -> None:
    """Wait for `js` to be truthy; on timeout fail saying what was awaited and what the page shows."""
    try:
        page.wait_for_function(js, arg=arg, timeout=timeout_ms, polling=200)
    except Exception as err:
        if type(err).__name__ != "TimeoutError":
            raise
        pytest.fail(f"timed out waiting for {what}; page shows: {page_problems(page)}")
