"""Memory: peak resident set (VmHWM) of the `streamlit run app.py` process after a user exercised it.

One fresh server per model, so each peak is that model's alone: open the page, (pick SmolLM2), then the
browser steps of bench_browser (new sentences, head toggles, layer switches, the All-layers view).
Reference, same run: a bare Python process that imports torch + transformers, loads the same model with
`load_model` and runs one forward at the same length; app peak / bare peak is the cost of the app around it.
Targets: <= 1 GB with MiniLM, <= 2.5 GB with SmolLM2.

    python benchmarks/bench_memory.py [--reps 2]
"""
from __future__ import annotations

import argparse
import subprocess
import sys

import bench_browser as B

import _app as A
from _common import REPO, load_avg, machine, table

TARGET_GB = {"minilm": 1.0, "smollm2": 2.5}
BARE = """
import resource, sys
sys.path.insert(0, {repo!r})
from mha_viz import load_model
m = load_model({name!r})
m.run({text!r})
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def bare_peak(name: str) -> int:
    code = BARE.format(repo=str(REPO), name=name, text=A.sentence("apple"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                              "HOME": str(__import__("pathlib").Path.home())})
    return int(out.stdout.strip().splitlines()[-1])


def app_peak(browser, name: str, reps: int) -> tuple[int, int]:
    server = A.Server(f"streamlit-memory-{name}.log")
    try:
        pg, _ = B.open_app(browser, server)
        B.pick_model(pg, name)
        B.exercise(pg, name, reps, {}, list(A.MARKERS))
        pg.close()
        return server.peak_rss(), server.rss()
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--models", default="minilm,smollm2")
    args = ap.parse_args()
    print(f"# bench_memory | {machine()} | reps {args.reps}", flush=True)
    rows = []
    with A.chromium() as browser:
        for name in args.models.split(","):
            peak, now = app_peak(browser, name, args.reps)
            bare = bare_peak(name)
            target = TARGET_GB[name]
            rows.append([name, f"{peak / 1e9:.2f}", f"{now / 1e9:.2f}", f"{bare / 1e9:.2f}", f"{peak / bare:.2f}",
                         f"{target:.1f}", f"{peak / 1e9 / target:.2f}", "met" if peak / 1e9 <= target else "MISSED"])
            print(f"[memory] {name}: app peak {peak / 1e9:.2f} GB, bare {bare / 1e9:.2f} GB", flush=True)
    print()
    print(f"load avg at end {load_avg()}")
    print(table(["model", "app peak GB (VmHWM)", "app RSS at end GB", "bare load+run peak GB", "app / bare",
                 "target GB", "peak / target", "verdict"], rows))


if __name__ == "__main__":
    main()
