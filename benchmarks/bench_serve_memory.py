"""Memory of one app process serving four SmolLM2 sessions at once, each a 512-token text (issue 23).

Each configuration gets a fresh app process (deploy/launch.py, as `make run` and `make serve` start it), with
MHA_VIZ_MAX_TOKENS=512. It opens SmolLM2 once (the model loads; its idle size is measured), then four
protocol-level visitors (benchmarks/_stclient.py: the page's own websocket, no browser) open the page at once,
each with its own long text in the link. Printed per configuration: the process's peak resident set (VmHWM),
its resident set after the four have finished (kept runs included), the runs that waited or were refused, and the
load average; then the ratio of peaks.

- before: runs in flight unbounded (MHA_VIZ_RUN_CACHE_MB=1000000, as when the budget covered kept runs only) and
  glibc's default malloc arenas (one per thread that allocates, so up to 8 x cores);
- after: `make serve`'s app processes: its budget (MHA_VIZ_RUN_CACHE_MB=1536) for kept runs and work in flight
  together (a page's work counts 4 x its run's attention, so here one 512-token page at a time: the others
  wait, with the "Queued" notice), and MALLOC_ARENA_MAX=2 (deploy/serve.py PROCESS_ENV). The token limit stays
  at 512 here, the issue's case; `make serve` itself defaults to 256.

    python benchmarks/bench_serve_memory.py [--sessions 4] [--tokens 512]
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time

import _stclient as C
from _common import OUT, REPO, WORDS, load_avg, machine, table

sys.path.insert(0, str(REPO / "deploy"))
import launch  # noqa: E402
import serve  # noqa: E402

TARGET_GB = 3.0
CONFIGS = {
    "before": {"MHA_VIZ_RUN_CACHE_MB": "1000000"},
    "after": {"MHA_VIZ_RUN_CACHE_MB": serve.PUBLIC_ENV["MHA_VIZ_RUN_CACHE_MB"], **serve.PROCESS_ENV},
}


def long_text(i: int, chars: int = 3900) -> str:
    """About 600 words, more than 512 SmolLM2 tokens (the page keeps the first 512); each session its own."""
    words, n = [], 0
    while n < chars:
        w = WORDS[(n * 7 + i * 13) % len(WORDS)] if words else f"Session{i}"
        words.append(w)
        n += len(w) + 1
    return " ".join(words)[:chars]


def measure(name: str, env: dict, sessions: int, tokens: int) -> dict:
    server = launch.Server(OUT / f"serve-memory-{name}.log", extra_env={**env, "MHA_VIZ_MAX_TOKENS": str(tokens)})
    try:
        warm = asyncio.run(C.visit(server.url, C.query(model="smollm2", text="A short warm-up."), 600))
        assert warm["ok"], warm
        time.sleep(2)
        idle = server.rss()
        load_before = load_avg()

        async def all_at_once():
            return await asyncio.gather(*[C.visit(server.url, C.query(model="smollm2", text=long_text(i)), 900)
                                          for i in range(sessions)])

        t0 = time.monotonic()
        results = asyncio.run(all_at_once())
        wall = time.monotonic() - t0
        time.sleep(5)  # sessions closed; what the process keeps
        return {"name": name, "idle": idle, "peak": server.peak_rss(), "after": server.rss(), "wall": wall,
                "ok": sum(r["ok"] for r in results),
                "busy": sum(any("busy" in a for a in r["alerts"]) for r in results),
                "errors": [r["error"] or r["exceptions"] for r in results if not r["ok"]],
                "slowest": max(r["seconds"] for r in results), "load": f"{load_before} -> {load_avg()}"}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=512)
    args = ap.parse_args()
    print(f"# bench_serve_memory | {machine()} | {args.sessions} SmolLM2 sessions at once, {args.tokens} tokens each")
    rows, found = [], {}
    for name, env in CONFIGS.items():
        r = measure(name, env, args.sessions, args.tokens)
        found[name] = r
        gb = 2**30
        rows.append([name, f"{r['idle'] / gb:.2f}", f"{r['peak'] / gb:.2f}", f"{r['after'] / gb:.2f}",
                     f"{r['ok']}/{args.sessions}", r["busy"], f"{r['slowest']:.0f}", r["load"]])
        for err in r["errors"]:
            print(f"  {name}: not answered: {err}")
    print(table(["config", "idle GB", "peak GB (VmHWM)", "after GB", "pages answered", "refused busy",
                 "slowest s", "load avg before -> after"], rows))
    b, a = found["before"], found["after"]
    print(f"peak after / before: {a['peak'] / b['peak']:.2f}; after, peak {a['peak'] / 2**30:.2f} GB vs target "
          f"{TARGET_GB} GB: {'met' if a['peak'] <= TARGET_GB * 2**30 else 'NOT met'}; resident after the sessions, "
          f"after / before: {a['after'] / b['after']:.2f}")


if __name__ == "__main__":
    main()
