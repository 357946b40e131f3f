"""Load through `make serve`'s proxy while one app process is killed and restarted (issue 23).

deploy/serve.py's Deployment (2 app processes under supervisord, nginx in front, public settings), loopback only.
20 protocol-level visitors (benchmarks/_stclient.py: the page's own websocket, no browser, so the figures measure
the server and not 20 Chromium tabs on two cores) each act in a loop: open the page with its own sentence and a
different head off (a full page run, each through nginx with the cookie its first visit got, so it stays on its
process). After BEFORE_S, one process gets `kill -9`; supervisord restarts it. Every action that fails (refused,
reset, the page not finishing) is retried up to twice, a second apart, as a browser's reconnect would.

Printed per phase (before the kill; during: until the process answers /_stcore/health again; after): actions
answered, of them how many needed a retry, actions lost (all three attempts failed), p50/p95 of answered actions,
and the load average; then the restart time. Bounded: 20 visitors, each phase at most its seconds.

    python benchmarks/bench_serve_faults.py [--sessions 20] [--before 30] [--after 30]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time

import _stclient as C
from _common import OUT, REPO, load_avg, machine, table

sys.path.insert(0, str(REPO / "deploy"))
import serve  # noqa: E402

N_HEADS = 12  # MiniLM, the default model
RETRIES = 2


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[max(0, -(-len(xs) * q // 100) - 1)]


async def visitor(i: int, url: str, stop_at: float, log: list) -> None:
    sentence = f"Visitor {i} reads the keys to the old cabinet on the table."
    cookie, n = None, 0
    while time.monotonic() < stop_at:
        n += 1
        q = C.query(text=sentence, off=f"L{n % 6}H{(i + n) % N_HEADS}")
        t0 = time.monotonic()
        for attempt in range(RETRIES + 1):
            r = await C.visit(url, q, timeout_s=60, cookie=cookie)
            if r["ok"]:
                break
            await asyncio.sleep(1)
        cookie = r.get("cookie") or cookie
        log.append({"visitor": i, "t": t0, "seconds": time.monotonic() - t0, "ok": r["ok"], "attempts": attempt + 1,
                    "error": r["error"]})
        await asyncio.sleep(0.5)  # a visitor looks at the page before the next toggle


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--before", type=float, default=30)
    ap.add_argument("--after", type=float, default=30)
    args = ap.parse_args()
    print(f"# bench_serve_faults | {machine()} | {args.sessions} protocol-level visitors, 2 app processes")
    with serve.Deployment(2, log_dir=OUT / "serve-faults") as d:
        log: list[dict] = []
        marks: dict[str, float] = {}
        loads: dict[str, str] = {"start": load_avg()}

        async def run() -> None:
            t_start = time.monotonic()
            horizon = t_start + args.before + 120 + args.after  # a hard bound, whatever happens
            tasks = [asyncio.create_task(visitor(i, d.url, horizon, log)) for i in range(args.sessions)]
            await asyncio.sleep(args.before)
            loads["kill"] = load_avg()
            victim_pid = d.pid(0)
            marks["kill"] = time.monotonic()
            os.kill(victim_pid, signal.SIGKILL)  # a process of this deployment, by its PID
            while time.monotonic() - marks["kill"] < 120:
                pid = await asyncio.to_thread(d.pid, 0)
                if pid not in (None, victim_pid) and await asyncio.to_thread(serve.harness.healthy,
                                                                            d.backends[0].url):
                    break
                await asyncio.sleep(0.25)
            marks["back"] = time.monotonic()
            loads["back"] = load_avg()
            await asyncio.sleep(args.after)
            loads["end"] = load_avg()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(run())
    phases = {"before": lambda a: a["t"] < marks["kill"],
              "during": lambda a: marks["kill"] <= a["t"] < marks["back"],
              "after": lambda a: a["t"] >= marks["back"]}
    rows = []
    for name, inside in phases.items():
        acts = [a for a in log if inside(a)]
        ok = [a["seconds"] for a in acts if a["ok"]]
        rows.append([name, len(acts), len(ok), sum(1 for a in acts if a["ok"] and a["attempts"] > 1),
                     sum(1 for a in acts if not a["ok"]), f"{percentile(ok, 50):.2f}", f"{percentile(ok, 95):.2f}"])
    print(table(["phase", "actions", "answered", "of them retried", "lost", "p50 s", "p95 s"], rows))
    print(f"process 0 killed, back (healthy, new pid) after {marks['back'] - marks['kill']:.1f} s; load avg at "
          f"start {loads['start']}, at the kill {loads['kill']}, when back {loads['back']}, at the end {loads['end']}")
    before_p50 = percentile([a["seconds"] for a in log if phases["before"](a) and a["ok"]], 50)
    after_p50 = percentile([a["seconds"] for a in log if phases["after"](a) and a["ok"]], 50)
    print(f"p50 after / before: {after_p50 / before_p50:.2f}")
    for a in [a for a in log if not a["ok"]][:5]:
        print(f"  lost: visitor {a['visitor']}: {a['error']}")


if __name__ == "__main__":
    main()
