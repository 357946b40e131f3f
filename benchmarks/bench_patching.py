"""The worked patching example on SmolLM2, and what the maps cost as ratios to one forward pass in the same run.

    python benchmarks/bench_patching.py [--model smollm2] [--repeat 3]

Prints: the logit difference " Mary" - " John" on both sentences; the top heads by exact patching, by its
attribution estimate, by direct effect, and by head importance under zero and under mean ablation; rank
correlations between them; and the time of each map / the time of one forward pass (median of --repeat).
Numbers for assets/notes.md and the closing note come from here: never typed by hand.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from mha_viz import load_model
from mha_viz.analysis.importance import head_importance
from mha_viz.analysis.patching import (
    Metric,
    attribution_patching,
    direct_effects,
    patching_map,
    rank_correlation,
    top_heads,
)

TEXT = "When Mary and John went to the store, John gave a drink to"
SOURCE = "When Mary and John went to the store, Mary gave a drink to"


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def tops(values: torch.Tensor, k: int = 5) -> str:
    return ", ".join(f"L{layer} H{head} ({v:+.3f})" for (layer, head), v in top_heads(values, k))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = load_model(args.model)
    mary, john = model.token_id(" Mary"), model.token_id(" John")
    metric = Metric("logit_diff", position=-1, answer=mary, other=john)
    n = model.token_count(TEXT)
    print(f"model {args.model}: {model.n_layers} x {model.n_heads} heads, {n} tokens; metric logit(' Mary') - "
          f"logit(' John') at the last position")

    t_forward, run = timed(lambda: model.run(TEXT), args.repeat)
    src = model.run(SOURCE)
    text_value, source_value = float(metric(None, run.logits)), float(metric(None, src.logits))
    print(f"logit diff: text {text_value:+.3f}, source {source_value:+.3f}")
    top_text = [model.decode(int(i)) for i in run.logits[-1].topk(3).indices]
    top_src = [model.decode(int(i)) for i in src.logits[-1].topk(3).indices]
    print(f"top-3 next tokens: text {top_text}, source {top_src}")

    t_attr, attr = timed(lambda: attribution_patching(model, TEXT, SOURCE, metric), args.repeat)
    t_exact, exact = timed(lambda: patching_map(model, TEXT, SOURCE, metric, chunk=args.chunk), 1)
    gap = source_value - text_value
    moved, attr_moved = exact.moved, attr / gap
    readout = model.readout(TEXT)
    parts = direct_effects(readout, -1, mary, john) if readout is not None else None
    t_zero, zero = timed(lambda: head_importance(model, TEXT, chunk=args.chunk), 1)
    mean = head_importance(model, TEXT, chunk=args.chunk, ablation="mean")

    print(f"\nexact patching (share of the gap closed): {tops(moved)}")
    print(f"attribution estimate (same units): {tops(attr_moved)}")
    print(f"rank correlation exact vs attribution, all heads: {rank_correlation(moved, attr_moved):.3f}")
    top10 = {h for h, _ in top_heads(moved, 10)}
    print(f"top-10 overlap exact vs attribution: {len(top10 & {h for h, _ in top_heads(attr_moved, 10)})}/10")
    if parts is not None:
        print(f"direct effect (logits): {tops(parts.heads)}")
        print(f"direct effects: sum over heads {float(parts.heads.sum()):+.3f}, rest {parts.rest:+.3f}, "
              f"total {parts.total:+.3f}")
        print(f"rank correlation exact patching vs direct effect: {rank_correlation(moved, parts.heads):.3f}")
    print(f"importance, zero ablation (KL at the last position): {tops(zero)}")
    print(f"importance, mean ablation (KL at the last position): {tops(mean)}")
    print(f"rank correlation zero vs mean importance: {rank_correlation(zero, mean):.3f}")
    for name, values in (("zero", zero), ("mean", mean)):
        ranks = {h: i + 1 for i, (h, _) in enumerate(top_heads(values, model.n_layers * model.n_heads))}
        print(f"  rank under {name} ablation of the top-3 patching heads: "
              + ", ".join(f"L{h[0]} H{h[1]} #{ranks[h]}" for h, _ in top_heads(moved, 3)))

    print(f"\ntimes (median of {args.repeat} where repeated), as ratios to one forward pass ({t_forward:.3f} s):")
    print(f"  attribution map (fwd+bwd on text, fwd on source): {t_attr / t_forward:.1f}x")
    print(f"  exact map, batched by {args.chunk}: {t_exact / t_forward:.1f}x "
          f"({model.n_layers * model.n_heads} heads)")
    print(f"  importance map (zero), batched by {args.chunk}: {t_zero / t_forward:.1f}x")


if __name__ == "__main__":
    main()
