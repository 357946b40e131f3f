"""Compute: `Model.run(text, ablate={one head})` against the bare transformers eager forward, interleaved.

The reference is an independent deep copy of the same weights with transformers' own eager attention
(`attn_implementation="eager"`, none of our hooks), called as `ref(**enc, output_attentions=True)` under
`torch.no_grad()` on the already-tokenized input: the least work that yields the same attention tensors.
`Model.run` is timed end to end (tokenize, forward with the keep mask, stack attentions, labels).

Pairs alternate their order (AB, BA, ...) so neither side always runs on a warmer cache.
Target: median(Model.run) / median(bare) <= 1.25.

    python benchmarks/bench_compute.py [--pairs 15] [--models minilm,smollm2]
"""
from __future__ import annotations

import argparse
import copy
import time

import torch

from _common import load_avg, machine, median, table, text_of_tokens, verdict

TARGET = 1.25
LENGTHS = (16, 64, 128)


def reference(model):
    ref = copy.deepcopy(model._model)
    ref.set_attn_implementation("eager")
    return ref.eval()


def profile_run(model, text, ablate, name, n) -> None:
    """Where Model.run's time goes beyond the forward: cProfile of 30 calls, top entries by own time."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(30):
        model.run(text, ablate=ablate)
    prof.disable()
    print(f"[compute] cProfile of 30 x Model.run, {name}, {n} tokens (top by cumulative time):")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(18)


def bench_model(name: str, pairs: int, threads: list[int], profile: bool = False) -> list[list]:
    from mha_viz import load_model

    t0 = time.perf_counter()
    model = load_model(name)
    print(f"[compute] loaded {name} in {time.perf_counter() - t0:.1f} s", flush=True)
    # The bare forward is transformers' own; MiniLM's app path is the in-repo encoder, so its twin loads for it.
    if name == "minilm":
        from mha_viz.models.hf import load_minilm_hf

        twin = load_minilm_hf()
    else:
        twin = model
    ref = reference(twin)
    def count(s):
        return len(twin._encode(s)[0]["input_ids"][0])

    ablate = {(model.n_layers // 2, 1)}
    rows = []
    for target, nthreads in [(t, th) for th in threads for t in LENGTHS]:
        torch.set_num_threads(nthreads)
        text = text_of_tokens(count, target)
        enc = twin._encode(text)[0]
        n = enc["input_ids"].shape[1]

        def ours():
            return model.run(text, ablate=ablate)

        def bare():
            with torch.no_grad():
                return ref(**enc, output_attentions=True)

        # Same numbers? (unablated run vs reference) - a benchmark of the wrong computation is worthless.
        same = torch.allclose(model.run(text).attentions, torch.stack([a[0] for a in bare().attentions]), atol=1e-5)
        for _ in range(3):  # warm-up
            ours(), bare()
        t_ours, t_bare = [], []
        for i in range(pairs):
            order = (ours, bare) if i % 2 == 0 else (bare, ours)
            for fn in order:
                t = time.perf_counter()
                fn()
                (t_ours if fn is ours else t_bare).append(time.perf_counter() - t)
        ratio = median(t_ours) / median(t_bare)
        ratio_min = min(t_ours) / min(t_bare)  # the least disturbed pair of runs: robust to a busy machine
        rows.append([name, n, nthreads, f"{median(t_ours) * 1e3:.1f}", f"{median(t_bare) * 1e3:.1f}", f"{ratio:.3f}",
                     f"{ratio_min:.3f}", verdict(ratio, TARGET), "yes" if same else "NO", load_avg()])
        print(f"[compute] {name} {n} tokens {nthreads} thr: ours {median(t_ours) * 1e3:.1f} ms, "
              f"bare {median(t_bare) * 1e3:.1f} ms, ratio {ratio:.3f} (of minimums {ratio_min:.3f})", flush=True)
        if profile:
            profile_run(model, text, ablate, name, n)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--threads", default="1,2",
                    help="torch intra-op threads, each measured; 1 is steadier on a shared machine (2 threads "
                         "spin at barriers when another process holds a core)")
    ap.add_argument("--profile", action="store_true", help="cProfile Model.run after each size")
    args = ap.parse_args()
    print(f"# bench_compute | {machine()} | torch threads {torch.get_num_threads()} | pairs {args.pairs}")
    rows = []
    for name in args.models.split(","):
        rows += bench_model(name.strip(), args.pairs, [int(t) for t in args.threads.split(",")], args.profile)
    print()
    print(table(["model", "tokens", "threads", "Model.run ms (1 head off)", "bare eager ms", "ratio of medians",
                 "ratio of minimums", f"median ratio <= {TARGET}",
                 "attentions equal", "load avg"], rows))


if __name__ == "__main__":
    main()
