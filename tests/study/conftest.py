"""The study tests: a local Ray (2 CPUs, no dashboard) started once for the folder, and a small run trained here in
transformers' Trainer layout (checkpoint-N/ folders of the tiny stack), with a damaged checkpoint among them."""
import shutil
from pathlib import Path

import pytest
from study_run import DAMAGED, HERE, ROOT, STEPS  # noqa: F401


def pytest_configure(config):
    config.addinivalue_line("markers", "study: tests/study, checkpoints measured on a local Ray into DuckDB")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.study)


@pytest.fixture(scope="session")
def local_ray():
    ray = pytest.importorskip("ray")
    pytest.importorskip("duckdb")
    from mha_viz.study.runner import worker_path

    # The workers import mha_viz from the checkout and the tests' task wrappers (killing.py) from this folder.
    with worker_path(str(ROOT), str(HERE)):
        ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def trainer_run(tmp_path_factory) -> Path:
    """tiny's recipe at a small size trained 16 steps, saved every 4 as checkpoint-N/ (config.json, vocab.json,
    model.safetensors), and checkpoint-20/ with a truncated weights file."""
    from mha_viz.models.tiny.architecture import TinyConfig
    from mha_viz.models.tiny.train import TrainConfig, checkpoint_path, train

    work = tmp_path_factory.mktemp("tiny-run")
    train(work, TinyConfig(n_layers=2, n_heads=2, d_model=32, d_mlp=64, max_len=32, train_margin=0),
          TrainConfig(steps=STEPS[-1], batch_size=8, n_texts=200, warmup=2, checkpoints=STEPS, log_every=4),
          quiet=True)
    run = tmp_path_factory.mktemp("output_dir")
    for step in STEPS + (DAMAGED,):
        folder = run / f"checkpoint-{step}"
        folder.mkdir()
        for name in ("config.json", "vocab.json"):
            shutil.copy(work / name, folder / name)
        (folder / "trainer_state.json").write_text('{"global_step": %d}' % step)
        if step == DAMAGED:
            data = checkpoint_path(work, STEPS[-1]).read_bytes()
            (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
        else:
            shutil.copy(checkpoint_path(work, step), folder / "model.safetensors")
    return run


@pytest.fixture(scope="session")
def measured(local_ray, trainer_run, tmp_path_factory):
    """The trainer run studied once: (the study file, the summary, every progress line). Tests that change the file
    work on a copy."""
    from test_study import SMALL

    from mha_viz.study import run_study

    out = tmp_path_factory.mktemp("study") / "study.duckdb"
    lines = []
    summary = run_study([trainer_run], out, config=SMALL, progress=lambda p: lines.append(p.line()))
    return out, summary, lines
