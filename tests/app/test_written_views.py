"""The page on models compiled from RASP programs (written, not learned): every view opens, the Layer view shows
the program's output and the program line behind each head, switching the written previous-token head off changes
the induction program's output on the page, the census names every written head as written, and a text outside the
vocabulary or past the limit is an error that lists both."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz import load_model
from mha_viz.app import views

from helpers import APP
from page_steps import open_view

TEXT = "a b c d a b c d"


def _page(model: str, text: str = TEXT) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": model, "text": text})
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.parametrize("model", ["written-three-heads", "written-induction", "written-histogram"])
def test_every_view_opens_on_a_written_model(model):
    at = _page(model, "a b c a b c")
    for view in views.VIEWS:
        open_view(at, view)
        assert not at.error, (view, [e.value for e in at.error])


def test_the_layer_view_shows_the_program_output_and_what_wrote_each_head():
    at = _page("written-induction")
    model = load_model("written-induction")
    output = model.program_output(model.run(TEXT))
    text = " ".join(m.value for m in at.markdown)
    assert "The program's output" in text and "`d→a`" in text and output[5:] == ["b", "c", "d", "a"]
    # Where the program has no value (a token's first occurrence: nothing yet to copy), the page writes NO_VALUE
    # and says what it means, never Python's None.
    assert output[1:5] == [None] * 4 and "`a→–`" in text and "the program has no value" in text
    assert "None" not in text
    table = [t.value for t in at.table if "the program wrote" in t.value.columns][0]
    assert list(table["head"]) == ["L0 H0", "L1 H0"]
    table = table.reset_index(drop=True)
    assert "Select(indices, indices" in table["the program wrote"][0]
    assert table["source line"][1].startswith("after_earlier = rasp.Select(previous, rasp.tokens")


def test_switching_the_written_previous_token_head_off_changes_the_output_on_the_page():
    at = _page("written-induction")
    at.toggle(key="tg|written-induction|0|0").set_value(False).run()
    assert not at.exception, at.exception
    table = [d.value for d in at.dataframe if "with these heads off" in d.value.columns][0]
    assert (table["changed"] == "yes").sum() >= 3  # the repeated half no longer reads what followed
    assert any("changed at" in c.value for c in at.caption)
    assert "None" not in set(table["program output"]) | set(table["with these heads off"])


def test_the_census_names_every_written_head_as_written():
    at = _page("written-three-heads", "a b c a b c")
    open_view(at, "Census")
    at.button(key="census_run").click().run()
    assert not at.exception, at.exception
    table = [d.value for d in at.dataframe if "the census names it" in d.value.columns][0]
    assert list(table["agrees"]) == ["yes"] * 3
    names = dict(zip(table["written role"], table["the census names it"]))
    assert names["previous token"].startswith("previous token 1.00")
    assert names["same token earlier"].startswith("same token earlier 1.00")
    assert names["none the census measures"].startswith("no measured pattern explains it")


@pytest.mark.parametrize("text, words", [("a b zebra", ["zebra", "a b c d e"]),
                                         (" ".join(["a"] * 11), ["max_seq_len 10", "a b c d e"])])
def test_a_text_the_program_cannot_read_says_its_vocabulary_and_limit(text, words):
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "written-induction", "text": text})
    at.run()
    assert not at.exception, at.exception
    shown = " ".join(e.value for e in at.warning).replace("\\", "")  # markdown-escaped brackets
    assert all(w in shown for w in words), shown
