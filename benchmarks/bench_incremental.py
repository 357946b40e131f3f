"""Incremental runs: a head switched off in layer l after the same text ran with every head on, against a new
sentence of the same length, in one process, interleaved (models/schedule.EarlierRuns).

Each repetition runs a new sentence (a word changed, so no layer is kept for it) with every head on, then one head
off in the last layer, in the middle layer and in layer 0 (each resumes from the kept runs of that sentence), then
the last-layer toggle again with nothing kept: what a toggle cost before incremental runs. Each step twice: with
every position's logits (what `run` computes by default) and with the last position's only (`logits_at=[-1]`, what
the Layer view's prediction reads; the LM head is left out elsewhere), on sentences of their own.

Targets (issue: work proportional to what changed), SmolLM2 at ~128 tokens, as ratios to a new sentence:
last layer <= 0.25x, middle layer <= 0.7x, layer 0 <= 1.15x.

    python benchmarks/bench_incremental.py [--models tiny,smollm2] [--tokens 128] [--reps 5] [--threads 1]
"""
from __future__ import annotations

import argparse
import time

import torch

from _common import WORDS, load_avg, machine, median, table, text_of_tokens, verdict

TARGETS = {"last layer": 0.25, "middle layer": 0.7, "layer 0": 1.15}


def sentences(model, tokens: int, n: int) -> list[str]:
    """n texts of about `tokens` tokens, each with its own first word, so no two share their token ids."""
    base = text_of_tokens(model.token_count, tokens - 1)
    return [f"{WORDS[(i * 7) % len(WORDS)]} {base}" for i in range(n)]


def timed(call) -> float:
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1000


def bench_model(name: str, tokens: int, reps: int) -> tuple[list[list], int]:
    from mha_viz import load_model
    from mha_viz.models import interventions

    t0 = time.perf_counter()
    model = load_model(name)
    print(f"[incremental] loaded {name} in {time.perf_counter() - t0:.1f} s", flush=True)
    L = model.n_layers
    texts = sentences(model, min(tokens, model.info.max_tokens), 2 * reps + 1)
    n = model.token_count(texts[0])
    model.run(texts[-1])  # warm-up: first-call allocations, not counted
    modes = {"every position": None, "last position": [-1]}  # which logits a run computes
    toggles = {"last layer": (L - 1, 0), "middle layer": (L // 2, 0), "layer 0": (0, 0)}
    steps: dict = {}
    for rep in range(reps):
        for i, (mode, at) in enumerate(modes.items()):
            text = texts[2 * rep + i]  # a sentence of its own per mode: nothing kept for it yet
            steps.setdefault((mode, "new sentence"), []).append(timed(lambda: model.run(text, logits_at=at)))
            for step, head in toggles.items():
                steps.setdefault((mode, step), []).append(
                    timed(lambda: model.run(text, ablate={head}, logits_at=at)))
            interventions._EARLIER.clear()  # what a toggle cost before: nothing kept
            steps.setdefault((mode, "toggle, nothing kept"), []).append(
                timed(lambda: model.run(text, ablate={(L - 1, 1)}, logits_at=at)))
    rows = []
    for (mode, step), times in steps.items():
        ratio = median(times) / median(steps[(mode, "new sentence")])
        whole = median(times) / median(steps[("every position", "new sentence")])
        target = TARGETS.get(step) if name == "smollm2" else None  # the targets are SmolLM2's
        ms = median(times)
        rows.append([name, n, mode, step, f"{ms:,.1f}" if ms < 10 else f"{ms:,.0f}", f"{ratio:.2f}x",
                     f"{whole:.2f}x", "" if target is None else f"<= {target}x {verdict(ratio, target)}"])
    held = interventions._EARLIER.held_bytes()
    return rows, held


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="tiny,smollm2")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the app's default is 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"[incremental] {machine()} | torch threads {args.threads}")
    rows = []
    for name in args.models.split(","):
        try:
            found, held = bench_model(name, args.tokens, args.reps)
        except Exception as err:  # a model that is not installed here: say so and go on
            print(f"[incremental] {name}: skipped ({type(err).__name__}: {str(err)[:120]})")
            continue
        rows += found
        print(f"[incremental] {name}: kept layers hold {held / 2**20:.1f} MiB after the runs", flush=True)
    print(table(["model", "tokens", "logits at", "run", "median ms", "vs new sentence (same logits)",
                 "vs new sentence (every logit)", "target"], rows))
    print(f"[incremental] load avg at the end {load_avg()}")


if __name__ == "__main__":
    main()
