"""The Census view as a visitor uses it (AppTest): run the census, read the leading heads, open one in the Layer view,
give texts of one's own; and, where seeds ship, the seeds' roles. Numbers are compared with `head_census` itself."""
import pytest

from mha_viz import head_census, measures, seeds
from mha_viz.analysis.census_run import MAX_TEXTS
from mha_viz.contract import Ablation
from tests.helpers import app_at, loaded

from page_steps import layer_of, open_view


def _census_page(model="tiny"):
    at = app_at(model)
    open_view(at, "Census")
    assert not at.exception, at.exception
    return at


def _button(at, key):
    return next(b for b in at.button if b.key == key)


def _table(at, first_column: str):
    for frame in at.dataframe:
        df = frame.value
        if first_column in df.columns:
            return df
    raise AssertionError(f"no table with a {first_column!r} column")


@pytest.fixture(scope="module")
def census():
    return head_census(loaded("tiny"))


def test_the_census_runs_on_request_and_shows_what_head_census_measured(census):
    at = _census_page()
    assert any("Run the census" in b.label for b in at.button)
    _button(at, "census_run").click().run()
    assert not at.exception, at.exception
    table = _table(at, "leading head")
    rows = {r["score"]: r for r in table.to_dict("records")}
    # One glossary: every census score is shown by its registered measure's label, as the badges and the
    # Similarity table show it ("same token earlier" for the registry's `duplicate`).
    assert set(rows) == {measures.score_label(n) for n in census.names}
    assert "duplicate" in census.names and measures.get("duplicate").label in rows and "duplicate" not in rows
    for name in ("previous", "induction", "pre-verb→subject"):
        (layer, head), value = census.top(name, 1)[0]
        row = rows[measures.score_label(name)]
        assert row["leading head"] == f"L{layer} H{head}"
        assert row["its score"] == f"{value:.2f}"
        assert row["uniform"] == f"{census.uniform[name]:.2f}"
    # the names are the one rule's (`HeadCensus.named`), for every score; a tie shows each head's interval
    for name in census.names:
        named = census.named(name)
        cell = rows[measures.score_label(name)]["named heads"]
        if not named:
            assert cell.startswith("none"), (name, cell)
            continue
        assert [h.split(" (")[0].split(" ")[0:2] for h in cell.removesuffix(" (tie)").split(", ")] == \
            [[f"L{h[0]}", f"H{h[1]}"] for h, _ in named], (name, cell)
        if len(named) > 1:
            assert cell.endswith("(tie)")
            for h, v in named:
                assert f"L{h[0]} H{h[1]}" in cell and f"{v:.2f} [{float(census.low[name][h]):.2f}–" in cell, cell
    # the map's caption says the names in the census's own words
    assert any(census.naming_words(census.names[0]) in c.value for c in at.caption)
    # the map of the chosen score is census.scores itself
    maps = [c for c in at.get("plotly_chart") if '"heatmap"' in c.proto.spec]
    assert maps
    # the in-context check says what "off" meant in each meaning's own words, every meaning the census measured
    note = next(c.value for c in at.caption if "Switched off:" in c.value)
    assert set(census.in_context.others_lost) == {off.key for off in Ablation.kinds()}
    for off in Ablation.kinds():
        assert f"{off.adjective}, its output {off.describe}" in note
    # a second visit is instant: the census is kept, no button
    at.run()
    assert not any(b.key == "census_run" for b in at.button)


def test_a_head_opens_in_the_layer_view(census):
    at = _census_page()
    if any(b.key == "census_run" for b in at.button):
        _button(at, "census_run").click().run()
    (layer, head), _ = census.top("induction", 1)[0]
    at.selectbox(key="census_head").set_value((layer, head)).run()
    _button(at, "census_open").click().run()
    assert not at.exception, at.exception
    assert at.session_state["view"] == "Layer"
    assert layer_of(at, "tiny") == layer


def test_own_texts_are_used_and_too_many_are_refused():
    at = _census_page()
    at.text_area(key="census_texts").set_value("one two three four five six\nthe cat sees the dog").run()
    _button(at, "census_run").click().run()
    assert not at.exception, at.exception
    assert any("2 texts" in m.value for m in at.markdown)
    at.text_area(key="census_texts").set_value("\n".join(["a b c"] * (MAX_TEXTS + 1))).run()
    assert any("at most" in e.value for e in at.error)


@pytest.mark.skipif(len(seeds("tiny")) < 2, reason="no extra training seeds shipped")
def test_seeds_side_by_side_say_which_head_holds_each_role():
    at = _census_page()
    if any(b.key == "census_run" for b in at.button):
        _button(at, "census_run").click().run()
    _button(at, "census_seeds").click().run()
    assert not at.exception, at.exception
    rows = at.table[-1].value.to_dict("records")
    assert [r["model"] for r in rows] == seeds("tiny")
    for row in rows:
        # every seed has a previous-token and an induction head, and the induction head sits in a later layer than
        # the previous-token head it composes with (Olsson et al. 2022's two-head circuit)
        assert not row["previous token"].startswith("none") and not row["induction"].startswith("none")
        assert int(row["induction"][1]) > int(row["previous token"][1])
    assert any("previous token pattern leads" in m.value for m in at.markdown)
