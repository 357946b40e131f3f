"""A real Jupyter server (JupyterLab 4 and Notebook 7 are both served by one `jupyter lab` process) on loopback,
started by the tests, with its own runtime and config folders, and a Chromium page that runs a notebook's cells
the way a person does (click the cell, Shift+Enter). Stopped by its PID. Used by test_jupyter_browser.py and
benchmarks/bench_notebook.py."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


class JupyterServer:
    """`jupyter lab` serving `root` on 127.0.0.1 with a random token; the kernel imports mha_viz from this checkout."""

    def __init__(self, root: Path, log_path: Path, timeout_s: float = 120):
        self.root, self.port, self.token = root, free_port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        state = root.parent / (root.name + "-jupyter")
        for sub in ("runtime", "config", "data"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
               "JUPYTER_CONFIG_DIR": str(state / "config"), "JUPYTER_DATA_DIR": str(state / "data"),
               "JUPYTER_PLATFORM_DIRS": "1"}
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
             f"--port={self.port}", f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
             "--LabApp.extension_manager=readonly", "--ServerApp.port_retries=0"],
            cwd=root, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited ({self.proc.returncode}); see {log_path}")
            try:
                self.api("status")
                return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer in {timeout_s:.0f} s; see {log_path}")

    def api(self, path: str):
        with _NO_PROXY.open(f"{self.url}/api/{path}?token={self.token}", timeout=5) as resp:
            return json.loads(resp.read())

    def page_url(self, front_end: str, name: str) -> str:
        # JupyterLab restores a workspace's open tabs on every page load: an earlier test's notebook would come
        # back, hidden behind this one, and match every cell locator first. One workspace per notebook keeps it out.
        workspace = Path(name).stem
        where = {"lab": f"lab/workspaces/{workspace}/tree/{name}", "notebook7": f"notebooks/{name}"}[front_end]
        return f"{self.url}/{where}?token={self.token}"

    def kernel_ready(self, name: str) -> bool:
        """The kernel of notebook `name` is started, idle and connected to a page."""
        kernels = [s["kernel"] for s in self.api("sessions") if s.get("path", "").endswith(name) and s.get("kernel")]
        return any(k["execution_state"] == "idle" and k["connections"] > 0 for k in kernels)

    def stop(self) -> None:
        """Stop the server and its kernels (one process group, started by us) by the server's PID."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


class Page:
    """One Chromium page on the server; every request that leaves loopback is refused and recorded (offline)."""

    def __init__(self, browser, server: JupyterServer):
        self.server, self.outside, self.console_errors = server, [], []
        self.context = browser.new_context(viewport={"width": 1400, "height": 1100}, accept_downloads=True)
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.console_errors.append(m.text) if m.type == "error" else None)

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith((self.server.url, "ws://127.0.0.1", "blob:", "data:")):
            route.continue_()
        else:
            self.outside.append(url)
            route.abort()

    def open(self, front_end: str, name: str, timeout_s: float = 120) -> None:
        self.page.goto(self.server.page_url(front_end, name))
        self.page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=timeout_s * 1000)
        deadline = time.monotonic() + timeout_s
        while not self.server.kernel_ready(name):
            if time.monotonic() > deadline:
                raise TimeoutError("the notebook's kernel did not start (or connect) in time")
            # Never time.sleep with a page open: Playwright's sync API serves the routes (every request the
            # page makes) only while this thread is inside a Playwright call.
            self.page.wait_for_timeout(300)

    def run_cell(self, index: int, timeout_s: float = 180) -> None:
        """Click cell `index`, press Shift+Enter, wait until its prompt shows an execution count."""
        cell = self.page.locator(".jp-Notebook .jp-Cell").nth(index)
        cell.locator(".cm-content").click()
        self.page.keyboard.press("Shift+Enter")
        prompt = cell.locator(".jp-InputPrompt")
        deadline = time.monotonic() + timeout_s
        while not any(ch.isdigit() for ch in prompt.inner_text()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"cell {index} did not finish in {timeout_s:.0f} s; its output: "
                                   f"{cell.locator('.jp-OutputArea').inner_text()!r}")
            self.page.wait_for_timeout(200)

    def output_text(self, index: int) -> str:
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea").inner_text()

    def close(self) -> None:
        self.context.close()
