"""The long steps (head importance and the exact patching map), the engine now against the code at another commit,
interleaved in one run, and checked equal. Each side runs in its own subprocess (its own copy of the package),
one torch thread unless --threads says otherwise.

    python benchmarks/bench_long_steps.py --before acd96ab [--models smollm2,minilm] [--tokens 16,120] [--reps 1]

--borrow instead compares, in this tree, one torch thread against the app's policy for long jobs
(mha_viz.app.threads.long_job: every core while the machine is otherwise idle, re-checked after each chunk of heads),
interleaved, and prints the threads each chunk got and the load average beside every row:

    python benchmarks/bench_long_steps.py --borrow [--models smollm2,minilm] [--tokens 16,120] [--steps importance]

Measured 2026-12-01 14:13-15:20 on the shared 2-core machine, load average 9-21 (other sessions' tests), one run
each: MiniLM 126 tokens importance 5.38-8.79 s one thread against 19.4-26.4 s two threads forced (0.20-0.45x),
patching 8.30-9.28 s against 18.9-28.8 s (0.32-0.44x); SmolLM2 18 tokens importance 39.7 s against 302.3 s forced
(0.13x), patching 62.8 s; SmolLM2 120 tokens importance 301.7 s, patching 361.3 s (one thread). long_job kept one
thread on every chunk of every run (the rest of the machine used more than half a core), so it ran as one thread:
0.98x and 1.17x on MiniLM at load 11-12 (15:20, after the child imported streamlit before its clock; earlier rows had
that import inside the timing). Two threads on a busy machine are 2-8x slower: the policy borrows only when idle.

What changed at f050aea (mha_viz/models/interventions.py, run_batch_keep): the layers before the first head a batch
switches off are taken from the unedited run instead of recomputed per row, and only the logits at the position that
is read are computed. After it: one growing batch per wave (rows join at the layer they first edit), and on causal
transformers models a patch recomputes only the positions from the first token where the texts differ, on the
unedited run's keys and values. Same numbers: the script prints the largest difference between the two sides' maps,
and the CPU seconds of each side beside its wall seconds (the machine is shared; CPU time is what the code costs).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from _common import OUT, REPO, machine, median
from bench_bertviz import export, sized_sentence

CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
torch.set_num_threads(int(sys.argv[2]))
from mha_viz import load_model
from mha_viz.analysis.importance import head_importance
from mha_viz.analysis.patching import Metric, patching_map
model = load_model(sys.argv[3])
text, source, what = sys.argv[4], sys.argv[5], sys.argv[6]
borrow = len(sys.argv) > 7 and sys.argv[7] == "borrow"
threads = []
if what == "importance":
    step = lambda progress=None: head_importance(model, text, progress=progress)
else:
    if model.info.kind == "encoder":
        metric = Metric("cosine", target=model.run(source).output)
    else:
        metric = Metric("logit_diff", position=model.token_count(text) - 1,
                        answer=model.token_id(" Mary"), other=model.token_id(" John"))
    step = lambda progress=None: patching_map(model, text, source, metric, progress=progress).patched
if len(sys.argv) > 8 and sys.argv[8] == "short-warm":
    model.run(text)  # warm the allocator and the unedited run's cache only: the step itself is long
else:
    step()  # warm: the cache of the unedited run, allocator
if borrow:
    from mha_viz.app.threads import long_job  # imports streamlit: before the clock starts
t0, c0 = time.perf_counter(), time.process_time()
if borrow:
    with long_job() as tick:
        out = step(progress=lambda f: threads.append(tick()))
else:
    out = step()
secs, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"secs": secs, "cpu": cpu, "map": out.tolist(), "threads": threads}))
"""


def pair(model, n: int) -> tuple[str, str]:
    """A text of about n tokens ending in an IOI-style clause, and the same with the two names swapped."""
    tail = "When Mary and John went to the store, John gave a drink to"
    filler = sized_sentence(model, "garden", max(n - model.token_count(tail), 4))
    text = f"{filler} {tail}"
    return text, text.replace("John gave", "Mary gave")


def run(folder, threads, name, text, source, what, borrow=False, short_warm=False) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(threads), name, text, source, what,
                          "borrow" if borrow else "one", "short-warm" if short_warm else "full-warm"],
                         capture_output=True, text=True, check=True, cwd=str(OUT))
    return json.loads(out.stdout.strip().splitlines()[-1])


def borrow_ab(args) -> None:
    """One thread against the app's long-job policy (and, with --modes, every core forced), same code,
    interleaved in one run; ratios to one thread, the threads each chunk got, the load average after each row."""
    import os

    import torch

    from mha_viz import load_model

    from _common import load_avg

    cores = len(os.sched_getaffinity(0))
    modes = args.modes.split(",")
    print(f"# bench_long_steps --borrow | {machine()} | modes {modes} (all-cores = {cores} threads, no policy)",
          flush=True)
    print("| model | tokens | step | " + " | ".join(f"{m} (s)" for m in modes) + " | "
          + " | ".join(f"one / {m}" for m in modes[1:]) + " | long_job threads per chunk | max |diff| | load avg |")
    print("|" + " --- |" * (5 + 2 * len(modes)))
    for name in args.models.split(","):
        model = load_model(name)
        for n in [int(x) for x in args.tokens.split(",")]:
            text, source = pair(model, n)
            tokens = model.token_count(text)
            for what in args.steps.split(","):
                secs = {m: [] for m in modes}
                used, maps = [], {}
                for _ in range(args.reps):
                    for m in modes:
                        got = run(REPO, cores if m == "all-cores" else 1, name, text, source, what,
                                  borrow=m == "long_job", short_warm=tokens > 64)
                        secs[m].append(got["secs"])
                        maps[m] = torch.tensor(got["map"])
                        if m == "long_job":
                            used += got["threads"]
                diff = max(float((maps[m] - maps[modes[0]]).abs().max()) for m in modes)
                spread = f"{min(used)}-{max(used)} (mean {sum(used) / len(used):.2f})" if used else "-"
                t = {m: median(v) for m, v in secs.items()}
                print(f"| {name} | {tokens} | {what} | " + " | ".join(f"{t[m]:.2f}" for m in modes) + " | "
                      + " | ".join(f"{t[modes[0]] / t[m]:.2f}x" for m in modes[1:])
                      + f" | {spread} | {diff:.2g} | {load_avg()} |", flush=True)
    print(f"# finished {time.strftime('%H:%M')} | {machine()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before")
    ap.add_argument("--borrow", action="store_true", help="one thread against threads.long_job, this tree only")
    ap.add_argument("--steps", default="importance,patching")
    ap.add_argument("--modes", default="one,long_job,all-cores", help="--borrow: one first, then long_job, all-cores")
    ap.add_argument("--models", default="smollm2,minilm")
    ap.add_argument("--tokens", default="16,120")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    if args.borrow:
        borrow_ab(args)
        return
    if not args.before:
        ap.error("--before COMMIT (or --borrow) is needed")
    before = export(args.before)
    print(f"# bench_long_steps | {machine()} | threads {args.threads} | before {args.before}", flush=True)
    from mha_viz import load_model

    from _common import load_avg

    print("| model | tokens | step | before (s) | after (s) | before / after | CPU s before / after | max |diff| "
          "| load avg |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        model = load_model(name)
        for n in [int(x) for x in args.tokens.split(",")]:
            text, source = pair(model, n)
            tokens = model.token_count(text)
            for what in ("importance", "patching"):
                old, new, old_cpu, new_cpu = [], [], [], []
                for _ in range(args.reps):
                    a = run(before, args.threads, name, text, source, what, short_warm=tokens > 64)
                    b = run(REPO, args.threads, name, text, source, what, short_warm=tokens > 64)
                    old.append(a["secs"])
                    new.append(b["secs"])
                    old_cpu.append(a.get("cpu", float("nan")))
                    new_cpu.append(b["cpu"])
                import torch

                diff = float((torch.tensor(a["map"]) - torch.tensor(b["map"])).abs().max())
                print(f"| {name} | {tokens} | {what} | {median(old):.2f} | {median(new):.2f} | "
                      f"{median(old) / median(new):.2f}x | {median(old_cpu):.1f} / {median(new_cpu):.1f} "
                      f"({median(old_cpu) / median(new_cpu):.2f}x) | {diff:.2g} | {load_avg()} |", flush=True)
    print(f"# finished {time.strftime('%H:%M')} | {machine()}")


if __name__ == "__main__":
    main()
