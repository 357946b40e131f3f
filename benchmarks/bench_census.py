"""How long the default head census takes, cold and cached, next to the bare forward passes it needs (the floor),
and what it found: the leading heads of every score against both baselines.

    python benchmarks/bench_census.py [tiny minilm smollm2 ...] [--json DIR]

Per model, in this order, in one process with one torch thread (as the app runs):
    census, cold       the first `head_census(model)` (head means and unedited states not yet kept)
    cached             the same census asked again through the app's census cache (`RunCache`, views/census.py's)
    floor, batched     the same inputs (model and control inputs; the untrained twin's for tiny) through
                       `run_many` with a reduction that keeps nothing: the forward passes alone, padded
    floor, one by one  the same inputs as bare `model.run` calls, one forward each (how the census ran before)
wall seconds and the process's CPU seconds (on a shared machine the wall clock waits for other processes), the
load average over the run, and the peak resident memory. Nothing is asserted. --json DIR writes each census's
`to_json()` there (to compare two versions of the code).
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from mha_viz import head_census, load_model  # noqa: E402
from mha_viz.analysis.census_run import CensusConfig, census_inputs  # noqa: E402
from mha_viz.models.registry import untrained_twin  # noqa: E402


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Clock:
    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu

    def __str__(self):
        return f"{self.wall:.1f} s (CPU {self.cpu:.1f} s)"


def main(names: list[str], out: Path | None) -> None:
    from mha_viz.app.cache import RunCache

    torch.set_num_threads(1)  # as the app runs (MHA_VIZ_TORCH_THREADS=1)
    cache = RunCache(8, size=lambda _: 1)  # as views/census.py keeps censuses
    print("| model | census, cold | cached | floor: batched forwards | floor: one forward per input | ratio to "
          "batched floor | inputs | peak RSS | load average |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    found = []
    for name in names:
        model = load_model(name)
        cfg = CensusConfig.for_model(model)
        load_before = os.getloadavg()[0]
        key = (name, 0, None)
        with Clock() as cold:
            census = cache.get(key, lambda: head_census(model, config=cfg))
        with Clock() as cached:
            again = cache.get(key, lambda: head_census(model, config=cfg))
        assert again is census
        sets = census_inputs(model, 0, cfg)
        kinds = ("random", "repeated", "templates", "unrepeated", "shuffled")
        texts = [i.text for k in kinds for i in sets[k]] + list(sets["texts"])
        twin = untrained_twin(model)
        readers = [model] if twin is None else [model, twin]
        if twin is not None:  # the twin reads the model's inputs, not the destroyed-relation ones
            texts = [i.text for k in ("random", "repeated", "templates") for i in sets[k]] + list(sets["texts"])
        with Clock() as batched:
            for m in readers:
                m.run_many(texts, lambda i, run: None)
        with Clock() as single:
            for m in readers:
                for text in texts:
                    m.run(text)
        load = (load_before + os.getloadavg()[0]) / 2
        n = len(texts) * len(readers)
        print(f"| {name} | {cold} | {cached.wall * 1000:.2f} ms | {batched} | {single} | "
              f"{cold.wall / batched.wall:.1f} | {n} (+ {census.in_context.n_inputs if census.in_context else 0} "
              f"in-context) | {peak_mb():.0f} MB | {load:.1f} |", flush=True)
        found.append((name, census))
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{name}.json").write_text(json.dumps(census.to_json()))
    for name, census in found:
        print(f"\n## {name}: control: {census.control_kind}")
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
    args = sys.argv[1:]
    json_dir = None
    if "--json" in args:
        i = args.index("--json")
        json_dir = Path(args[i + 1])
        del args[i:i + 2]
    main(args or ["tiny", "minilm", "smollm2"], json_dir)
