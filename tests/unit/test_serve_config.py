"""deploy/serve.py without starting anything: the public-server settings and the generated nginx config."""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "deploy"))
import serve  # noqa: E402


def test_public_defaults_apply_unless_the_operator_set_them():
    assert serve.app_env(public=True, environ={})["MHA_VIZ_ALLOW_CUSTOM"] == "0"
    explicit = serve.app_env(public=True, environ={"MHA_VIZ_ALLOW_CUSTOM": "1", "MHA_VIZ_MAX_PARAMS": "2e8"})
    assert explicit["MHA_VIZ_ALLOW_CUSTOM"] == "1"
    assert "MHA_VIZ_ALLOW_CUSTOM" not in serve.app_env(public=False, environ={})
    assert serve.app_env(public=True, environ={}, extra={"MHA_VIZ_ALLOW_CUSTOM": "1"})["MHA_VIZ_ALLOW_CUSTOM"] == "1"


def test_a_cookie_can_only_name_the_app_processes(tmp_path):
    conf = serve.nginx_config([8601, 8602], "127.0.0.1:8080", tmp_path)
    pinned = conf.split("map $cookie_mhaviz_backend $mhaviz_target {")[1].split("}")[0]
    lines = [line.strip() for line in pinned.strip().splitlines()]
    assert lines == ["default mhaviz_any;", "b0 127.0.0.1:8601;", "b1 127.0.0.1:8602;"]
    assert "proxy_pass http://$mhaviz_target;" in conf and "listen 127.0.0.1:8080;" in conf
