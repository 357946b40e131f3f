"""What the two tests behind the real proxy share (test_proxy.py: sticky sessions; test_supervised.py: faults):
the launcher, the deployment fixture's body and the page probes (the wait is harness.wait, bounded by each page's
timeout)."""
from __future__ import annotations

import os
import sys

import pytest

from harness import REPO

sys.path.insert(0, str(REPO / "deploy"))
import serve  # noqa: E402  (deploy/serve.py: the launcher `make serve` runs)

N_HEADS = 12  # all-MiniLM-L6-v2, the default model
TIMEOUT_MS = 150_000  # cold app processes and several sessions on 2 shared cores

STRIP = "() => document.querySelector('[data-testid=\"token-strip\"]')?.innerText ?? ''"


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
