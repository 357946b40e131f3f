"""One spelling of heads, layers and tokens (app/names.py), the one the grid's payload carries, and one name per
score in the Similarity table (the glossary: one word for one measure)."""
from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from mha_viz import analysis, measures, plotting
from mha_viz.app.names import (
    distinct_labels,
    grid_names,
    head_name,
    link_heads,
    parse_head,
    parse_link_heads,
    token_label,
)
from mha_viz.web import grid_js

from helpers import APP, grid_data
from page_steps import open_view


def test_head_names_round_trip_through_the_page_and_the_link():
    for head in [(0, 0), (2, 11), (29, 8)]:
        assert parse_head(head_name(head)) == head
    assert link_heads({(2, 11), (0, 3)}) == "L0H3,L2H11"
    assert parse_link_heads("L0H3, 2.11, l1 h2,x") == ([(0, 3), (2, 11), (1, 2)], ["x"])


def test_a_token_is_written_one_way():
    assert token_label(" She") == "␣She"
    assert token_label("\n") == "↵"
    assert token_label("  ") == "␣␣"
    assert token_label("cat") == "cat"
    assert plotting.safe_label(" She") == "␣She"  # the figures write it the same way
    labels = distinct_labels(["[CLS]", "the", "cat", "the", ".", "the"])
    assert labels == ["[CLS]", "the₁", "cat", "the₃", ".", "the₅"]
    assert len(set(distinct_labels(["a₁", "a", "a"]))) == 3  # a collision with a subscripted label is resolved


def test_the_grid_gets_its_names_and_colours_from_python():
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    data = grid_data(at)
    assert data["names"] == grid_names(data["L"], data["H"])
    assert data["names"]["heads"][2][5] == "L2 H5"
    assert data["colours"]["on"] == [c for _, c in plotting.ATTN_SCALE]
    assert data["colours"]["off"] == [c for _, c in plotting.OFF_SCALE]
    source = grid_js()
    assert "#08306b" not in source and '"L" + l' not in source and "L${" not in source, \
        "no copy of the colours or the head format in JS"


def test_similarity_table_names_each_score_as_the_badges_do():
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    open_view(at, "Similarity & scores")
    config = json.loads(at.dataframe[0].proto.columns)
    labels = {column.get("label") for column in config.values() if isinstance(column, dict)}
    for name in analysis.SCORE_NAMES:  # MiniLM is an encoder: every score is shown
        assert measures.get(name).column in labels, (name, labels)


def test_a_causal_models_table_has_no_next_token_column_and_quotes_its_tokens():
    """Screenshot matrix: for tiny and SmolLM2 the table showed a "next token" column of 0% for every
    head (a causal model's token cannot look at a later one), and the ground truth wrote its tokens as 'trees'
    where the rest of the page writes “trees”."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({"model": "tiny", "text": "the old dog near the tall trees is happy ."})
    at.run()
    open_view(at, "Similarity & scores")
    frame = at.dataframe[0].value
    assert "next" not in frame.columns and "duplicate" in frame.columns, list(frame.columns)
    assert any("No \"next token\" column" in c.value for c in at.caption)
    truth = " ".join(" ".join(t.value["attention measured"]) for t in at.table)
    assert "“trees”" in truth and "'trees'" not in truth, truth
