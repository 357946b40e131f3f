"""Start and stop one app process on loopback, the way `make run` does: used by the deployment (deploy/serve.py),
the browser harness of the tests (tests/e2e/harness.py) and the benchmarks, so all three run the same server.
Servers listen on 127.0.0.1 only and are stopped by their own PID."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # deploy/launch.py -> repo root
HEALTH_TIMEOUT_S = 180  # a cold start imports torch + transformers on 2 shared cores

# Direct connections only: a proxy from the environment must never see (or break) loopback traffic.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with _NO_PROXY.open(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError as err:
        return f"(no log: {err})"


class ServerError(RuntimeError):
    pass


class Server:
    """The app in `repo` (default: this checkout) as `make run` starts it (`python app.py`: the default model loads
    while the server starts; `launcher` ("-m", "streamlit", "run", "app.py") starts it the old way, for a checkout
    from before app.py could launch itself), on a free loopback port, its output in `log_path`. `t_spawn` /
    `t_healthy` are monotonic times for cold-start
    figures. Raises ServerError, with the log's tail, if it exits or does not answer /_stcore/health in time."""

    def __init__(self, log_path: Path, extra_env: dict | None = None, timeout_s: float = HEALTH_TIMEOUT_S,
                 repo: Path = REPO, launcher: tuple[str, ...] = ("app.py",), offline: bool = True):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Tests and benchmarks never reach the hub; a deployment that allows users' own models may (offline=False).
        hub = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"} if offline else {}
        env = {**os.environ, **hub, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", **(extra_env or {})}
        cmd = [sys.executable, *launcher, "--server.port", str(self.port),
               "--server.address", "127.0.0.1", "--server.headless", "true", "--browser.gatherUsageStats", "false",
               # Others edit app code while tests run: a file watcher would pop "source changed" banners mid-test.
               "--server.fileWatcherType", "none"]
        self._log = open(log_path, "w")
        self.t_spawn = time.monotonic()
        self.proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        try:
            while not healthy(self.url):
                if self.proc.poll() is not None:
                    raise ServerError(f"the app exited with code {self.proc.returncode} before answering "
                                      f"/_stcore/health. Log tail ({log_path}):\n{tail(log_path)}")
                if time.monotonic() - self.t_spawn > timeout_s:
                    raise ServerError(f"the app did not answer {self.url}/_stcore/health within {timeout_s:.0f} s. "
                                      f"Log tail ({log_path}):\n{tail(log_path)}")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        self.t_healthy = time.monotonic()

    def _status(self, field: str) -> int:
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        return 0

    def peak_rss(self) -> int:
        """VmHWM: the peak resident set of the server process, in bytes."""
        return self._status("VmHWM")

    def rss(self) -> int:
        return self._status("VmRSS")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
        self._log.close()
