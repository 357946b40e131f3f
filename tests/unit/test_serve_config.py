"""deploy/serve.py without starting anything: the public-server settings, the settings check that runs before any
process starts, and the generated nginx and supervisord configs (nginx and supervisord themselves check them:
`nginx -t` and supervisord's own parser, when installed)."""
from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "deploy"))
import serve  # noqa: E402


def test_public_defaults_apply_unless_the_operator_set_them():
    assert serve.app_env(public=True, environ={})["MHA_VIZ_ALLOW_CUSTOM"] == "0"
    assert serve.app_env(public=True, environ={})["MHA_VIZ_MAX_TOKENS"] == "256"
    explicit = serve.app_env(public=True, environ={"MHA_VIZ_ALLOW_CUSTOM": "1", "MHA_VIZ_MAX_PARAMS": "2e8"})
    assert explicit["MHA_VIZ_ALLOW_CUSTOM"] == "1"
    assert "MHA_VIZ_ALLOW_CUSTOM" not in serve.app_env(public=False, environ={})
    assert serve.app_env(public=True, environ={}, extra={"MHA_VIZ_ALLOW_CUSTOM": "1"})["MHA_VIZ_ALLOW_CUSTOM"] == "1"


def test_a_cookie_can_only_name_the_app_processes(tmp_path):
    conf = serve.nginx_config([8601, 8602], "127.0.0.1:8080", tmp_path)
    pinned = conf.split("map $cookie_mhaviz_backend $mhaviz_target {")[1].split("}")[0]
    lines = [line.strip() for line in pinned.strip().splitlines()]
    assert lines == ["default mhaviz_any;", "b0 mhaviz_b0;", "b1 mhaviz_b1;"]
    own = conf.split("upstream mhaviz_b0 {")[1].split("}")[0]
    assert [line.strip() for line in own.strip().splitlines()] == [
        "server 127.0.0.1:8601 max_fails=1 fail_timeout=5s;", "server 127.0.0.1:8602 backup;"]
    assert conf.count("proxy_pass http://$mhaviz_target;") == 2 and "listen 127.0.0.1:8080;" in conf
    assert "worker_shutdown_timeout 1s;" in conf and "proxy_next_upstream error timeout" in conf


def test_the_route_cookie_names_the_process_that_answered_after_a_retry(tmp_path):
    """After a retry $upstream_addr lists every address tried; the cookie must name the last, which answered."""
    import re

    conf = serve.nginx_config([8601, 8602], "127.0.0.1:8080", tmp_path)
    block = conf.split("map $upstream_addr $mhaviz_route {")[1].split("}")[0]
    rules = [line.strip().rstrip(";").rsplit(" ", 1) for line in block.strip().splitlines()[1:]]
    regexes = [(re.compile(r[0].lstrip("~")), r[1]) for r in rules]

    def route(addr: str) -> str:
        return next((name for rx, name in regexes if rx.search(addr)), "")

    assert route("127.0.0.1:8601") == "b0" and route("127.0.0.1:8601, 127.0.0.1:8602") == "b1"
    assert route("127.0.0.1:86012") == "" and route("127.0.0.1:8602, 127.0.0.1:8601") == "b0"


@pytest.mark.skipif(serve.nginx_missing() is not None, reason="nginx is not installed")
def test_nginx_accepts_the_config(tmp_path):
    conf = tmp_path / "nginx.conf"
    conf.write_text(serve.nginx_config([8601, 8602, 8603], "127.0.0.1:8080", tmp_path))
    check = subprocess.run([serve.NGINX, "-t", "-q", "-e", "stderr", "-p", str(tmp_path), "-c", str(conf)],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_supervisord_config_restarts_and_health_checks_every_process(tmp_path):
    workers = [serve.Worker(i, 8601 + i, tmp_path / f"app-{i}.log", tmp_path / f"health-{i}.log") for i in range(2)]
    text = serve.supervisord_config(workers, tmp_path)
    parser = configparser.RawConfigParser()
    parser.read_string(text)
    assert parser.get("group:apps", "programs") == "app0,app1"
    for w in workers:
        prog = parser[f"program:{w.name}"]
        assert f"--server.port {w.port}" in prog["command"] and "--server.address 127.0.0.1" in prog["command"]
        assert prog["autorestart"] == "true" and int(prog["stopwaitsecs"]) == serve.STOP_WAIT_S
        check = parser[f"eventlistener:{w.name}_health"]
        assert check["command"].endswith(f"superlance.httpok -p {w.name} -E -t {serve.HEALTH_TIMEOUT_S} "
                                         f"http://127.0.0.1:{w.port}/_stcore/health"), check["command"]
        assert check["events"] == f"TICK_{serve.HEALTH_EVERY_S}"
    if serve.supervisor_missing() is None:  # supervisord's own parser reads it, every section and option known
        from supervisor.options import ServerOptions

        conf = tmp_path / "supervisord.conf"
        conf.write_text(text)
        options = ServerOptions()
        options.realize(["-c", str(conf)])
        assert sorted(g.name for g in options.process_group_configs) == ["app0_health", "app1_health", "apps"]


# -- the settings check that runs before anything starts ---------------------------------------------------------
BAD = [("MHA_VIZ_MAX_TOKENS", "1e400"), ("MHA_VIZ_CACHE", "~nouser/x"), ("MHA_VIZ_MAX_PARAMS", "abc"),
       ("MHA_VIZ_RUN_CACHE_MB", "abc"), ("MHA_VIZ_ALLOW_CUSTOM", "maybe"), ("MHA_VIZ_TORCH_THREADS", "0")]


@pytest.mark.parametrize("name,raw", BAD, ids=[f"{n}={v}" for n, v in BAD])
def test_serve_refuses_bad_settings_before_starting_anything(monkeypatch, capsys, name, raw):
    started = []
    monkeypatch.setenv(name, raw)
    monkeypatch.setattr(serve.subprocess, "Popen", lambda *a, **k: started.append(a) or pytest.fail("started"))
    monkeypatch.setattr(serve.tempfile, "mkdtemp", lambda *a, **k: started.append(a) or pytest.fail("temp dir"))
    assert serve.main(["--procs", "1", "--port", "1"]) == 1
    err = capsys.readouterr().err
    assert f"{name}={raw!r}" in err and "nothing was started" in err, err
    assert started == []


def test_serve_exits_non_zero_with_the_variable_named():
    """The script as `make serve` runs it, in its own process."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "MHA_VIZ_MAX_TOKENS": "1e400",
           "MHA_VIZ_MAX_PARAMS": "abc"}
    out = subprocess.run([sys.executable, str(REPO / "deploy" / "serve.py"), "--procs", "1"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out
    assert "MHA_VIZ_MAX_TOKENS='1e400'" in out.stderr and "MHA_VIZ_MAX_PARAMS='abc'" in out.stderr, out.stderr


def test_more_threads_than_cores_warns_but_starts(monkeypatch):
    monkeypatch.setenv("MHA_VIZ_TORCH_THREADS", "1000")
    (warning,) = serve.check_settings(dict(__import__("os").environ))
    assert "MHA_VIZ_TORCH_THREADS=1000" in warning


def test_supervisord_and_httpok_are_importable_where_nginx_is():
    """CI installs requirements.txt; a deployment that lost supervisord must not pass unnoticed."""
    if shutil.which("nginx") or Path(serve.NGINX).exists():
        assert serve.supervisor_missing() is None
