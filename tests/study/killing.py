"""A study task that kills its own worker process the first time it measures a chosen step: a worker lost
mid-task, which Ray must retry. Imported by the Ray workers (the folder is on their PYTHONPATH)."""
import os
import signal
from pathlib import Path

from mha_viz.study.measure import measure


def killed_once(marker: str, step: int):
    def task(checkpoint, config, threads):
        mark = Path(marker)
        if checkpoint.step == step and not mark.exists():
            mark.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)  # mid-task: nothing is sent back
        return measure(checkpoint, config, threads)
    return task
