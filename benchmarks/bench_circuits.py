"""All composition scores (Q, K and V, every pair of heads) at SmolLM2's shapes (30 layers x 9 heads, D = 576,
dh = 64; random weights, so no model is loaded), by the Gram route `composition_scores` takes for these shapes
against the direct dh x D x dh route, measured in this run; and the same scores through `mha_viz.circuits` on the
real SmolLM2 when its adapter gives weights per head.

    python benchmarks/bench_circuits.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mha_viz.analysis import circuits as C  # noqa: E402


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    torch.set_num_threads(1)  # as the app runs (MHA_VIZ_TORCH_THREADS=1)
    gen = torch.Generator().manual_seed(0)
    L, H, D, dh = 30, 9, 576, 64
    w_q, w_k, w_v = (torch.randn(L, H, D, dh, generator=gen) for _ in range(3))
    w_o = torch.randn(L, H, dh, D, generator=gen)
    gram_s, gram = timed(lambda: C.composition_scores(w_q, w_k, w_v, w_o))
    saved = C._GRAM_BYTES
    C._GRAM_BYTES = 0  # force the direct route
    try:
        direct_s, direct = timed(lambda: C.composition_scores(w_q, w_k, w_v, w_o))
    finally:
        C._GRAM_BYTES = saved
    worst = max(float((gram[m] - direct[m]).nan_to_num().abs().max()) for m in C.MODES)
    print(f"SmolLM2 shapes, {L * H} x {L * H} head pairs, 3 modes, 1 thread")
    print(f"  Gram route   {gram_s:6.2f} s")
    print(f"  direct route {direct_s:6.2f} s   ratio direct / Gram = {direct_s / gram_s:.1f}x; largest difference "
          f"{worst:.1e}")
    try:
        from mha_viz import circuits, load_model

        model = load_model("smollm2")
        full_s, c = timed(lambda: circuits(model))
        again_s, _ = timed(lambda: circuits(model))
        print(f"  mha_viz.circuits(smollm2): {full_s:.2f} s first call (weights, composition, copying, singular "
              f"values), {again_s * 1e6:.0f} us cached; ratio to the synthetic Gram route {full_s / gram_s:.2f}")
    except (AttributeError, Exception) as err:  # the adapter may not give weights per head yet
        print(f"  mha_viz.circuits(smollm2): not measured ({type(err).__name__}: {str(err)[:100]})")


if __name__ == "__main__":
    main()
