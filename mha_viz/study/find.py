"""The checkpoints of one training run, found on disk, and the digest of each one's weights.

Three layouts are read, in this order:

    trainer   RUN_DIR/checkpoint-N/           transformers' Trainer (`output_dir`); each folder is a model folder
    steps     RUN_DIR/checkpoints/step-N.safetensors beside RUN_DIR/config.json   the tiny trainer's (and its seeds')
    folders   RUN_DIR/<name ending in a number>/  a folder of model folders, the step read from each name's digits

A model folder holds weights (*.safetensors or pytorch_model*.bin) and a config.json: either a transformers config
(loaded by `load_model(folder)`) or the tiny stack's (config.json + vocab.json, loaded by `load_tiny`).
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from mha_viz.contract import InputError

TRAINER = re.compile(r"^checkpoint-(\d+)$")
STEP_FILE = re.compile(r"^step-(\d+)\.safetensors$")
TRAILING = re.compile(r"(\d+)$")
WEIGHTS = ("*.safetensors", "pytorch_model*.bin")
CHUNK = 1 << 22  # 4 MiB per read while hashing: a 1B model's 4 GB hash in a few seconds, never held whole


@dataclass(frozen=True)
class Checkpoint:
    """One saved step of one run: where its weights are and how to load them."""
    run: str  # the run's name in the study (its folder's name, made unique)
    step: int
    path: str  # the model folder, or the step file
    layout: str  # "trainer", "steps" or "folders"
    # What `load_model` takes to open this checkpoint in the app ("tiny@800", "tiny#seed1@800", a folder), or ""
    # where only the study can load it (a tiny-style run outside assets/).
    model_name: str = ""

    def weight_files(self) -> list[Path]:
        path = Path(self.path)
        if path.is_file():
            return [path]
        return sorted(f for pattern in WEIGHTS for f in path.glob(pattern))


def digest(checkpoint: Checkpoint) -> str:
    """sha256 over the checkpoint's weight files (names and bytes, in name order): what a rerun compares to skip a
    checkpoint already measured. "" when there are no weight files (the load will say why)."""
    h = hashlib.sha256()
    files = checkpoint.weight_files()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(CHUNK):
                h.update(chunk)
    return h.hexdigest() if files else ""


def _is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() or any(next(folder.glob(p), None) for p in WEIGHTS)


def is_tiny_folder(folder: str | Path) -> bool:
    """A folder of the tiny stack (its config.json and vocab.json, no transformers `model_type`)."""
    folder = Path(folder)
    try:
        return (folder / "vocab.json").is_file() and '"model_type"' not in (folder / "config.json").read_text()
    except OSError:
        return False


def _app_name(folder: Path) -> str:
    """A model folder opens in the app by its path (`load_model(folder)`), except the tiny stack's, which only the
    study loads."""
    return "" if is_tiny_folder(folder) else str(folder.resolve())


def _shipped_name(run_dir: Path, step: int) -> str:
    """tiny's own checkpoints (and its seeds') have a registry name the app opens; others do not."""
    from mha_viz.models.tiny.train import SEEDS_DIR, TINY_ASSETS

    try:
        here, tiny = run_dir.resolve(), TINY_ASSETS.resolve()
    except OSError:
        return ""
    if here == tiny:
        return f"tiny@{step}"
    if here.parent == tiny / SEEDS_DIR and here.name.removeprefix("seed").isdigit():
        return f"tiny#seed{int(here.name.removeprefix('seed'))}@{step}"
    return ""


def find_checkpoints(run_dir: str | Path, run: str | None = None) -> list[Checkpoint]:
    """Every checkpoint of the run in `run_dir`, by step. Raises InputError, naming the layouts looked for, when
    the folder holds none."""
    folder = Path(run_dir)
    run = run or folder.resolve().name
    if not folder.is_dir():
        raise InputError(f"{run_dir} is not a folder: give a training run's output folder (checkpoint-N/ inside, "
                         "or checkpoints/step-N.safetensors, or model folders named by step)")
    found = []
    for sub in sorted(folder.iterdir()):
        m = TRAINER.match(sub.name)
        if m and sub.is_dir():
            found.append(Checkpoint(run, int(m.group(1)), str(sub), "trainer", _app_name(sub)))
    if found:
        return sorted(found, key=lambda c: c.step)
    steps = folder / "checkpoints"
    if steps.is_dir() and (folder / "config.json").is_file():
        from mha_viz.models.tiny.adapter import checkpoint_steps

        # The tiny trainer's steps, the two it derives rather than stores included (step 0 and the last): the
        # path names the step's file, which `measure` hands to load_tiny as a folder and a step.
        for step in checkpoint_steps(folder):
            found.append(Checkpoint(run, step, str(steps / f"step-{step:06d}.safetensors"), "steps",
                                    _shipped_name(folder, step)))
    if found:
        return sorted(found, key=lambda c: c.step)
    for sub in sorted(folder.iterdir()):
        m = TRAILING.search(sub.name)
        if m and sub.is_dir() and _is_model_folder(sub):
            found.append(Checkpoint(run, int(m.group(1)), str(sub), "folders", _app_name(sub)))
    if len({c.step for c in found}) < len(found):
        raise InputError(f"{run_dir}: two model folders end in the same number, so their steps are ambiguous; "
                         "rename them by step (step-500, step-1000)")
    if not found:
        raise InputError(f"{run_dir} holds no checkpoints: looked for checkpoint-N/ folders (transformers' "
                         "Trainer), checkpoints/step-N.safetensors beside a config.json (the tiny trainer), and "
                         "model folders whose names end in their step")
    return sorted(found, key=lambda c: c.step)


def run_names(run_dirs: list[str | Path]) -> list[str]:
    """A name per run folder: its own name, with its parent's in front where two runs share a name
    (a/checkpoints, b/checkpoints -> a/checkpoints, b/checkpoints)."""
    paths = [Path(d).resolve() for d in run_dirs]
    names = [p.name for p in paths]
    for i, p in enumerate(paths):
        if names.count(p.name) > 1:
            names[i] = f"{p.parent.name}/{p.name}"
    if len(set(names)) < len(names):
        raise InputError("two RUN_DIRs name the same folder: give each run once")
    return names
