"""The long steps (head importance and the exact patching map), the engine now against the code at another commit,
interleaved in one run, and checked equal. Each side runs in its own subprocess (its own copy of the package),
one torch thread unless --threads says otherwise.

    python benchmarks/bench_long_steps.py --before acd96ab [--models smollm2,minilm] [--tokens 16,120] [--reps 1]

What changed (mha_viz/models/interventions.py, run_batch_keep): the layers before the first head a batch switches
off are taken from the unedited run instead of recomputed per row, and only the logits at the position that is
read are computed. Same numbers: the script prints the largest difference between the two sides' maps.
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
if what == "importance":
    head_importance(model, text)  # warm: the cache of the unedited run, allocator
    t0 = time.perf_counter(); out = head_importance(model, text); secs = time.perf_counter() - t0
else:
    if model.info.kind == "encoder":
        metric = Metric("cosine", target=model.run(source).output)
    else:
        metric = Metric("logit_diff", position=model.token_count(text) - 1,
                        answer=model.token_id(" Mary"), other=model.token_id(" John"))
    patching_map(model, text, source, metric)
    t0 = time.perf_counter(); out = patching_map(model, text, source, metric).patched; secs = time.perf_counter() - t0
print(json.dumps({"secs": secs, "map": out.tolist()}))
"""


def pair(model, n: int) -> tuple[str, str]:
    """A text of about n tokens ending in an IOI-style clause, and the same with the two names swapped."""
    tail = "When Mary and John went to the store, John gave a drink to"
    filler = sized_sentence(model, "garden", max(n - model.token_count(tail), 4))
    text = f"{filler} {tail}"
    return text, text.replace("John gave", "Mary gave")


def run(folder, threads, name, text, source, what) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(folder), str(threads), name, text, source, what],
                         capture_output=True, text=True, check=True, cwd=str(OUT))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--models", default="smollm2,minilm")
    ap.add_argument("--tokens", default="16,120")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    before = export(args.before)
    print(f"# bench_long_steps | {machine()} | threads {args.threads} | before {args.before}", flush=True)
    from mha_viz import load_model

    print("| model | tokens | step | before (s) | after (s) | before / after | max |diff| |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        model = load_model(name)
        for n in [int(x) for x in args.tokens.split(",")]:
            text, source = pair(model, n)
            tokens = model.token_count(text)
            for what in ("importance", "patching"):
                old, new = [], []
                for _ in range(args.reps):
                    a = run(before, args.threads, name, text, source, what)
                    b = run(REPO, args.threads, name, text, source, what)
                    old.append(a["secs"])
                    new.append(b["secs"])
                import torch

                diff = float((torch.tensor(a["map"]) - torch.tensor(b["map"])).abs().max())
                print(f"| {name} | {tokens} | {what} | {median(old):.2f} | {median(new):.2f} | "
                      f"{median(old) / median(new):.2f}x | {diff:.2g} |", flush=True)
    print(f"# finished {time.strftime('%H:%M')} | {machine()}")


if __name__ == "__main__":
    main()
