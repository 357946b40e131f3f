"""The intervention engine now against the code at another commit: the model calls every page step makes
(a run, a run with a head off, a mean-ablated run, a layer opened up, head outputs), each side in its own
subprocess with its own copy of the package, rounds interleaved old/new, medians over rounds.

    python benchmarks/bench_engine_ab.py --before acd96ab [--models tiny,minilm,smollm2] [--rounds 6]

Prints after/before per step: above 1 is slower now.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from _common import OUT, REPO, machine
from bench_bertviz import export

CHILD = r"""
import json, sys, time, torch
sys.path.insert(0, sys.argv[1])
torch.set_num_threads(1)
from mha_viz import load_model
model = load_model(sys.argv[2])
texts = json.loads(sys.argv[3])
reps = int(sys.argv[4])
out = {}
def timed(label, fn):
    fn()  # warm
    best = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); best.append(time.perf_counter() - t0)
    out[label] = sorted(best)[len(best) // 2]
for n, text in texts.items():
    timed(f"{n} run", lambda: model.run(text))
    timed(f"{n} run, one head off", lambda: model.run(text, ablate={(0, 1)}))
    timed(f"{n} run, mean-ablated", lambda: model.run(text, ablate={(0, 1)}, ablation="mean"))
    timed(f"{n} inside a layer", lambda: model.inside_layer(text, 1))
    timed(f"{n} head outputs", lambda: model.head_outputs(text))
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--models", default="tiny,minilm,smollm2")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    before = export(args.before)
    print(f"# bench_engine_ab | {machine()} | rounds {args.rounds} x reps {args.reps} | before {args.before}")
    words = ("the keys to the old cabinet are on the table and the dog is near the door while anna gave the "
             "small bird a song about rain").split()
    print("| model | step | before (ms) | after (ms) | after / before |")
    print("| --- | --- | --- | --- | --- |")
    for name in args.models.split(","):
        texts = {"16 words": " ".join(words[:16]), "32 words": " ".join((words * 2)[:32])}
        sides: dict[str, list[dict]] = {"before": [], "after": []}
        for _ in range(args.rounds):
            for side, folder in (("before", before), ("after", REPO)):
                res = subprocess.run([sys.executable, "-c", CHILD, str(folder), name, json.dumps(texts),
                                      str(args.reps)], capture_output=True, text=True, check=True, cwd=str(OUT))
                sides[side].append(json.loads(res.stdout.strip().splitlines()[-1]))
        for step in sides["after"][0]:
            b = statistics.median(r[step] for r in sides["before"]) * 1e3
            a = statistics.median(r[step] for r in sides["after"]) * 1e3
            print(f"| {name} | {step} | {b:.2f} | {a:.2f} | {a / b:.2f} |", flush=True)
    print(f"# finished | {machine()}")


if __name__ == "__main__":
    main()
