"""The Training view opens a study file (conftest.measured): each head's score against the step per run, the step
each named head forms at, the failed checkpoint with its reason, and a link that opens a checkpoint the app can load
in the Layer view. tiny's own timeline stays the default."""
import json
import shutil
from urllib.parse import parse_qs

import duckdb
from streamlit.testing.v1 import AppTest

from mha_viz.app.views.training import SOURCE_KEY, STUDY_PATH_KEY, STUDY_SCORE_KEY, STUDY_SOURCE
from mha_viz.study import read_study
from mha_viz.study.timeline import formation

from helpers import APP


def _open_study(path) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "tiny", "view": "Training", "layer": "0"})
    at.run()
    assert not at.exception, at.exception
    assert at.radio(key=SOURCE_KEY).value != STUDY_SOURCE  # tiny's shipped timeline by default
    at.radio(key=SOURCE_KEY).set_value(STUDY_SOURCE).run()
    at.text_input(key=STUDY_PATH_KEY).set_value(str(path)).run()
    assert not at.exception, at.exception
    return at


def test_the_training_view_draws_a_study_file(measured, tmp_path):
    out = tmp_path / "study.duckdb"
    shutil.copy(measured[0], out)
    con = duckdb.connect(str(out))
    con.execute("UPDATE checkpoints SET model_name = 'tiny@800' WHERE step = 8")  # as a study of tiny's own says
    con.close()
    tables = read_study(out)
    at = _open_study(out)
    assert at.selectbox(key=STUDY_SCORE_KEY).value == "induction"
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    run = tables.checkpoints["run"][0]
    h = tables.heads[(tables.heads.score == "induction") & (tables.heads.layer == 1) & (tables.heads["head"] == 0)]
    line = next(t for t in spec["data"] if t["name"] == f"{run}: L1 H0")
    assert [float(v) for v in line["y"]] == [float(v) for v in h.sort_values("step")["value"]]
    text = " ".join(str(c.value) for c in at.caption)
    assert "5 checkpoint(s) measured, 1 failed" in text
    failed = [t.value for t in at.table if "why" in t.value.columns]
    assert failed and "SafetensorError" in str(failed[0]["why"].iloc[0])
    rows = formation(tables, "induction")
    if rows:
        shown = [t.value for t in at.table if "forms at step" in t.value.columns][0]
        assert list(shown["head"]) == [r["head"] for r in rows]
    at.selectbox(key="train_study_open").set_value(f"{run} @ step 8").run()
    link = at.get("link_button")[0].proto
    assert parse_qs(link.url.lstrip("?")) == {"model": ["tiny@800"], "view": ["Layer"]}


def test_a_file_that_is_no_study_is_one_warning(tmp_path):
    bad = tmp_path / "not.duckdb"
    bad.write_text("hello")
    at = _open_study(bad)
    assert len(at.warning) == 1 and "not a study file" in at.warning[0].value


def test_tiny_and_its_seeds_ship_as_a_study_the_view_opens_first():
    from mha_viz.app.views.training import SHIPPED_STUDY

    tables = read_study(SHIPPED_STUDY)
    assert set(tables.checkpoints["run"]) == {"tiny", "seed1", "seed2", "seed3"}
    assert set(tables.checkpoints["status"]) == {"done"} and SHIPPED_STUDY.stat().st_size < 1_000_000
    assert set(tables.checkpoints["model_name"]) >= {"tiny@4000", "tiny#seed1@800"}  # each opens in the app
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "tiny", "view": "Training", "layer": "0"})
    at.run()
    at.radio(key=SOURCE_KEY).set_value(STUDY_SOURCE).run()
    assert not at.exception, at.exception
    assert at.text_input(key=STUDY_PATH_KEY).value == str(SHIPPED_STUDY)
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert {t["name"].split(":")[0] for t in spec["data"]} == {"tiny", "seed1", "seed2", "seed3"}
    assert [t.value for t in at.table if "forms at step" in t.value.columns]  # induction heads form in every run
