"""A study's wall time on Ray with 1 and with 2 workers, where the rest goes, and the cost model per checkpoint.

    .venv/bin/python benchmarks/bench_study.py            # tiny's checkpoints and seeds, then the three sizes
    .venv/bin/python benchmarks/bench_study.py --quick    # the small census (`mha-viz study --quick`)

1. A study of tiny's checkpoints and its seeds' (assets/tiny, assets/tiny/seeds/seed*) written to a fresh file with a
   fresh local Ray of 1 worker, then of 2 (interleaved twice): wall time, and inside it Ray's start, the workers'
   first result (their imports), and the checkpoints' own seconds. Ratio: the speed-up with 2 workers.
2. The cost model: seconds per checkpoint = t0 + c x parameters x census tokens (`measure.matmul_parameters`: the
   linear layers' weights; `measure.census_tokens`), t0 and c fitted by least squares on the three sizes (tiny, a
   bigger tiny config, MiniLM), each size's error printed, and each size predicted from the other two (two points,
   two unknowns). Measured in this process, one thread, the median of 3.
3. The same checkpoint (MiniLM) with 1 and with 2 torch threads: what a task gains from more cores.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, machine  # noqa: E402

RUNS = [REPO / "assets" / "tiny", *sorted((REPO / "assets" / "tiny" / "seeds").glob("seed*"))]


def study_once(workers: int, config) -> dict:
    """One study of RUNS into a fresh file on a fresh local Ray of `workers` CPUs."""
    import ray

    from mha_viz.study import read_study, run_study
    from mha_viz.study.runner import worker_path

    marks = {}

    def progress(p):
        if p.done + p.failed == 1 and "first" not in marks:
            marks["first"] = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "study.duckdb"
        start = time.perf_counter()
        with worker_path(str(REPO)):
            ray.init(num_cpus=workers, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        marks["ray"] = time.perf_counter()
        try:
            summary = run_study(RUNS, out, workers=workers, config=config, progress=progress)
        finally:
            end = time.perf_counter()
            ray.shutdown()
        ck = read_study(out).checkpoints
        size = out.stat().st_size
    return {"wall": end - start, "ray": marks["ray"] - start, "first": marks["first"] - marks["ray"],
            "tasks": float(ck["seconds"].sum()), "n": summary.measured, "failed": summary.failed,
            "workers_used": ck["worker"].nunique(), "bytes": size}


def bigger_tiny(folder: Path) -> Path:
    """tiny's stack at 6 layers x 8 heads, d_model 256, trained 2 steps (its size is what matters here)."""
    from mha_viz.models.tiny.architecture import TinyConfig
    from mha_viz.models.tiny.train import TrainConfig, train

    train(folder, TinyConfig(n_layers=6, n_heads=8, d_model=256, d_mlp=1024),
          TrainConfig(steps=2, batch_size=4, n_texts=64, warmup=1, checkpoints=(0, 2), log_every=1), quiet=True)
    return folder


def timed_measure(model, config, repeats: int = 3) -> tuple[float, int, int]:
    from mha_viz.study.measure import Measured, matmul_parameters, measure_model

    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = measure_model(model, config, Measured(step=0, run="bench"))
        times.append(time.perf_counter() - t)
    return statistics.median(times), matmul_parameters(model), out.tokens


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares of seconds = t0 + c x work over (work, seconds) points, weighted by 1/seconds (relative
    errors, so the smallest model counts as much as the largest)."""
    w = [1 / t ** 2 for _, t in points]
    sw, sx, sy = sum(w), sum(wi * x for wi, (x, _) in zip(w, points)), sum(wi * y for wi, (_, y) in zip(w, points))
    sxx = sum(wi * x * x for wi, (x, _) in zip(w, points))
    sxy = sum(wi * x * y for wi, (x, y) in zip(w, points))
    c = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    return (sy - c * sx) / sw, c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the small census of `mha-viz study --quick`")
    parser.add_argument("--cost-only", action="store_true", help="parts 2 and 3 only")
    args = parser.parse_args()
    import torch

    from mha_viz.models import load_model
    from mha_viz.models.tiny.adapter import load_tiny
    from mha_viz.study.command import QUICK
    from mha_viz.study.measure import config_fields

    config = QUICK if args.quick else None
    print(machine())
    print(f"\n1. A study of {', '.join(p.name for p in RUNS)} ({'quick' if args.quick else 'default'} census)")
    rows = {1: [], 2: []}
    for _ in range(0 if args.cost_only else 2):
        for w in (1, 2):
            rows[w].append(study_once(w, config))
    for w in (1, 2) if rows[1] else ():
        r = min(rows[w], key=lambda x: x["wall"])
        print(f"   {w} worker(s): wall {r['wall']:.1f} s = Ray start {r['ray']:.1f} s + first result "
              f"{r['first']:.1f} s (worker start, imports) + the rest; {r['n']} checkpoints ({r['failed']} failed), "
              f"their own seconds {r['tasks']:.1f} s, {r['workers_used']} worker process(es), file "
              f"{r['bytes'] / 1e6:.2f} MB")
    if rows[1]:
        one, two = (min(x["wall"] for x in rows[w]) for w in (1, 2))
        inside = [min(x["wall"] - x["ray"] for x in rows[w]) for w in (1, 2)]
        print(f"   speed-up with 2 workers: {one / two:.2f}x wall, {inside[0] / inside[1]:.2f}x after Ray's start")

    torch.set_num_threads(1)
    fields = config_fields(config)
    with tempfile.TemporaryDirectory() as tmp:
        big = bigger_tiny(Path(tmp) / "bigger")
        sizes = [("tiny", load_model("tiny")), ("tiny 6x8, d256", load_tiny(folder=big)),
                 ("minilm", load_model("minilm"))]
        measured = [(name, *timed_measure(m, fields)) for name, m in sizes]
    print("\n2. Cost model: seconds = t0 + c x linear-layer parameters x census tokens (one thread, median of 3)")
    points = [(p * n, t) for _, t, p, n in measured]
    t0, c = fit(points)
    for i, (name, t, p, n) in enumerate(measured):
        t0_i, c_i = fit([x for j, x in enumerate(points) if j != i])
        print(f"   {name:15s} {p / 1e6:6.2f} M params x {n:6d} tokens: {t:6.2f} s measured, {t0 + c * p * n:6.2f} s "
              f"modelled ({(t0 + c * p * n) / t - 1:+.0%}), {t0_i + c_i * p * n:6.2f} s from the other two "
              f"({(t0_i + c_i * p * n) / t - 1:+.0%})")
    one_b = t0 + c * 1e9 * 3012  # 3,012: the census of a causal LM with over 100 heads (CensusConfig.for_model)
    print(f"   t0 = {t0:.2f} s, c = {c:.3e} s per parameter-token (= {1 / c / 1e9:.2f} G parameter-tokens/s on one "
          f"thread); a 1B checkpoint (x 3,012 tokens): {one_b:.0f} s on one thread")

    minilm = sizes[2][1]
    t1 = timed_measure(minilm, fields, 2)[0]
    torch.set_num_threads(2)
    t2 = timed_measure(minilm, fields, 2)[0]
    print(f"\n3. MiniLM with 2 torch threads: {t1 / t2:.2f}x faster than with 1 (parallel efficiency "
          f"{t1 / t2 / 2:.0%})")


if __name__ == "__main__":
    main()
