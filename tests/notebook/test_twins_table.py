"""`mha_viz.show_twins` in a notebook: the same table as the Census view's "Written vs learned", for both written
models, as HTML that says every twin, every written head and the sentences."""
import html

import pytest

import mha_viz
from mha_viz import load_model
from mha_viz.analysis.twins import compare_twins
from mha_viz.contract import InputError
from mha_viz.models.registry import twins
from mha_viz.models.twin_records import held_out_texts


@pytest.mark.parametrize("name", ["written-induction", "written-three-heads"])
def test_show_twins_shows_the_table_for_each_written_model(name):
    tables = mha_viz.show_twins(name, n_texts=40, display=False)
    assert [c.learned for c in tables.comparisons] == twins(name) and len(twins(name)) == 3
    written = load_model(name)
    texts = held_out_texts(written, 40, 0)
    page = tables._repr_html_()
    for c in tables.comparisons:
        learned = load_model(c.learned)
        expected = compare_twins(written, learned, texts, mha_viz.head_census(written), mha_viz.head_census(learned))
        assert c.rows() == expected.rows() and c.summary() == expected.summary()
        for row in c.rows():
            for value in row.values():
                assert html.escape(str(value)) in page
        for line in c.sentences():
            assert html.escape(line) in page
    assert all(f"<td>{html.escape(c.learned)}</td>" in page for c in tables.comparisons)
    assert name in repr(tables)


def test_show_twins_of_a_model_without_twins_says_how_to_make_them():
    with pytest.raises(InputError, match="train-twin"):
        mha_viz.show_twins("written-histogram", display=False)
