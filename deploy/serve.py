"""Serve mha-viz to many people at once: N app processes behind nginx with sticky sessions, kept alive by supervisord
(`make serve N=3`).

Why N processes: one Streamlit process runs every session's model forward in one Python interpreter, so 30
visitors toggling at once queue behind each other; N processes share the cores. Why sticky: a Streamlit session
lives in the process its websocket reached (its state, its reconnects, its media files), so every request of one
browser must reach the same process. nginx (Debian's package) pins a browser with a cookie: the first request
goes round-robin, the response sets `mhaviz_backend=bK` for the process that answered, and later requests carrying
it go straight there. Pinning by client address (`ip_hash`) would send a whole classroom behind one NAT, or every
session of a loopback load test, to one process.

Why supervisord (PyPI `supervisor`) and superlance's `httpok`: one fault must not end the class. supervisord
restarts an app process that exits (a crash, an out-of-memory kill, `kill -9`) on the same port, and one `httpok`
listener per process asks its `/_stcore/health` every 5 s and has supervisord restart a process that does not
answer within HEALTH_TIMEOUT_S (hung, or stopped with SIGSTOP). nginx keeps running through a restart: the port
stays, so its config stays valid. While a process is down, nginx's passive checks (`max_fails`/`fail_timeout`)
take it out of the round-robin and `proxy_next_upstream` retries a request that could not reach it on another
process; a browser pinned to it is served by another process meanwhile (its `backup`), whose answer re-pins it.
The browser's own reconnect then rebuilds its session there from the page's link (model, layer, heads off, view,
the Lesson's step) and the sentence the browser resends from its box (the last one sent, even one sent as the
process died: mha_viz/app/reconnect.py), and the page says it was rebuilt. Sessions on the other processes never
notice.

Everything runs as children of this script, as an ordinary user, with every file in one temp dir: supervisord
in the foreground (it starts the app processes and the health listeners) and nginx in the foreground. Before
anything starts, the settings the app processes will get are checked (mha_viz/settings.py): a bad value stops
here, with the variable, its value and an example, and exit code 1. Ctrl-C (or SIGTERM) stops nginx and
supervisord (which stops the apps) within a few seconds and removes the temp dir. If nginx or supervisord itself
dies, or a process cannot start at all, everything stops and the script says which, with its log's tail.

    python deploy/serve.py --procs 3 --port 8080                 # loopback only
    python deploy/serve.py --procs 3 --port 8080 --host 0.0.0.0  # the classroom's network

Public-server settings are applied unless the environment sets them already: custom models off
(MHA_VIZ_ALLOW_CUSTOM=0), runs of at most 256 tokens (MHA_VIZ_MAX_TOKENS), 1536 MB per process for runs kept and
in the making (MHA_VIZ_RUN_CACHE_MB) and Streamlit's viewer toolbar.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xmlrpc.client
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "deploy"))
import launch as harness  # noqa: E402  (free ports, health checks, log tails: shared with the tests)

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
COOKIE = "mhaviz_backend"
# A process that failed one request is left out of the round-robin this long (nginx's fail_timeout); tests that
# fault a process wait it out before they expect new sessions spread over every process again.
FAIL_TIMEOUT_S = 5
# What a public demo needs unless the operator says otherwise: nobody's link or sidebar makes the server download
# or load a model of their choosing, runs stay short enough that a classroom's long texts do not exhaust a
# process's memory (SmolLM2 at 256 tokens holds 71 MB of attention per run, at 512 tokens 283 MB) and wait their
# turn within a budget, and visitors get no developer menu (rerun, clear cache, settings).
PUBLIC_ENV = {
    "MHA_VIZ_ALLOW_CUSTOM": "0",
    "MHA_VIZ_MAX_TOKENS": "256",
    # Runs kept and work in flight together (a page counts 4 x its run's attention): with the model and Python, a
    # process stays near 3 GB (benchmarks/bench_serve_memory.py).
    "MHA_VIZ_RUN_CACHE_MB": "1536",
    "STREAMLIT_CLIENT_TOOLBAR_MODE": "viewer",
}
# Every app process, public or not: glibc gives each thread that allocates its own malloc arena, and Streamlit
# runs each session in its own thread, so freed run tensors stayed resident per arena (RSS stayed at 3.9 GB after
# four SmolLM2 sessions closed). Two arenas let memory go back (benchmarks/bench_serve_memory.py measures it).
PROCESS_ENV = {"MALLOC_ARENA_MAX": "2", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
HEALTH_EVERY_S = 5  # supervisord's TICK_5: how often httpok asks each process
HEALTH_TIMEOUT_S = 10  # a process that does not answer /_stcore/health within this is restarted
START_S = 20  # a restarted process counts as started (and is health-checked) after this long
STOP_WAIT_S = 1  # SIGTERM, then SIGKILL after this long (a stopped process never handles SIGTERM)
GROUP = "apps"  # supervisord stops the processes of one group together (separate programs one after another)
START_RETRIES = 3  # a process that exits within START_S this many times in a row is given up (FATAL)
# One access-log line per request: which cookie it carried and which app process answered (tests read it).
LOG_FORMAT = '$msec "$request" $status route=$cookie_mhaviz_backend upstream=$upstream_addr'
_LOG_LINE = re.compile(r'^\S+ "(?P<method>\S+) (?P<path>\S+)[^"]*" (?P<status>\d+) '
                       r'route=(?P<route>\S*) upstream=(?P<upstream>.*)$')


class DeployError(RuntimeError):
    """The deployment could not start or lost a process; the message says which and how to fix it."""


def app_env(public: bool, environ, extra: dict | None = None) -> dict:
    """Environment the app processes get on top of this one: the public defaults, except where the operator's
    environment sets a variable itself, then `extra` (the caller's own choices) over both."""
    env = {k: environ.get(k, v) for k, v in PUBLIC_ENV.items()} if public else {}
    return {**env, **(extra or {})}


def check_settings(env) -> list[str]:
    """The app's own settings check (mha_viz/settings.py) on the environment the app processes will get: raises
    DeployError naming every bad variable, its value and an example; returns the warnings."""
    import importlib.util

    # The file alone, not the package: importing mha_viz would import torch first, seconds before any message.
    spec = importlib.util.spec_from_file_location("mha_viz_settings_check", REPO / "mha_viz" / "settings.py")
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    try:
        return list(module.Settings.from_env(env).warnings)
    except module.SettingsError as err:
        lines = "\n".join(f"  - {p}" for p in err.problems)
        raise DeployError(f"the app processes' settings are wrong; nothing was started:\n{lines}") from None


def nginx_missing() -> str | None:
    if not os.path.exists(NGINX):
        return "nginx is not installed (run `make setup-nginx`, or `apt-get install -y nginx` on Debian)"
    return None


def supervisor_missing() -> str | None:
    try:
        import superlance.httpok  # noqa: F401
        import supervisor.supervisord  # noqa: F401
    except ImportError as err:
        return f"supervisord or superlance is not installed ({err}); run `make setup` (requirements.txt has both)"
    return None


def nginx_config(ports: list[int], listen: str, prefix: Path) -> str:
    """nginx.conf for the app processes on 127.0.0.1:`ports`, listening on `listen` ("host:port"), with every file
    (pid, logs, temp dirs) under `prefix`, so it runs without root and next to a system nginx."""
    def server(p: int, backup: bool = False) -> str:
        # One failed attempt marks a process down for FAIL_TIMEOUT_S: a dead one is skipped at once, a restarted one
        # is tried again soon after. Loopback connects in microseconds, so 2 s is a refused or stalled connect.
        checked = f" max_fails=1 fail_timeout={FAIL_TIMEOUT_S}s"
        return f"        server 127.0.0.1:{p}{' backup' if backup else checked};"

    servers = "\n".join(server(p) for p in ports)
    pinned = "\n".join(f"        b{i} mhaviz_b{i};" for i in range(len(ports)))
    # A pinned browser goes to its own process; while that one is down, to the others (nginx's `backup`), whose
    # answer re-pins it there.
    own = "\n".join(f"    upstream mhaviz_b{i} {{\n{server(p)}\n" + "\n".join(server(q, True) for q in ports if q != p)
                    + "\n    }" for i, p in enumerate(ports))
    # The last address nginx tried is the one that answered ("127.0.0.1:8601, 127.0.0.1:8602" after a retry).
    routes = "\n".join(f"        ~(^|\\s)127\\.0\\.0\\.1:{p}$ b{i};" for i, p in enumerate(ports))
    temp = "\n".join(f"    {kind}_temp_path {prefix / kind};" for kind in ("client_body", "proxy", "fastcgi",
                                                                          "uwsgi", "scgi"))
    common = f"""            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;              # Streamlit checks the websocket's Origin against it
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_connect_timeout 2s;
            # A request that could not reach a process (refused, reset, timed out, a 502/503 from one shutting
            # down) is tried on the next one, at most twice, so a fault never becomes a storm; an open websocket
            # is never retried (its browser reconnects by itself).
            proxy_next_upstream error timeout http_502 http_503;
            proxy_next_upstream_tries 2;
            proxy_buffering off;                           # each rerun's messages reach the browser as sent
            add_header Set-Cookie "{COOKIE}=$mhaviz_route; Path=/; HttpOnly; SameSite=Lax" always;"""
    return f"""# Generated by deploy/serve.py; regenerated on every start.
worker_processes 1;  # one worker: it only relays bytes, and round-robin then alternates strictly
# Stopping waits at most this long for open websockets (an idle session's stays open for a day): Ctrl-C is quick.
worker_shutdown_timeout 1s;
pid {prefix / 'nginx.pid'};
error_log {prefix / 'error.log'} warn;
events {{ worker_connections 4096; }}
http {{
    log_format mhaviz '{LOG_FORMAT}';
    access_log {prefix / 'access.log'} mhaviz;
{temp}
    client_max_body_size 1m;  # the app takes no uploads
    # A browser without the cookie (or with one naming no process) goes round-robin ...
    upstream mhaviz_any {{
{servers}
    }}
{own}
    # ... and one with it goes to its own process. Only these names are accepted: a cookie never picks an address.
    map $cookie_{COOKIE} $mhaviz_target {{
        default mhaviz_any;
{pinned}
    }}
    # The cookie names the process that answered this request.
    map $upstream_addr $mhaviz_route {{
        default "";
{routes}
    }}
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        ''      close;
    }}
    server {{
        listen {listen};
        # Streamlit's session: a websocket that stays open while the page is (an idle one for a day).
        location = /_stcore/stream {{
            proxy_pass http://$mhaviz_target;
{common}
            proxy_read_timeout 1d;
            proxy_send_timeout 1d;
        }}
        # Everything else is a short request (the page, its scripts, health, media): one that a process does not
        # answer within 10 s (hung, or stopped with SIGSTOP) is retried on the next process.
        location / {{
            proxy_pass http://$mhaviz_target;
{common}
            proxy_read_timeout 10s;
        }}
    }}
}}
"""


def supervisord_config(workers: list["Worker"], prefix: Path, python: str = sys.executable) -> str:
    """supervisord.conf: one program per app process (restarted when it exits) and one httpok listener per process
    (restarts it when /_stcore/health does not answer in time). Everything under `prefix`; its socket is the
    only way in (mode 0700, this user)."""
    def q(s) -> str:  # supervisord expands %(name)s in values
        return str(s).replace("%", "%%")

    sections = [f"""; Generated by deploy/serve.py; regenerated on every start.
[unix_http_server]
file={q(prefix / 'supervisor.sock')}
chmod=0700

[supervisord]
nodaemon=true
logfile={q(prefix / 'supervisord.log')}
logfile_backups=0
pidfile={q(prefix / 'supervisord.pid')}
childlogdir={q(prefix)}
directory={q(REPO)}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{q(prefix / 'supervisor.sock')}
"""]
    sections.append(f"[group:{GROUP}]\nprograms={','.join(w.name for w in workers)}\npriority=999\n")
    for w in workers:
        app = [python, str(REPO / "app.py"), "--server.port", str(w.port), "--server.address", "127.0.0.1",
               "--server.headless", "true", "--browser.gatherUsageStats", "false",
               "--server.fileWatcherType", "none"]
        # -p by name, not group:name: httpok's "is it RUNNING" test (-E: check only then, never while starting)
        # compares bare names.
        check = [python, "-u", "-m", "superlance.httpok", "-p", w.name, "-E", "-t", str(HEALTH_TIMEOUT_S),
                 f"{w.url}/_stcore/health"]
        sections.append(f"""[program:{w.name}]
command={q(' '.join(app))}
directory={q(REPO)}
autostart=true
autorestart=true
startsecs={START_S}
startretries={START_RETRIES}
stopsignal=TERM
stopwaitsecs={STOP_WAIT_S}
stopasgroup=true
killasgroup=true
stdout_logfile={q(w.log_path)}
stdout_logfile_maxbytes=50MB
stdout_logfile_backups=1
redirect_stderr=true

[eventlistener:{w.name}_health]
command={q(' '.join(check))}
events=TICK_{HEALTH_EVERY_S}
autorestart=true
priority=1000
stderr_logfile={q(w.health_log)}
stderr_logfile_maxbytes=5MB
stderr_logfile_backups=0
""")
    return "\n".join(sections)


def read_routes(access_log: Path) -> list[dict]:
    """The access log as dicts: method, path, status, route (the cookie the request carried), upstream (the last
    address nginx tried: the one that answered)."""
    rows = []
    for line in access_log.read_text(errors="replace").splitlines():
        match = _LOG_LINE.match(line.strip())
        if match:
            row = match.groupdict()
            row["route"] = "" if row["route"] == "-" else row["route"]  # nginx writes "-" for no cookie
            row["tried"] = [u.strip() for u in row["upstream"].split(",")]
            row["upstream"] = row["tried"][-1]
            rows.append(row)
    return rows


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when this script dies, even by SIGKILL, so nothing outlives it."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _children(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc (Linux)."""
    kids = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            kids += [int(k) for k in open(f"/proc/{pid}/task/{task}/children").read().split()]
        except OSError:
            pass
    return kids


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1].split()  # [state, ppid, ...]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def _signal_child(pid: int, parent: int, sig: int) -> None:
    """`sig` to `pid` only while it is still `parent`'s child (never to a reused PID)."""
    stat = _stat(pid)
    if stat is not None and stat[0] != "Z" and int(stat[1]) == parent:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


@dataclass
class Worker:
    """One app process as supervisord runs it: its program name, its fixed port (kept across restarts, so nginx's
    config stays valid) and its log."""
    index: int
    port: int
    log_path: Path
    health_log: Path

    @property
    def name(self) -> str:
        return f"app{self.index}"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Deployment:
    """N app processes under supervisord and nginx in front, all children of this process. Use as a context
    manager, or `stop()`.

    `url` is nginx's address; `backends` the app processes (Worker, each with .url, .port, .name); `pid(i)` the
    current PID of process i (it changes when supervisord restarts it); `routes` the cookie value that pins a
    browser to each (e.g. {"b0": port}); `access_log` nginx's log of which process answered each request
    (`read_routes`).
    """

    def __init__(self, procs: int, port: int | None = None, host: str = "127.0.0.1", public: bool = True,
                 extra_env: dict | None = None, log_dir: Path | None = None, timeout_s: float = 240):
        self.env = app_env(public, os.environ, extra_env)
        self.warnings = check_settings({**os.environ, **self.env})  # before anything starts
        why = nginx_missing() or supervisor_missing()
        if why:
            raise DeployError(why)
        if procs < 1:
            raise DeployError(f"--procs {procs}: at least one app process is needed")
        self.prefix = Path(tempfile.mkdtemp(prefix="mha-viz-serve-"))
        # nginx started by root runs its worker as `nobody`, which must reach the temp dirs under the prefix.
        self.prefix.chmod(0o755)
        self.log_dir = Path(log_dir) if log_dir else self.prefix
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.backends = [Worker(i, harness.free_port(), self.log_dir / f"app-{i}.log",
                                self.log_dir / f"health-{i}.log") for i in range(procs)]
        self.routes = {f"b{w.index}": w.port for w in self.backends}  # cookie value -> app port
        self.nginx: subprocess.Popen | None = None
        self.supervisord: subprocess.Popen | None = None
        self._outs: list = []
        self.port = port or harness.free_port()
        self.host = host
        connect = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else host
        self.url = f"http://{connect}:{self.port}"
        self.access_log = self.prefix / "access.log"
        try:
            self._start_supervisord(timeout_s)
            self._start_nginx(timeout_s)
        except BaseException:
            self.stop()
            raise

    # -- supervisord and its app processes ------------------------------------------------------------------------
    def _start_supervisord(self, timeout_s: float) -> None:
        """All app processes at once: each cold start is mostly imports and a model load, and they overlap."""
        conf = self.prefix / "supervisord.conf"
        conf.write_text(supervisord_config(self.backends, self.prefix))
        out = open(self.prefix / "supervisord.out", "w")
        self._outs.append(out)
        env = {**os.environ, **PROCESS_ENV, **self.env}
        self.supervisord = subprocess.Popen(
            [sys.executable, "-m", "supervisor.supervisord", "-n", "-c", str(conf)], cwd=REPO, env=env,
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        t0 = time.monotonic()
        waiting = list(self.backends)
        while waiting:
            if self.supervisord.poll() is not None:
                raise DeployError(f"supervisord exited with code {self.supervisord.returncode}:\n"
                                  f"{harness.tail(self.prefix / 'supervisord.out')}")
            for w in list(waiting):
                state = self.state(w.index)
                if state in ("FATAL", "BACKOFF", "EXITED"):
                    raise DeployError(f"app process {w.index} ({w.url}) could not start (supervisord: {state}). "
                                      f"Log tail ({w.log_path}):\n{harness.tail(w.log_path)}")
                if harness.healthy(w.url):
                    waiting.remove(w)
            if waiting and time.monotonic() - t0 > timeout_s:
                names = ", ".join(f"{w.index} ({w.url})" for w in waiting)
                raise DeployError(f"app process(es) {names} did not answer /_stcore/health within {timeout_s:.0f} s. "
                                  f"Log tail ({waiting[0].log_path}):\n{harness.tail(waiting[0].log_path)}")
            time.sleep(0.2)

    def rpc(self):
        """supervisord's XML-RPC interface over its socket (what supervisorctl uses)."""
        from supervisor.xmlrpc import SupervisorTransport

        transport = SupervisorTransport(None, None, f"unix://{self.prefix / 'supervisor.sock'}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def info(self) -> dict[str, dict]:
        """supervisord's view of every app process: name -> {state, pid, description, ...}; {} when unreachable."""
        try:
            return {p["name"]: p for p in self.rpc().supervisor.getAllProcessInfo() if p["group"] == GROUP}
        except (OSError, xmlrpc.client.Error):
            return {}

    def _supervisor_state(self) -> str | None:
        try:
            return self.rpc().supervisor.getState()["statename"]
        except (OSError, xmlrpc.client.Error):
            return None

    def state(self, i: int) -> str | None:
        return self.info().get(f"app{i}", {}).get("statename")

    def pid(self, i: int) -> int | None:
        """The current PID of app process `i` (0 or None while it is not running)."""
        return self.info().get(f"app{i}", {}).get("pid") or None

    def healthy(self) -> list[bool]:
        return [harness.healthy(w.url) for w in self.backends]

    # -- nginx ---------------------------------------------------------------------------------------------------
    def _start_nginx(self, timeout_s: float) -> None:
        conf = self.prefix / "nginx.conf"
        bare = self.host.strip("[]")
        listen = f"[{bare}]:{self.port}" if ":" in bare else f"{self.host}:{self.port}"
        conf.write_text(nginx_config([w.port for w in self.backends], listen, self.prefix))
        check = subprocess.run([NGINX, "-t", "-q", "-e", "stderr", "-p", str(self.prefix), "-c", str(conf)],
                               capture_output=True, text=True)
        if check.returncode != 0:
            raise DeployError(f"nginx rejected the generated config {conf}:\n{check.stderr.strip()}")
        out = open(self.prefix / "nginx.out", "w")
        self._outs.append(out)
        self.nginx = subprocess.Popen(
            [NGINX, "-e", "stderr", "-p", str(self.prefix), "-c", str(conf), "-g", "daemon off;"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        t0 = time.monotonic()
        while not harness.healthy(self.url):
            if self.nginx.poll() is not None:
                raise DeployError(f"nginx exited with code {self.nginx.returncode} (is port {self.port} taken? "
                                  f"pick another with --port):\n{harness.tail(self.prefix / 'nginx.out')}")
            if time.monotonic() - t0 > timeout_s:
                raise DeployError(f"nginx did not answer {self.url}/_stcore/health within {timeout_s:.0f} s")
            time.sleep(0.1)

    def dead(self) -> str | None:
        """What cannot recover by itself, if anything: nginx or supervisord exited, or an app process that
        supervisord gave up on (it exited START_RETRIES times in a row before counting as started)."""
        if self.nginx is not None and self.nginx.poll() is not None:
            return f"nginx exited with code {self.nginx.returncode}:\n{harness.tail(self.prefix / 'nginx.out')}"
        if self.supervisord is not None and self.supervisord.poll() is not None:
            return (f"supervisord exited with code {self.supervisord.returncode}:\n"
                    f"{harness.tail(self.prefix / 'supervisord.out')}")
        for name, p in self.info().items():
            if p["statename"] == "FATAL":
                w = self.backends[int(name[3:])]
                return (f"app process {w.index} ({w.url}) exited {START_RETRIES} times in a row while starting; "
                        f"supervisord gave up on it. Log tail ({w.log_path}):\n{harness.tail(w.log_path)}")
        return None

    def children(self) -> list[int]:
        """PIDs of supervisord's children (app processes and health listeners), from /proc."""
        if self.supervisord is None:
            return []
        return _children(self.supervisord.pid)

    def stop(self, keep_files: bool = False) -> None:
        """Everything within about STOP_WAIT_S + 1 s, each process by its own PID: nginx gracefully (it waits at
        most worker_shutdown_timeout, 1 s, for open websockets), supervisord told to exit (so it restarts nothing),
        and its children signalled here at once rather than one program after another as supervisord would:
        SIGCONT (a process stopped with SIGSTOP then handles the rest), SIGTERM, and SIGKILL for any still there
        after STOP_WAIT_S."""
        kids = self.children()
        if self.nginx is not None and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)
        if self.supervisord is not None and self.supervisord.poll() is None:
            self.supervisord.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 0.5  # it takes the signal first, so no exit below looks like a crash
            while time.monotonic() < deadline and self._supervisor_state() == "RUNNING":
                time.sleep(0.02)
        for sig in (signal.SIGCONT, signal.SIGTERM):
            for pid in kids:
                _signal_child(pid, self.supervisord.pid, sig)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline and any(_alive(pid) for pid in kids):
            time.sleep(0.05)
        for pid in set(kids) | set(self.children()):  # and any it started meanwhile
            _signal_child(pid, self.supervisord.pid, signal.SIGKILL)
        for proc in (self.nginx, self.supervisord):
            if proc is None:
                continue
            try:
                proc.wait(timeout=STOP_WAIT_S + 3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for out in self._outs:
            out.close()
        self._outs = []
        if not keep_files:
            shutil.rmtree(self.prefix, ignore_errors=True)

    def __enter__(self) -> "Deployment":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class Watch:
    """What an operator needs to hear while serving: a process went down (how), came back (after how long), or
    stopped answering. One line each, from supervisord's view and each process's /_stcore/health."""

    def __init__(self, d: Deployment):
        self.d = d
        self.pids = {w.index: d.pid(w.index) for w in d.backends}  # the PID each process had when last healthy
        self.down_since: dict[int, float] = {}

    def poll(self) -> list[str]:
        lines = []
        info, health = self.d.info(), self.d.healthy()
        for w in self.d.backends:
            p = info.get(w.name, {})
            pid, ok, was = p.get("pid") or None, health[w.index], self.pids[w.index]
            if w.index not in self.down_since and (pid != was or not ok):
                self.down_since[w.index] = time.monotonic()
                why = ("exited; supervisord restarts it" if pid != was else
                       f"does not answer /_stcore/health; restarted if still silent after {HEALTH_TIMEOUT_S} s")
                others = (" Its visitors are served by the other processes meanwhile." if len(self.d.backends) > 1
                          else " Visitors get an error page until it is back.")
                lines.append(f"app process {w.index} ({w.url}) is down: it {why}.{others}")
            elif w.index in self.down_since and ok and pid:
                took = time.monotonic() - self.down_since.pop(w.index)
                how = f"restarted as pid {pid}" if pid != was else f"answering again, pid {pid}"
                lines.append(f"app process {w.index} ({w.url}) is back ({how}) after {took:.0f} s.")
                self.pids[w.index] = pid
        return lines


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    # prog: how the usage names this command (`mha-viz serve` passes its own name); by default, this file's
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=2, help="app processes (about one per core)")
    parser.add_argument("--port", type=int, default=8501, help="the port visitors open")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address nginx listens on: 127.0.0.1 (this machine only) or 0.0.0.0 (the network)")
    parser.add_argument("--private", action="store_true",
                        help="do not apply the public-server defaults (custom models stay as the environment says)")
    args = parser.parse_args(argv)

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)  # also when started in the background, where SIGINT comes ignored
    print(f"Checking settings, then starting {args.procs} app process(es) under supervisord, and nginx ...",
          flush=True)
    try:
        deployment = Deployment(args.procs, args.port, args.host, public=not args.private)
    except DeployError as err:
        print(f"serve: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    try:
        for warning in deployment.warnings:
            print(f"serve: warning: {warning}", file=sys.stderr, flush=True)
        pids = ", ".join(f"{w.url} (pid {deployment.pid(w.index)})" for w in deployment.backends)
        procs = f"{args.procs} app process{'es' if args.procs != 1 else ''}"
        print(f"mha-viz: {deployment.url}  ({procs}: {pids}; all healthy; files in {deployment.prefix})", flush=True)
        shown = {**{k: v for k, v in os.environ.items() if k.startswith("MHA_VIZ_")}, **deployment.env}
        print("Settings: " + ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) + ". A process that exits "
              f"is restarted; one that does not answer /_stcore/health within {HEALTH_TIMEOUT_S} s too. "
              "Ctrl-C stops.", flush=True)
        watch = Watch(deployment)
        while True:
            problem = deployment.dead()
            if problem:
                print(f"serve: {problem}\nStopping everything.", file=sys.stderr)
                return 1
            for line in watch.poll():
                print(f"serve: {line}", flush=True)
            time.sleep(1)
    except KeyboardInterrupt:
        print("\nStopping nginx and the app processes ...", flush=True)
        return 0
    finally:
        deployment.stop()


if __name__ == "__main__":
    sys.exit(main())
