"""How long the default head census takes, cold, next to the bare forward passes it needs (the floor), and what it
found: the leading heads of every score against both baselines.

    python benchmarks/bench_census.py [tiny minilm smollm2 ...]

Prints per model: census seconds, the seconds of the same number of bare `model.run` calls on the same texts (the
floor), their ratio, the peak resident memory, and the top heads of each score. Nothing is asserted.
"""
from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mha_viz import head_census, load_model  # noqa: E402
from mha_viz.analysis.census_run import CensusConfig, census_inputs  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(names: list[str]) -> None:
    torch.set_num_threads(1)  # as the app runs (MHA_VIZ_TORCH_THREADS=1)
    for name in names:
        model = load_model(name)
        cfg = CensusConfig.for_model(model)
        start = time.perf_counter()
        census = head_census(model, config=cfg)
        seconds = time.perf_counter() - start
        sets = census_inputs(model, 0, cfg)
        texts = [i.text for k in ("random", "repeated", "templates") for i in sets[k]] + list(sets["texts"])
        start = time.perf_counter()
        for text in texts:
            model.run(text)
        floor = time.perf_counter() - start
        print(f"\n## {name}: census {seconds:.1f} s cold; {len(texts)} bare forwards of its own inputs {floor:.1f} s "
              f"(ratio {seconds / floor:.1f}: the rest is the control and the in-context check); peak RSS "
              f"{peak_mb():.0f} MB; control: {census.control_kind}")
        for score in census.names:
            (lh, value), *rest = census.top(score, 3)
            ctrl = census.control.get(score)
            off = census.offset.get(score)
            print(f"  {score:18s} L{lh[0]} H{lh[1]} {value:.2f} [{float(census.low[score][lh]):.2f}, "
                  f"{float(census.high[score][lh]):.2f}]  next: "
                  + ", ".join(f"L{a} H{b} {v:.2f}" for (a, b), v in rest)
                  + f"  | uniform {census.uniform[score]:.2f}"
                  + (f", best offset {off[0]:+d}: {off[1]:.2f}" if off else "")
                  + (f", control max {float(ctrl.max()):.2f} (that head {float(ctrl[lh]):.2f})" if ctrl is not None
                     else ""))
        if census.in_context is not None:
            c = census.in_context
            print(f"  in-context: loss first copy {c.loss_first:.2f}, second {c.loss_second:.2f} nats; top {c.k} "
                  f"induction heads {[f'L{a} H{b}' for a, b in c.top_heads]}; share of the drop lost: "
                  + ", ".join(f"{k} {v:.0%}" for k, v in c.lost.items()))


if __name__ == "__main__":
    main(sys.argv[1:] or ["tiny", "minilm", "smollm2"])
