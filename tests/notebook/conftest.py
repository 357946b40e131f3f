"""The notebook tests' order (see below), and the two real-browser modules' fixtures: a headless Chromium and a
Jupyter server on loopback, each made once per module and stopped after it."""
import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config, items):
    """The real-browser notebook tests (test_jupyter_*) first: nbclient (test_example) leaves an asyncio loop set in
    this thread, inside which Playwright's sync API refuses to start."""
    items.sort(key=lambda item: 0 if item.path.name.startswith("test_jupyter_") else 1)


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def browser():
    from jupyter_harness import CHROMIUM  # the harness needs nbformat, which the browser modules check first

    if not os.path.exists(CHROMIUM):
        if _in_ci():
            pytest.fail(f"{CHROMIUM} is missing; CI is set, so the notebook browser tests must run")
        pytest.skip(f"{CHROMIUM} is missing (make setup-browser)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-proxy-server"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from jupyter_harness import JupyterServer

    s = JupyterServer(tmp_path_factory.mktemp("nbroot"), Path(tmp_path_factory.mktemp("nblog")) / "jupyter.log")
    try:
        yield s
    finally:
        s.stop()
