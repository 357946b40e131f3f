"""Real-browser fixtures: one Streamlit server and one headless Chromium per test session, loopback only.

The server runs `app.py` exactly as a user would start it, on a free port on 127.0.0.1, with its output in
tests/e2e/artifacts/streamlit-server.log (gitignored). It is stopped by its PID in a finally.

Chromium is Debian's /usr/bin/chromium: `playwright install` cannot download browsers here. Without it the
browser tests are skipped locally, but they FAIL under CI (CI set to anything but "", "0", "false"), so a
CI machine that lost its browser cannot pass silently.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import Server, ServerError, chromium, chromium_missing, new_page

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _missing(what: str) -> None:
    """Skip locally, fail under CI."""
    if _in_ci():
        pytest.fail(f"{what}; CI is set, so the browser tests must run (install it with `make setup-browser`)")
    pytest.skip(f"{what}; install it with `make setup-browser` (skipped because CI is not set)")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def streamlit_url(artifacts: Path):
    """Start the app on a free loopback port (tests/e2e/harness.py); yield its URL; stop it by PID."""
    try:
        server = Server(artifacts / "streamlit-server.log")
    except ServerError as err:
        pytest.fail(str(err))
    try:
        print(f"\n[e2e] app healthy at {server.url} after {server.t_healthy - server.t_spawn:.1f} s "
              f"(pid {server.proc.pid})")
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium through Playwright."""
    why = chromium_missing()
    if why:
        _missing(why)
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, artifacts: Path, request):
    """A fresh page 1400 px wide; on failure its screenshot goes to artifacts/ for a look."""
    context, pg = new_page(browser, 1400, 1000)  # pg.js_errors: read by tests that want to report them
    try:
        yield pg
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            try:
                pg.screenshot(path=str(artifacts / f"FAILED-{request.node.name}.png"), full_page=True)
            except Exception as err:  # the failure itself matters more than its picture
                print(f"[e2e] could not save a failure screenshot: {err}")
        context.close()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Expose each phase's report on the item so the page fixture knows whether the test failed.
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)
