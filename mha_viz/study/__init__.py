"""Studies: every checkpoint of one or more training runs measured with the head census and the circuits'
composition scores, one checkpoint per Ray task, into one DuckDB file per study (docs/scale.md).

    find      the checkpoints of a run folder (Trainer checkpoint-N/, tiny's step files, model folders by step)
    measure   one checkpoint loaded and measured: what a Ray task runs
    store     the study file: its tables, one transaction per checkpoint, read back for the Training view
    runner    the study on Ray: skip what is kept, measure the rest, the progress line, faults
    command   `mha-viz study ...`: its arguments, its one-line errors and exit status

The layer of a command: it imports models and analysis, and only the app imports it (the Training view reads study
files through `store`). ray and duckdb (`pip install 'mha-viz[scale]'`) are imported when a study runs or a file is
opened, never on import.

`mha_viz.study(run_dirs, out, ...)` runs a study: this module is callable, as `run_study`.
"""
import sys
import types

from mha_viz.study.command import main
from mha_viz.study.runner import StudySummary, run_study
from mha_viz.study.store import StudyFileError, read_study


class _CallableModule(types.ModuleType):
    def __call__(self, run_dirs, out, ray_address=None, workers=None, config=None, progress=None) -> StudySummary:
        """`mha_viz.study([RUN_DIR, ...], "STUDY.duckdb")`: `run_study`, whose docstring says what each argument
        means."""
        if isinstance(run_dirs, (str, bytes)) or hasattr(run_dirs, "__fspath__"):
            run_dirs = [run_dirs]
        return run_study(list(run_dirs), out, ray_address=ray_address, workers=workers, config=config,
                         progress=progress)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["StudyFileError", "StudySummary", "main", "read_study", "run_study"]
