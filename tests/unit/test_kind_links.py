"""A link names a head of an encoder-decoder model as the page does ("Cross L0 H3"), reads the links written before
the kinds (the one set's index, "L12H3"), and a kind is read in any case (web/kinds.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from mha_viz.contract import InputError
from mha_viz.web import kinds


class _Seq2Seq:
    """What web/kinds reads of a model: 2 encoder layers, 3 decoder layers, cross-attention."""
    has_cross_attention = True
    info = SimpleNamespace(n_layers=2, name="bart-test")

    def decoder_layers(self) -> int:
        return 3


class _OneStack:
    has_cross_attention = False
    info = SimpleNamespace(n_layers=4, name="tiny")


def test_heads_of_every_kind_are_written_as_the_page_names_them():
    model = _Seq2Seq()  # the one set: encoder 0-1, decoder 2-4, cross 5-7
    assert kinds.set_link_heads(model, {(5, 3), (0, 1), (3, 2)}) == "Encoder L0 H1,Decoder L1 H2,Cross L0 H3"
    assert kinds.set_link_heads(_OneStack(), {(0, 1), (2, 11)}) == "L0H1,L2H11"


def test_either_spelling_opens_and_a_layer_past_its_kind_does_not_exist():
    model = _Seq2Seq()
    assert kinds.parse_set_link_heads(model, "Cross L0 H3,decoder l1h2, cross L2 H0") == ([(5, 3), (3, 2), (7, 0)], [])
    assert kinds.parse_set_link_heads(model, "L5H3") == ([(5, 3)], [])  # an old link: the one set's index
    assert kinds.parse_set_link_heads(model, "Cross L3 H0") == ([(-1, 0)], [])  # cross has layers 0-2
    assert kinds.parse_set_link_heads(model, "Sideways L0 H1,Cross x") == ([], ["Sideways L0 H1", "Cross x"])
    heads = {(0, 1), (4, 0), (6, 2)}
    assert set(kinds.parse_set_link_heads(model, kinds.set_link_heads(model, heads))[0]) == heads


def test_a_kind_is_read_in_any_case_and_a_wrong_one_names_the_kinds():
    model = _Seq2Seq()
    assert [kinds.check_kind(model, k) for k in ("cross", "DECODER", " Encoder ")] == ["Cross", "Decoder", "Encoder"]
    with pytest.raises(InputError, match="its kinds are Encoder, Decoder, Cross") as err:
        kinds.check_kind(model, "sideways")
    assert "one self-attention stack" not in str(err.value)
    with pytest.raises(InputError, match="one self-attention stack"):
        kinds.check_kind(_OneStack(), "Cross")
