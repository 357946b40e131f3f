"""All composition scores (Q, K and V, every pair of heads), cold and cached, for tiny, MiniLM and SmolLM2, and
tiny's full token x token maps built as figures; then SmolLM2's shapes on random weights by the Gram route that
`composition_scores` takes for them against the direct dh x D x dh route, measured in this run.

    python benchmarks/bench_circuits.py [--skip-direct]

"cold": the first `mha_viz.circuits(model)` on a loaded model (weights per head, composition, baseline, copying,
singular values; the random baseline's cache cleared first); "cached": the second call. Wall and CPU seconds, with
the load average before and after: the machine's two cores are shared, so wall time is CPU time stretched by the
load; the CPU time is what the code costs.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mha_viz.analysis import circuits as C  # noqa: E402


def timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def load() -> str:
    return "{:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def models() -> None:
    from mha_viz import load_model

    for name in ("tiny", "minilm", "smollm2"):
        model = load_model(name)
        C.random_baselines.cache_clear()
        before = load()
        wall, cpu, c = timed(lambda: C.circuits(model))
        again, _, _ = timed(lambda: C.circuits(model))
        heads = c.n_layers * c.n_heads
        print(f"  {name:8s} {heads:3d} x {heads:3d} heads: cold {wall:6.2f} s wall, {cpu:5.2f} s CPU; cached "
              f"{again * 1e6:.0f} us; load {before} -> {load()}")


def tiny_maps() -> None:
    """Everything the Circuits view computes and serialises for tiny's full maps of one head (token x token OV and
    QK, position x position QK): the maps, their figures, and the figures' JSON."""
    from mha_viz import load_model, plotting

    model = load_model("tiny")
    emb = model.embeddings()

    def draw():
        w = model.head_weights(1)
        ov = C.ov_token_map(emb.tokens, w.w_v[0], w.w_o[0], emb.unembed)  # (V, V)
        qk = C.qk_token_map(emb.tokens, w.w_q[0], w.w_k[0])  # (V, V)
        pos = C.qk_position_map(emb.positions, w.w_q[0], w.w_k[0], causal=True)  # (P, P)
        labels = [str(i) for i in range(pos.shape[0])]
        figs = [plotting.weight_map_figure(ov, emb.labels, emb.labels, "ov", x_title="x", y_title="y"),
                plotting.weight_map_figure(qk, emb.labels, emb.labels, "qk", x_title="x", y_title="y"),
                plotting.weight_map_figure(pos, labels, labels, "pos", x_title="x", y_title="y")]
        return sum(len(f.to_json()) for f in figs)

    draw()  # imports and the first figure's setup
    before = load()
    wall, cpu, size = timed(draw)
    print(f"  tiny, one head's full maps ({len(emb.labels)} tokens, {emb.positions.shape[0]} positions): "
          f"{wall:.3f} s wall, {cpu:.3f} s CPU, {size / 1e6:.1f} MB of figure JSON; load {before} -> {load()}")


def synthetic(direct: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    L, H, D, dh = 30, 9, 576, 64
    w_q, w_k, w_v = (torch.randn(L, H, D, dh, generator=gen) for _ in range(3))
    w_o = torch.randn(L, H, dh, D, generator=gen)
    before = load()
    gram_s, gram_cpu, gram = timed(lambda: C.composition_scores(w_q, w_k, w_v, w_o))
    print(f"  SmolLM2 shapes (random weights), Gram route: {gram_s:6.2f} s wall, {gram_cpu:5.2f} s CPU; load "
          f"{before} -> {load()}")
    if not direct:
        return
    saved = C._GRAM_BYTES
    C._GRAM_BYTES = 0  # force the direct route
    try:
        direct_s, direct_cpu, other = timed(lambda: C.composition_scores(w_q, w_k, w_v, w_o))
    finally:
        C._GRAM_BYTES = saved
    worst = max(float((gram[m] - other[m]).nan_to_num().abs().max()) for m in C.MODES)
    print(f"  direct route: {direct_s:6.2f} s wall, {direct_cpu:5.2f} s CPU; CPU ratio direct / Gram = "
          f"{direct_cpu / gram_cpu:.1f}x; largest difference {worst:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-direct", action="store_true", help="skip the slow direct route")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the app runs (MHA_VIZ_TORCH_THREADS=1)
    print("mha_viz.circuits(model), 1 torch thread")
    models()
    tiny_maps()
    synthetic(direct=not args.skip_direct)


if __name__ == "__main__":
    main()
