"""The Census view's "Written vs learned" part, as a visitor uses it: on each written model, run the census, ask for
the learned twins, and read the table; its numbers are `compare_twins`'s own on the same inputs and censuses. A
twin opens in every view like the written model."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz import head_census, load_model
from mha_viz.analysis.twins import compare_twins
from mha_viz.app import views
from mha_viz.app.views.census import TWIN_TEXTS
from mha_viz.models.registry import twins
from mha_viz.models.twin_records import held_out_texts

from helpers import APP
from page_steps import open_view

# An input seed no other test uses: the censuses and comparisons are kept for the whole process, and a census this
# module made at seed 0 would take another test's "Run the census" button away.
SEED = 7


def _census_page(model: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": model, "text": "a b c a b c"})
    at.run()
    open_view(at, "Census")
    at.number_input(key="census_seed").set_value(SEED).run()
    if any(b.key == "census_run" for b in at.button):  # another test in this process may have made it already
        at.button(key="census_run").click().run()
    assert not at.exception, at.exception
    return at


def _frames(at, column: str):
    return [d.value.reset_index(drop=True) for d in at.dataframe if column in d.value.columns]


@pytest.mark.parametrize("model", ["written-induction", "written-three-heads"])
def test_the_census_sets_each_written_head_beside_its_learned_twins(model):
    at = _census_page(model)
    assert any("Written vs learned" in m.value for m in at.markdown)
    if any(b.key == "census_twins" for b in at.button):
        at.button(key="census_twins").click().run()
    assert not at.exception, at.exception
    names = twins(model)
    (summary,) = _frames(at, "twin")
    assert list(summary["twin"]) == names
    per_twin = _frames(at, "best-matching learned head(s)")
    assert len(per_twin) == len(names)
    written = load_model(model)
    texts = held_out_texts(written, TWIN_TEXTS, SEED)
    cw = head_census(written, seed=SEED)
    for name, table in zip(names, per_twin):
        learned = load_model(name)
        expected = compare_twins(written, learned, texts, cw, head_census(learned, seed=SEED))
        assert table.to_dict("records") == expected.rows()
        row = summary[summary["twin"] == name].iloc[0]
        assert row["held-out accuracy"] == f"{100 * expected.accuracy_learned:.1f}%"
        assert row["as clean as written"] == ("yes" if expected.clean else "no")
        said = " ".join(m.value for m in at.markdown)
        assert expected.sentences()[0].split(",")[0] in said.replace("\\", "")
    # the written induction path, measured on every shipped seed
    if model == "written-induction":
        assert set(summary["written path"]) == {"yes"}


def test_a_program_without_a_twin_says_why():
    at = _census_page("written-histogram")
    caps = " ".join(c.value for c in at.caption)
    assert "No learned twin of this program ships: the program is not causal" in caps
    assert not any(b.key == "census_twins" for b in at.button)


def test_every_view_opens_on_a_learned_twin():
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "learned-induction", "text": "a b c a b c"})
    at.run()
    assert not at.exception, at.exception
    for view in views.VIEWS:
        open_view(at, view)
        assert not at.exception, (view, at.exception)
        assert not at.error, (view, [e.value for e in at.error])


def test_a_learned_twins_census_sets_its_seeds_side_by_side():
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "learned-induction", "text": "a b c a b c"})
    at.run()
    open_view(at, "Census")
    at.number_input(key="census_seed").set_value(SEED).run()
    if any(b.key == "census_run" for b in at.button):  # another test may have made this census already
        at.button(key="census_run").click().run()
    if any(b.key == "census_seeds" for b in at.button):
        at.button(key="census_seeds").click().run()
    assert not at.exception, at.exception
    table = [t.value for t in at.table if "model" in t.value.columns][0]
    assert list(table["model"]) == twins("written-induction")
    # the roles a program's vocabulary can measure; the subject needs template sentences it has none of
    assert {"previous token", "induction"} <= set(table.columns) and "subject" not in table.columns


def test_the_layer_view_says_a_twin_reads_out_the_program_but_was_not_written():
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "learned-induction", "text": "a b c a b c"})
    at.run()
    assert not at.exception, at.exception
    said = " ".join(m.value for m in at.markdown)
    model = load_model("learned-induction")
    out = model.program_output(model.run("a b c a b c"))
    assert "as this learned model reads it out" in said and "`c→" + out[-1] + "`" in said.replace("\\\\", "")
    assert not any("Written, not learned" in c.value for c in at.caption)
    assert any("Learned, not written" in c.value for c in at.caption)
