"""Many people at once: 30 browser sessions typing and toggling against 1 app process, then against N, both behind
nginx as `make serve` runs them (deploy/serve.py). Loopback only; bounded in count and in time.

Each session (its own tab, so its own websocket and Streamlit session) opens the page, types its own sentence
with its own marker word, then switches heads of layer 0 off and on (4 toggles, a short think time between them).
A toggle is timed from the click until the page shows exactly the heads this session has switched off and Streamlit
is idle again (waits poll every POLL_MS). At the end each session must show its own marker's tokens and no other
session's, and exactly its own heads off: anything else counts as "mixed". A wait that runs past the configuration's
time budget, a Streamlit exception on the page or a JavaScript error counts as an error. Sessions start RAMP_S
apart (people do not click at the same millisecond), spread over a few Chromium processes. Tabs are grouped
PAGES_PER_CONTEXT to a browser context: a context is one visitor's cookie jar (so one nginx pin) and one HTTP and
code cache, which spares these two cores compiling Streamlit's frontend 30 times; every tab is still its own
Streamlit session, so tabs sharing a process and a cookie are the hardest case for "nothing mixed". nginx's access
log shows whether every request reached the process its cookie names.

    python benchmarks/bench_load.py                      # 30 sessions, 1 process then 2, <= 180 s each
    python benchmarks/bench_load.py --sessions 6 --procs 1,2 --budget 90
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import sys
import time
from collections import defaultdict

from _app import MARKERS, sentence
from _common import OUT, REPO, load_avg, machine, table

sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "deploy"))
import serve  # noqa: E402  (deploy/serve.py: what `make serve` runs)

import harness  # noqa: E402  (the one browser harness: Chromium path and flags, idle check)

# 30 one-token words (MiniLM's WordPiece), none inside another nor inside the sentence around it.
WORDS = MARKERS + ("bottle", "candle", "rabbit", "pencil", "tiger", "ocean", "castle", "hammer", "jacket", "ladder",
                   "mirror", "needle", "orange", "pepper", "rocket", "saddle", "tunnel", "wagon")
N_HEADS = 12  # all-MiniLM-L6-v2, the default model
POLL_MS = 100
RAMP_S = 1.0
THINK_S = (0.5, 1.5)

STRIP = "() => document.querySelector('[data-testid=\"token-strip\"]')?.innerText ?? ''"
DRAWN = f"() => ({harness.GRID_DRAWN})() >= {N_HEADS}"
# The heads this page says are off, as "L0 H3" strings; [] when it says all heads are on.
HEADS_OFF = """() => {
  const line = [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
    .map(e => e.innerText).find(t => t.startsWith('Heads off'));
  return line ? (line.match(/L\\d+ H\\d+/g) || []) : [];
}"""
SHOWS_OFF = f"""(want) => {{
  const have = ({HEADS_OFF})();
  const allOn = [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
    .some(e => e.innerText.startsWith('All heads are on'));
  return want.length ? (have.length === want.length && want.every(h => have.includes(h))) : allOn;
}}"""
PROBLEMS = "() => document.querySelectorAll('[data-testid=\"stException\"]').length"


class Budget:
    """The configuration's deadline: every wait gets what is left of it, so a run can never exceed the bound."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def ms(self) -> float:
        left = (self.end - time.monotonic()) * 1000
        if left <= 0:
            raise TimeoutError("the time budget ran out")
        return left


async def _wait(page, js: str, budget: Budget, arg=None) -> None:
    await page.wait_for_function(js, arg=arg, timeout=budget.ms(), polling=POLL_MS)


async def _toggle(page, head: int, budget: Budget) -> None:
    await harness.grid_switch(page, f"L0 H{head}").click(timeout=budget.ms())


async def session(i: int, context, url: str, budget: Budget, result: dict) -> None:
    """One visitor. Fills `result` as it goes, so a session cut off by the budget still reports what it did."""
    rng = random.Random(i)
    marker = WORDS[i]
    result.update(marker=marker, toggles=[], error=None, mixed=None)
    await asyncio.sleep(i * RAMP_S)
    page = await context.new_page()
    js_errors: list[str] = []
    page.on("pageerror", lambda exc: js_errors.append(str(exc)))
    step = "open"
    try:
        t0 = time.monotonic()
        await page.goto(url, wait_until="domcontentloaded", timeout=budget.ms())
        await _wait(page, DRAWN, budget)
        await _wait(page, harness.IDLE, budget)
        result["open_s"] = time.monotonic() - t0
        result["route"] = {c["name"]: c["value"] for c in await context.cookies()}.get(serve.COOKIE)

        step = "type"
        t0 = time.monotonic()
        await page.get_by_label("Sentence", exact=True).fill(sentence(marker), timeout=budget.ms())
        await page.get_by_role("button", name="Show attention").click(timeout=budget.ms())
        await _wait(page, f"() => ({STRIP})().includes({marker!r})", budget)
        await _wait(page, harness.IDLE, budget)
        result["type_s"] = time.monotonic() - t0

        off: set[int] = set()
        a, b, c = i % N_HEADS, (i + 4) % N_HEADS, (i + 8) % N_HEADS
        for head in (a, b, a, c):  # off, off, back on, off
            step = f"toggle L0 H{head}"
            await asyncio.sleep(rng.uniform(*THINK_S))
            off ^= {head}
            want = [f"L0 H{h}" for h in sorted(off)]
            t0 = time.monotonic()
            await _toggle(page, head, budget)
            await _wait(page, SHOWS_OFF, budget, arg=want)
            await _wait(page, harness.IDLE, budget)
            result["toggles"].append(time.monotonic() - t0)

        step = "check"
        strip, shown = await page.evaluate(STRIP), await page.evaluate(HEADS_OFF)
        foreign = [w for w in WORDS if w != marker and w in strip]
        if marker not in strip or foreign or sorted(shown) != sorted(f"L0 H{h}" for h in off):
            result["mixed"] = f"tokens {strip[:80]!r}, heads off {shown}, expected {sorted(off)} and {marker!r}"
        if await page.evaluate(PROBLEMS):
            result["error"] = "a Streamlit exception on the page"
        elif js_errors:
            result["error"] = f"JavaScript error: {js_errors[0][:200]}"
    except Exception as err:  # a timeout or a lost page: this session's error, not the benchmark's
        result["error"] = f"{step}: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
    finally:
        await page.close()


@contextlib.contextmanager
def niced(increment: int):
    """Children started inside run `increment` nicer. The browsers stand in for visitors' own machines: niced, they
    take the cores the app processes leave, instead of competing with the server being measured."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, before + increment)
    try:
        yield
    finally:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, before)
        except PermissionError:  # only root may lower it again; the rest of this script then runs nicer
            pass


async def drive(url: str, n_sessions: int, n_browsers: int, per_context: int, budget_s: float,
                nice: int, on_done=lambda: None) -> list[dict]:
    """Run the sessions; `on_done()` is called when they end, before the browsers close (their renderers' CPU
    time is only countable while the browser processes live: on exit, Chromium's zygote is re-parented to init)."""
    from playwright.async_api import async_playwright

    results = [dict() for _ in range(n_sessions)]
    with niced(nice):  # the Playwright driver starts here, and Chromium is its child
        pw_manager = async_playwright()
        pw = await pw_manager.__aenter__()
    try:
        browsers = [await pw.chromium.launch(executable_path=harness.CHROMIUM, headless=True,
                                             args=harness.CHROMIUM_ARGS) for _ in range(n_browsers)]
        n_contexts = math.ceil(n_sessions / per_context)
        contexts = [await browsers[c % n_browsers].new_context(viewport={"width": 1300, "height": 900})
                    for c in range(n_contexts)]
        try:
            budget = Budget(budget_s)
            # Session i is in context i % n_contexts, so the first tabs to open are in different contexts (cookies).
            await asyncio.gather(*(session(i, contexts[i % n_contexts], url, budget, results[i])
                                   for i in range(n_sessions)))
            on_done()
        finally:
            for b in browsers:
                await b.close()
    finally:
        await pw_manager.__aexit__(None, None, None)
    return results


async def warm(urls: list[str]) -> None:
    """One page per app process, straight to its port (not through nginx, so the round-robin is untouched): the
    model loads before the timed sessions arrive, as it would after the first visitor of a demo."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=harness.CHROMIUM, headless=True,
                                           args=harness.CHROMIUM_ARGS)
        try:
            async def one(url):
                page = await browser.new_page()
                await page.goto(url, wait_until="domcontentloaded", timeout=240_000)
                await page.wait_for_function(DRAWN, timeout=240_000, polling=250)
                await page.close()

            await asyncio.gather(*(one(u) for u in urls))
        finally:
            await browser.close()


_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, list[str]] | None:
    """(parent pid, fields after the command name) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used since boot (all cores; /proc/stat minus idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / _TICK


def cpu_seconds(roots: list[int], exclude: set[int] = frozenset()) -> float:
    """CPU time of `roots` and every live descendant (not under `exclude`), plus their reaped children's: user +
    system, from /proc. Only this script's own processes are counted, never another user's on the machine."""
    table_ = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st:
                table_[int(entry)] = st
    children = defaultdict(list)
    for pid, (ppid, _) in table_.items():
        children[ppid].append(pid)
    total, todo = 0.0, [r for r in roots if r in table_]
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        f = table_[pid][1]
        total += sum(int(x) for x in f[11:15]) / _TICK  # utime, stime, cutime, cstime
        todo += children[pid]
    return total


def percentile(xs: list[float], q: float) -> float:
    """Nearest-rank percentile; nan for no samples."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[max(0, math.ceil(q / 100 * len(xs)) - 1)]


def misrouted(d: serve.Deployment) -> tuple[int, int]:
    """(requests that carried a cookie, of them how many reached another process than the cookie names)."""
    rows = [r for r in serve.read_routes(d.access_log) if r["route"] in d.routes]
    wrong = [r for r in rows if r["upstream"] != f"127.0.0.1:{d.routes[r['route']]}"]
    return len(rows), len(wrong)


def run_config(procs: int, args) -> dict:
    print(f"\n== {procs} app process(es) behind nginx; load avg {load_avg()}", flush=True)
    with serve.Deployment(procs, log_dir=OUT / f"load-{procs}") as d:
        asyncio.run(warm([b.url for b in d.backends]))
        load_before = load_avg()
        apps = [d.pid(b.index) for b in d.backends]
        ours = set(apps) | {d.nginx.pid, d.supervisord.pid}
        cpu0 = (cpu_seconds(apps), cpu_seconds([os.getpid()], exclude=ours), machine_busy_seconds())
        cpu1 = []
        t0 = time.monotonic()
        results = asyncio.run(drive(d.url, args.sessions, args.browsers, args.per_context, args.budget,
                                    args.nice_browsers, on_done=lambda: cpu1.extend(
                                        (cpu_seconds(apps), cpu_seconds([os.getpid()], exclude=ours),
                                         machine_busy_seconds()))))
        wall = time.monotonic() - t0
        # Who had the cores during the run: the app processes, the browsers (with this script), the whole machine.
        app_cpu, client_cpu, machine_cpu = (b - a for a, b in zip(cpu0, cpu1))
        load_after = load_avg()
        time.sleep(1)  # nginx logs a websocket when it closes
        with_cookie, wrong = misrouted(d)
    toggles = [t for r in results for t in r.get("toggles", [])]
    per_route = defaultdict(int)
    for r in results:
        per_route[r.get("route") or "-"] += 1
    summary = {
        "procs": procs, "sessions": args.sessions, "browsers": args.browsers, "budget_s": args.budget,
        "wall_s": wall, "load_before": load_before, "load_after": load_after,
        "finished": sum(1 for r in results if len(r.get("toggles", [])) == 4 and not r.get("error")),
        "errors": [r["error"] for r in results if r.get("error")],
        "mixed": [r["mixed"] for r in results if r.get("mixed")],
        "toggles": toggles, "open_s": [r["open_s"] for r in results if "open_s" in r],
        "type_s": [r["type_s"] for r in results if "type_s" in r],
        "sessions_per_process": dict(per_route), "requests_with_cookie": with_cookie, "misrouted": wrong,
        "app_cpu_s": app_cpu, "client_cpu_s": client_cpu, "machine_cpu_s": machine_cpu,
    }
    # Every step that reached the server and finished: opens, sentences, toggles.
    summary["steps"] = len(summary["open_s"]) + len(summary["type_s"]) + len(toggles)
    for err in summary["errors"][:5]:
        print(f"   error: {err}")
    for mix in summary["mixed"][:5]:
        print(f"   MIXED: {mix}")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--procs", default="1,2", help="app process counts to compare, e.g. 1,2")
    parser.add_argument("--browsers", type=int, default=3, help="Chromium processes the sessions are spread over")
    parser.add_argument("--budget", type=float, default=180, help="seconds per configuration, a hard bound")
    parser.add_argument("--per-context", type=int, default=5, help="tabs (sessions) per browser context")
    parser.add_argument("--nice-browsers", type=int, default=5,
                        help="run Chromium this much nicer than the app processes (0: compete as equals)")
    args = parser.parse_args()
    if args.sessions > len(WORDS):
        sys.exit(f"--sessions {args.sessions}: at most {len(WORDS)} (one marker word per session)")
    why = harness.chromium_missing() or serve.nginx_missing()
    if why:
        sys.exit(f"bench_load: {why}")
    print(machine())
    runs = [run_config(int(p), args) for p in args.procs.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "load.json").write_text(json.dumps(runs, indent=1))

    base = percentile(runs[0]["toggles"], 50)
    rows = []
    for r in runs:
        p50, p95 = percentile(r["toggles"], 50), percentile(r["toggles"], 95)
        rows.append([r["procs"], f"{r['finished']}/{r['sessions']}", len(r["toggles"]), f"{p50:.2f}", f"{p95:.2f}",
                     f"{base / p50:.2f}x" if p50 == p50 and base == base else "-",
                     f"{percentile(r['type_s'], 50):.2f} / {percentile(r['type_s'], 95):.2f}",
                     f"{percentile(r['open_s'], 50):.1f} / {percentile(r['open_s'], 95):.1f}",
                     len(r["errors"]), len(r["mixed"]), f"{r['misrouted']}/{r['requests_with_cookie']}",
                     ", ".join(f"{k}:{v}" for k, v in sorted(r["sessions_per_process"].items())),
                     f"{r['app_cpu_s']:.0f} / {r['client_cpu_s']:.0f} / {r['machine_cpu_s']:.0f}",
                     f"{1000 * r['app_cpu_s'] / r['steps']:.0f}" if r["steps"] else "-",
                     f"{r['wall_s']:.0f}", f"{r['load_before']} -> {r['load_after']}"])
    print()
    print(f"{args.sessions} sessions (tabs) in {math.ceil(args.sessions / args.per_context)} browser contexts over "
          f"{args.browsers} Chromium processes, sessions {RAMP_S} s apart, 4 toggles each "
          f"with {THINK_S[0]}-{THINK_S[1]} s think time, waits polled every {POLL_MS} ms, budget {args.budget:.0f} s "
          f"per configuration; MiniLM, layer 0; Chromium niced by {args.nice_browsers}.")
    pooled = defaultdict(list)
    for r in runs:
        pooled[r["procs"]].append(r)
    if any(len(v) > 1 for v in pooled.values()):  # e.g. --procs 1,2,2,1: drift of the machine's load cancels out
        first = percentile([t for r in pooled[runs[0]["procs"]] for t in r["toggles"]], 50)
        prow = []
        for procs, rs in pooled.items():
            ts = [t for r in rs for t in r["toggles"]]
            p50 = percentile(ts, 50)
            prow.append([procs, len(rs), f"{sum(r['finished'] for r in rs)}/{sum(r['sessions'] for r in rs)}", len(ts),
                         f"{p50:.2f}", f"{percentile(ts, 95):.2f}", f"{first / p50:.2f}x" if p50 == p50 else "-",
                         sum(len(r["errors"]) for r in rs), sum(len(r["mixed"]) for r in rs),
                         sum(r["misrouted"] for r in rs)])
        print("\nPooled over the runs of each configuration:")
        print(table(["app procs", "runs", "sessions done", "toggles", "toggle p50 s", "toggle p95 s",
                     f"p50 speed-up vs {runs[0]['procs']} proc", "errors", "mixed", "misrouted"], prow))
        print()
    print(table(["app procs", "sessions done", "toggles", "toggle p50 s", "toggle p95 s", "p50 speed-up vs 1st",
                 "type p50/p95 s", "open p50/p95 s", "errors", "mixed", "misrouted/with cookie",
                 "sessions per process", "CPU s apps / browsers / machine", "app CPU ms per step", "wall s",
                 "load avg before -> after"], rows))


if __name__ == "__main__":
    main()
