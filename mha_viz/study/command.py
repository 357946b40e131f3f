"""`mha-viz study RUN_DIR [RUN_DIR ...] --out STUDY.duckdb [--ray ADDRESS] [--workers N] [--quick]`.

Exit status: 0 when every checkpoint was measured (or already was), 1 when some failed (each is in the file with its
reason), 2 for input it cannot use (each said in one line), 130 when stopped with Ctrl-C (what was written stays).
"""
from __future__ import annotations

import argparse
import errno
import sys

from mha_viz.analysis.census_run import CensusConfig
from mha_viz.contract import InputError

# The census at a small size: a study of many checkpoints in minutes where a trend matters more than tight
# intervals (and the tests' size). None, the default, is the census's own size for each model.
QUICK = CensusConfig(n_random=6, random_length=16, n_repeated=6, n_templates=12, n_loss=2, n_other_sets=1, n_boot=50)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mha-viz study", description="Measure every checkpoint of one or more training "
                                "runs with the head census and the circuits' composition scores, in parallel on "
                                "Ray, into one DuckDB file that the Training view opens. Run it again to measure "
                                "only what is new.")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                   help="a run's folder: checkpoint-N/ (transformers' Trainer), checkpoints/step-N.safetensors "
                        "(the tiny trainer) or model folders named by step")
    p.add_argument("--out", required=True, metavar="STUDY.duckdb", help="the study file (created, or continued)")
    p.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="an existing Ray cluster (HOST:PORT, ray://HOST:10001, auto); default: a local Ray started "
                        "here")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="checkpoints measured at once (default: the cluster's CPUs)")
    p.add_argument("--quick", action="store_true", help="a smaller census (fewer inputs, 50 resamples)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.workers is not None and args.workers < 1:
        print("mha-viz study: --workers must be at least 1", file=sys.stderr)
        return 2
    from mha_viz.study.runner import print_progress, run_study

    try:
        summary = run_study(args.run_dirs, args.out, ray_address=args.ray, workers=args.workers,
                            config=QUICK if args.quick else None, progress=print_progress)
    except InputError as err:  # no checkpoints, a newer study file, an address that does not answer, no ray
        print(f"mha-viz study: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nmha-viz study: stopped; every checkpoint written to {args.out} is kept whole: run the same "
              "command again to go on", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - a disk that fills shows up as OSError or as duckdb's own error
        if _disk_full(err):
            print(f"mha-viz study: the disk holding {args.out} is full; the file keeps every checkpoint written "
                  "before it filled: free space and run the same command again", file=sys.stderr)
            return 2
        raise
    for run, step, reason in summary.errors:
        print(f"mha-viz study: {run} step {step} failed: {reason}", file=sys.stderr)
    print(f"{summary.measured} checkpoints measured ({summary.failed} failed), {summary.skipped} already in "
          f"{summary.out}, in {summary.seconds:.1f} s on {summary.workers} workers; open it in the Training view")
    return 1 if summary.failed else 0


def _disk_full(err: BaseException) -> bool:
    if isinstance(err, OSError) and err.errno == errno.ENOSPC:
        return True
    text = str(err).lower()
    return "no space left" in text or "disk is full" in text or "enospc" in text
