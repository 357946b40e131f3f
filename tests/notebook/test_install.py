"""`pip install .` and the `mha-viz` command: the wheel is built from a copy of this checkout, installed into a
fresh virtual environment (which sees this one's packages through a .pth file, so nothing is downloaded:
`--no-index`), and its command starts the app, which must answer its health check; stopped by its PID. An
editable install of the same copy reads the copy's own assets."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from mha_viz.web import GRID_FILES

ROOT = Path(__file__).resolve().parents[2]
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
LEAVE_OUT = (".git", ".venv", "venv", "build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".pytest_cache",
             ".hypothesis", "tests", "benchmarks", "artifacts", "_checkout")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _venv(path: Path) -> Path:
    """A venv without pip of its own that sees this interpreter's packages (torch included) through a .pth."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(path), "platbase": str(path)})["purelib"])
    (site / "_outer_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return path / "bin" / "python"


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PIP_NO_INDEX": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    copy = tmp_path_factory.mktemp("src") / "mha-viz"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*LEAVE_OUT))
    return copy


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(dist)], check=True, env=_clean_env())
    (path,) = dist.glob("mha_viz-*.whl")
    return path


def test_the_wheel_carries_the_browser_code_the_assets_and_the_command(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
        meta = z.read(next(n for n in names if n.endswith("METADATA"))).decode()
    grid = [f"mha_viz/web/grid/{name}" for name in (*GRID_FILES, "grid.css")]
    for needed in (*grid, "mha_viz/app/components/nav.js", "mha_viz/app/components/nav.css",
                   "mha_viz/notebook/widget.js", "mha_viz/notebook/maps.js", "mha_viz/notebook/common.js",
                   "mha_viz/cli.py",
                   "mha_viz/_checkout/app.py",
                   "mha_viz/_checkout/deploy/serve.py", "mha_viz/_checkout/assets/examples.json",
                   "mha_viz/_checkout/assets/notes.md", "mha_viz/_checkout/assets/tiny/model.safetensors",
                   "mha_viz/_checkout/assets/tiny/probes.json"):
        assert needed in names, f"{needed} is not in {wheel.name}"
    steps = sorted(p.name for p in (ROOT / "assets" / "tiny" / "checkpoints").glob("*.safetensors"))
    assert steps and all(f"mha_viz/_checkout/assets/tiny/checkpoints/{s}" in names for s in steps)
    assert not [n for n in names if n.endswith(".png")], "the README's screenshots do not belong in the wheel"
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/"))]
    assert "mha-viz = mha_viz.cli:main" in entry
    # Ranges, not the pins: torch 2.13.0 (requirements.txt) satisfies the declared range.
    assert "Requires-Dist: torch>=2.1" in meta and "==" not in meta.split("Requires-Dist: torch")[1].split("\n")[0]
    print(f"\n[install] {wheel.name}: {wheel.stat().st_size / 1e6:.2f} MB, {len(names)} files")


def test_the_installed_command_starts_the_app(wheel, tmp_path):
    python = _venv(tmp_path / "venv")
    subprocess.run([str(python), "-m", "pip", "install", "--no-index", "-q", str(wheel)], check=True,
                   env=_clean_env(), cwd=tmp_path)
    env, cwd = _clean_env(), tmp_path  # away from the checkout: nothing is imported from it
    where = subprocess.run([str(python), "-c", "import mha_viz, mha_viz.settings as s; "
                            "print(mha_viz.__file__); print(s.ASSETS); "
                            "print(mha_viz.load_model('tiny').run('one , two , three .').attentions.shape)"],
                           check=True, capture_output=True, text=True, env=env, cwd=cwd).stdout.split("\n")
    venv = str(tmp_path / "venv")
    assert where[0].startswith(venv) and where[1].startswith(venv) and where[1].endswith("_checkout/assets")
    assert where[2].startswith("torch.Size([3, 4,")
    # `mha-viz serve` runs the deployment recipe the wheel carries, through its own command line.
    usage = subprocess.run([str(tmp_path / "venv" / "bin" / "mha-viz"), "serve", "--help"], capture_output=True,
                           text=True, env=env, cwd=cwd, timeout=120)
    assert usage.returncode == 0 and "--procs" in usage.stdout
    port = _free_port()
    log = open(tmp_path / "mha-viz.log", "w")
    proc = subprocess.Popen([str(tmp_path / "venv" / "bin" / "mha-viz"), "--port", str(port), "--host", "127.0.0.1"],
                            env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, answer = time.monotonic() + 180, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with _NO_PROXY.open(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                    answer = (resp.status, resp.read().decode())
                    break
            except OSError:
                time.sleep(0.5)
        assert answer == (200, "ok"), (tmp_path / "mha-viz.log").read_text()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def test_an_editable_install_reads_the_checkouts_own_assets(source, tmp_path):
    python = _venv(tmp_path / "venv")
    subprocess.run([str(python), "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps", "-q",
                    "-e", str(source)], check=True, env=_clean_env(), cwd=tmp_path)
    out = subprocess.run([str(python), "-c", "import mha_viz.settings as s, mha_viz.cli as c; print(s.ASSETS); "
                          "print(c.serve_script())"], check=True, capture_output=True, text=True,
                         env=_clean_env(), cwd=tmp_path).stdout.split("\n")
    assert out[0] == str(source / "assets") and out[1] == str(source / "deploy" / "serve.py")
    assert (tmp_path / "venv" / "bin" / "mha-viz").exists()
