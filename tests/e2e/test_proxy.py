"""The classroom recipe (deploy/serve.py, `make serve`): 2 app processes under supervisord behind nginx, 3 browser
sessions. Faults (a worker killed or hung) are tests/e2e/test_supervised.py.

Checked: nginx pins each browser to one app process with its cookie (every request a session makes, its websocket
included, reaches the process its cookie names, per nginx's access log), the sessions are spread over both
processes, and each session sees its own sentence and its own head off, nobody else's. nginx is Debian's package
(`make setup-nginx`); without it the test is skipped locally and fails under CI, like the browser.
"""
from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

import pytest
from deployment import N_HEADS, STRIP, TIMEOUT_MS, require, sentence, serve
from deployment import deployment as _deployment

from harness import GRID_DRAWN, HEADS_OFF, IDLE, REPO, grid_switch, page_problems, wait

N_PROCS = 2
MARKERS = ("harbour", "violin", "meadow")  # one sentence each; one WordPiece token each in MiniLM's vocabulary


@pytest.fixture(scope="module")
def deployment(artifacts):
    yield from _deployment(N_PROCS, artifacts / "proxy", "the proxy test")


def test_sticky_sessions_each_see_their_own_state(browser, deployment):
    contexts = [browser.new_context(viewport={"width": 1300, "height": 900}) for _ in MARKERS]
    try:
        pages = []
        for i, ctx in enumerate(contexts):
            page = ctx.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            # One after the other: each first request is the next in nginx's round-robin, so two processes are used.
            page.goto(deployment.url, wait_until="domcontentloaded")
            wait(page, f"() => ({GRID_DRAWN})() >= {N_HEADS}",
                 f"session {i}: the first heatmaps")
            pages.append(page)

        # Every session types its own sentence and switches off its own head; all actions go out before any wait.
        for i, page in enumerate(pages):
            page.get_by_label("Sentence", exact=True).fill(sentence(MARKERS[i]))
            page.get_by_role("button", name="Show attention").click()
        for i, page in enumerate(pages):
            wait(page, f"() => ({STRIP})().includes({MARKERS[i]!r})", f"session {i}: its sentence's tokens")
            wait(page, IDLE, f"session {i}: idle")
            grid_switch(page, f"L0 H{i}").click()
        for i, page in enumerate(pages):
            wait(page, f"() => ({HEADS_OFF})().includes('L0 H{i}')", f"session {i}: 'Heads off: L0 H{i}'")
            wait(page, IDLE, f"session {i}: idle after the toggle")

        for i, page in enumerate(pages):
            strip, heads_off = page.evaluate(STRIP), page.evaluate(HEADS_OFF)
            others = [m for j, m in enumerate(MARKERS) if j != i and m in strip]
            assert MARKERS[i] in strip and not others, f"session {i} shows tokens {strip!r}"
            foreign = [f"L0 H{j}" for j in range(len(MARKERS)) if j != i and f"L0 H{j}" in heads_off]
            assert f"L0 H{i}" in heads_off and not foreign, f"session {i} shows {heads_off!r}"
            assert page.locator('[data-testid="stException"]').count() == 0, page_problems(page)

        routes = [{c["name"]: c["value"] for c in ctx.cookies()}.get(serve.COOKIE) for ctx in contexts]
        assert all(r in deployment.routes for r in routes), f"cookies {routes}; routes {deployment.routes}"
        assert len(set(routes)) == N_PROCS, f"3 sessions should use both app processes; cookies {routes}"
    finally:
        for ctx in contexts:
            ctx.close()  # closes the websockets, so nginx logs them

    # Every request that carried a cookie reached the process it names, websockets included.
    by_route: dict[str, set[str]] = defaultdict(set)
    streams: dict[str, int] = defaultdict(int)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # nginx writes a websocket's line when it closes
        rows = serve.read_routes(deployment.access_log)
        if sum(r["path"].startswith("/_stcore/stream") for r in rows) >= len(MARKERS):
            break
        time.sleep(0.2)
    for row in rows:
        if row["route"]:
            by_route[row["route"]].add(row["upstream"])
            streams[row["route"]] += row["path"].startswith("/_stcore/stream") and row["status"] == "101"
    for route in set(routes):
        assert by_route[route] == {f"127.0.0.1:{deployment.routes[route]}"}, dict(by_route)
        assert streams[route] >= 1, f"no websocket logged for {route}: {dict(streams)}"


def test_ctrl_c_stops_nginx_supervisord_and_every_app_process(artifacts):
    """`make serve` then Ctrl-C: the launcher stops its children (nginx, supervisord) and theirs (the app process,
    its health listener) and removes its temp dir. The signal goes to the launcher alone here (a terminal sends it
    to the whole group), the case where it must do the stopping itself. The time it takes is printed (the
    bound is 3 s; no test asserts a wall-clock time)."""
    import re
    import signal
    import subprocess

    require("the Ctrl-C test")
    port = serve.harness.free_port()
    log = artifacts / "serve-ctrl-c.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-u", str(REPO / "deploy" / "serve.py"), "--procs", "1",
                                 "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while "mha-viz: http" not in log.read_text():
                assert proc.poll() is None, f"serve.py exited early:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"serve.py did not start in 240 s:\n{log.read_text()}"
                time.sleep(0.3)
            assert serve.harness.healthy(f"http://127.0.0.1:{port}")
            kids = serve._children(proc.pid)
            grandkids = [g for k in kids for g in serve._children(k)]
            assert len(kids) == 2, f"expected supervisord and nginx, found {kids}"
            assert len(grandkids) >= 3, f"expected an app process, its health listener and nginx's worker: {grandkids}"
            prefix = re.search(r"files in (\S+)\)", log.read_text()).group(1)

            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 0, log.read_text()
            print(f"\n[proxy] Ctrl-C: serve.py and its {len(kids + grandkids)} descendants gone after "
                  f"{time.monotonic() - t0:.1f} s")
            assert not [k for k in kids + grandkids if serve._alive(k)], f"still running: {kids + grandkids}"
            assert not os.path.exists(prefix), f"{prefix} was left behind"
            assert not serve.harness.healthy(f"http://127.0.0.1:{port}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: only what this test started
                proc.wait(timeout=30)
