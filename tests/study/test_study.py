"""A study of a run trained here (conftest.trainer_run: five checkpoints in the Trainer layout and a damaged one), on a
local Ray with 2 CPUs: its rows against a census and circuits run directly on each checkpoint, a damaged checkpoint
recorded and passed over, a worker killed mid-task retried, a study stopped and resumed without losing or
repeating a checkpoint, and the command's one-line refusals."""
import math
import shutil
import socket
import subprocess
import sys
import time

import pytest
from killing import killed_once
from study_run import DAMAGED, ROOT, STEPS

from mha_viz.analysis.census_run import CensusConfig
from mha_viz.study import main, read_study, run_study
from mha_viz.study.find import find_checkpoints
from mha_viz.study.measure import CONTROL, COPYING, load_checkpoint
from mha_viz.study.store import SCHEMA_VERSION, StudyFileError, connect

SMALL = CensusConfig(n_random=4, random_length=12, n_repeated=4, repeated_lengths=(4, 8), n_templates=6, n_loss=2,
                     n_other_sets=1, n_boot=20)


def _direct(checkpoint):
    """The census and circuits of one checkpoint, run here without Ray or DuckDB."""
    from mha_viz import circuits, head_census

    model = load_checkpoint(checkpoint)
    return head_census(model, config=SMALL, control=CONTROL), circuits(model)


def _close(a, b) -> bool:
    if a is None or b is None or (isinstance(a, float) and math.isnan(a)):
        return (a is None or math.isnan(a)) and (b is None or (isinstance(b, float) and math.isnan(b)))
    return abs(float(a) - float(b)) < 1e-5


def assert_rows_match_a_direct_census(tables, run_dir, steps=STEPS):
    heads, comp = tables.heads, tables.composition
    for ck in find_checkpoints(run_dir):
        if ck.step not in steps:
            continue
        census, circ = _direct(ck)
        rows = heads[(heads.step == ck.step) & (heads.run == ck.run)]
        assert set(rows.score) == set(census.names) | {COPYING}
        for score in census.names:
            got = rows[rows.score == score].sort_values(["layer", "head"])
            assert len(got) == census.n_layers * census.n_heads
            named = {lh for lh, _ in census.named(score)}
            for r in got.itertuples():
                lh = (r.layer, r.head)
                assert _close(r.value, float(census.scores[score][lh])), (ck.step, score, lh)
                assert _close(r.low, float(census.low[score][lh])) and _close(r.high, float(census.high[score][lh]))
                if score in census.control:
                    assert _close(r.control, float(census.control[score][lh]))
                else:
                    assert r.control is None or math.isnan(r.control)
                assert bool(r.named) == (lh in named), (ck.step, score, lh)
        k = comp[(comp.step == ck.step) & (comp["mode"] == "k")]
        for r in k.itertuples():
            assert _close(r.value, float(circ.composition["k"][r.from_layer, r.from_head, r.to_layer, r.to_head]))
        assert len(k) == int(circ.composition["k"].isfinite().sum()) > 0


def test_a_trainer_run_with_a_damaged_checkpoint_matches_a_direct_census(measured, trainer_run, tmp_path):
    out = tmp_path / "study.duckdb"
    shutil.copy(measured[0], out)
    summary, lines = measured[1], measured[2]
    assert (summary.measured, summary.failed, summary.skipped) == (len(STEPS) + 1, 1, 0)
    tables = read_study(out)
    cks = tables.checkpoints.set_index("step")
    assert list(cks.index) == [*STEPS, DAMAGED]
    assert set(cks.loc[list(STEPS), "status"]) == {"done"}
    bad = cks.loc[DAMAGED]
    assert bad.status == "failed" and "\n" not in bad.error and bad.error, bad.error
    assert not (tables.heads.step == DAMAGED).any()
    assert all(len(d) == 64 for d in cks.digest)  # sha256 of the weights
    assert_rows_match_a_direct_census(tables, trainer_run)
    assert lines[0].startswith(f"study: 0 done, 0 failed, {len(STEPS) + 1} left")
    assert lines[-1].startswith(f"study: {len(STEPS)} done, 1 failed, 0 left")

    # Run again: nothing is measured; a new checkpoint is, alone; a changed one is measured again.
    again = run_study([trainer_run], out, config=SMALL)
    assert (again.measured, again.skipped) == (0, len(STEPS) + 1)
    shutil.copytree(trainer_run / f"checkpoint-{STEPS[-1]}", trainer_run / "checkpoint-99")
    try:
        new = run_study([trainer_run], out)  # no size given: the file's own
        assert (new.measured, new.skipped) == (1, len(STEPS) + 1)
        assert sorted(read_study(out).checkpoints.step) == [*STEPS, DAMAGED, 99]
    finally:
        shutil.rmtree(trainer_run / "checkpoint-99")
    # A checkpoint whose weights changed (a run that overwrote it) is measured again, its old rows replaced.
    changed = tmp_path / "changed"
    shutil.copytree(trainer_run, changed)
    shutil.copy(changed / f"checkpoint-{STEPS[1]}" / "model.safetensors",
                changed / f"checkpoint-{STEPS[2]}" / "model.safetensors")
    shutil.copy(out, tmp_path / "changed.duckdb")
    con = connect(tmp_path / "changed.duckdb")
    con.execute("UPDATE runs SET run = ? ", [changed.name])  # the copy's run is the same run under its new name
    for table in ("checkpoints", "heads", "composition"):
        con.execute(f"UPDATE {table} SET run = ?", [changed.name])
    con.close()
    redo = run_study([changed], tmp_path / "changed.duckdb")
    assert (redo.measured, redo.skipped) == (1, len(STEPS))
    tables = read_study(tmp_path / "changed.duckdb")
    heads = tables.heads
    assert len(heads[heads.step == STEPS[2]]) == len(heads[heads.step == STEPS[1]])  # replaced, not added to
    cols = ["layer", "head", "score", "value"]
    same = heads[heads.step == STEPS[2]][cols].reset_index(drop=True)
    assert same.equals(heads[heads.step == STEPS[1]][cols].reset_index(drop=True))  # now the same weights
    with pytest.raises(StudyFileError, match="measured with census"):
        run_study([trainer_run], out, config=CensusConfig())


def test_a_worker_killed_mid_task_is_retried(local_ray, trainer_run, tmp_path):
    marker, out = tmp_path / "killed", tmp_path / "study.duckdb"
    summary = run_study([trainer_run], out, config=SMALL, task=killed_once(str(marker), STEPS[2]))
    assert marker.exists(), "the task never killed its worker"
    assert (summary.measured, summary.failed) == (len(STEPS) + 1, 1)  # only the damaged one failed
    tables = read_study(out)
    row = tables.checkpoints.set_index("step").loc[STEPS[2]]
    assert row.status == "done" and int(row.worker) != int(marker.read_text())  # measured by another process
    assert_rows_match_a_direct_census(tables, trainer_run, steps=(STEPS[2],))


def test_a_study_stopped_and_started_again_loses_nothing_and_repeats_nothing(local_ray, trainer_run, tmp_path):
    out = tmp_path / "study.duckdb"

    def stop_after_two(p):
        if p.done + p.failed == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_study([trainer_run], out, config=SMALL, progress=stop_after_two, workers=1)
    first = read_study(out)
    kept = first.checkpoints[["run", "step", "digest", "worker", "measured_at"]]
    assert len(kept) == 2
    per_step = first.heads.groupby("step").size()
    assert set(per_step.index) <= set(kept.step) and per_step.nunique() <= 1  # each kept checkpoint whole

    summary = run_study([trainer_run], out)
    assert (summary.skipped, summary.measured) == (2, len(STEPS) + 1 - 2)
    after = read_study(out)
    assert len(after.checkpoints) == len(STEPS) + 1
    again = after.checkpoints.merge(kept, on=["run", "step"], suffixes=("", "_before"))
    assert (again.measured_at == again.measured_at_before).all()  # the two kept were not measured again
    assert not after.heads.duplicated(["run", "step", "layer", "head", "score"]).any()
    assert_rows_match_a_direct_census(after, trainer_run)


def test_the_command_refuses_bad_input_in_one_line(local_ray, trainer_run, tmp_path, capsys, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([str(empty), "--out", str(tmp_path / "a.duckdb")]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds no checkpoints" in err and len(err.splitlines()) == 1
    import mha_viz.study
    from mha_viz.contract import InputError

    with pytest.raises(InputError, match="holds no checkpoints"):  # mha_viz.study(...) is the same study
        mha_viz.study(empty, tmp_path / "a.duckdb")

    newer = tmp_path / "newer.duckdb"
    con = connect(newer)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    con.close()
    assert main([str(trainer_run), "--out", str(newer)]) == 2
    err = capsys.readouterr().err.strip()
    assert "newer mha-viz" in err and len(err.splitlines()) == 1

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setattr(local_ray, "is_initialized", lambda: False)  # as a fresh process would see it
    start = time.perf_counter()
    assert main([str(trainer_run), "--out", str(tmp_path / "b.duckdb"), "--ray", f"127.0.0.1:{port}"]) == 2
    assert time.perf_counter() - start < 30
    err = capsys.readouterr().err.strip()
    assert "does not answer" in err and len(err.splitlines()) == 1
    monkeypatch.undo()

    from mha_viz.study import store

    full = tmp_path / "full.duckdb"
    real_write, calls = store.write, []

    def fills_after_one(con, checkpoint, digest, result):
        if calls:
            raise OSError(28, "No space left on device")
        calls.append(checkpoint.step)
        real_write(con, checkpoint, digest, result)

    monkeypatch.setattr(store, "write", fills_after_one)
    assert main([str(trainer_run), "--out", str(full), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "is full" in err[-1]
    monkeypatch.undo()
    assert len(read_study(full).checkpoints) == 1  # what was written before the disk filled is whole


def test_the_app_starts_without_ray_or_duckdb():
    code = ("import sys; import mha_viz.app.views.training, mha_viz.study; "
            "assert 'ray' not in sys.modules and 'duckdb' not in sys.modules, sorted(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_mha_viz_study_is_the_callable_study_module_without_loading_ray():
    """`mha_viz.study(run_dirs, out)` as the package's docstring promises, read through the package root."""
    code = ("import sys, mha_viz; assert callable(mha_viz.study) and mha_viz.study.run_study; "
            "assert 'ray' not in sys.modules and 'duckdb' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
