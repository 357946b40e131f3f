"""Real-browser fixtures: one Streamlit server and one headless Chromium per test session, loopback only.

The server runs `app.py` exactly as a user would start it, on a free port on 127.0.0.1, with its output in
tests/e2e/artifacts/streamlit-server.log (gitignored). It is stopped by its PID in a finally.

Chromium is Debian's /usr/bin/chromium: `playwright install` cannot download browsers here. Without it the
browser tests are skipped locally, but they FAIL under CI (CI set to anything but "", "0", "false"), so a
CI machine that lost its browser cannot pass silently.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]  # tests/e2e/conftest.py -> repo root
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
HEALTH_TIMEOUT_S = 120  # a cold start imports torch + transformers on 2 cores


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _missing(what: str) -> None:
    """Skip locally, fail under CI."""
    if _in_ci():
        pytest.fail(f"{what}; CI is set, so the browser tests must run (install it with `make setup-browser`)")
    pytest.skip(f"{what}; install it with `make setup-browser` (skipped because CI is not set)")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as err:
        return f"(no log: {err})"


# Direct connections only: a proxy from the environment must never see (or break) loopback traffic.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthy(url: str) -> bool:
    try:
        with _NO_PROXY.open(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS


@pytest.fixture(scope="session")
def streamlit_url(artifacts: Path):
    """Start `streamlit run app.py` on a free loopback port; yield its URL; stop it by PID."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = artifacts / "streamlit-server.log"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [
        sys.executable, "-m", "streamlit", "run", "app.py",
        "--server.port", str(port), "--server.address", "127.0.0.1",
        "--server.headless", "true", "--browser.gatherUsageStats", "false",
        # Others edit app code while tests run: a file watcher would pop "source changed" banners mid-test.
        "--server.fileWatcherType", "none",
    ]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            t0 = time.monotonic()
            while not _healthy(url):
                if proc.poll() is not None:
                    pytest.fail(f"streamlit exited with code {proc.returncode} before answering "
                                f"/_stcore/health. Log tail ({log_path}):\n{_tail(log_path)}")
                if time.monotonic() - t0 > HEALTH_TIMEOUT_S:
                    pytest.fail(f"streamlit did not answer {url}/_stcore/health within {HEALTH_TIMEOUT_S} s. "
                                f"Log tail ({log_path}):\n{_tail(log_path)}")
                time.sleep(0.3)
            print(f"\n[e2e] streamlit healthy at {url} after {time.monotonic() - t0:.1f} s (pid {proc.pid})")
            yield url
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium through Playwright."""
    if not os.path.exists(CHROMIUM):
        _missing(f"{CHROMIUM} is missing")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the `playwright` Python package is not installed")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser, artifacts: Path, request):
    """A fresh page 1400 px wide; on failure its screenshot goes to artifacts/ for a look."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(90_000)
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.js_errors = errors  # read by tests that want to report them
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
