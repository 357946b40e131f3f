"""The compiled bridge names a written head by the registry's own definitions (mha_viz.measures): the selection the
program wrote, as the compiled head attends (BOS at position 0, read where nothing is selected), is read by each
registered measure the census names heads by, so every role the census can name is one the bridge can write."""
from __future__ import annotations

import os

import pytest

if not os.environ.get("CI"):  # in CI (make test installs requirements-compile.txt) a missing Tracr must fail
    pytest.importorskip("tracr", reason="these tests compile programs (make test installs requirements-compile.txt)")

from tracr.compiler import lib  # noqa: E402
from tracr.rasp import rasp  # noqa: E402

from mha_viz import measures  # noqa: E402
from mha_viz.models.compiled import tracr_bridge as B  # noqa: E402

VOCAB, N = {"a", "b", "c", "."}, 8


def _role(rule, causal=True):
    """name_role of a hand-made selection: rule(items, key, query) -> selected."""
    def select(items):
        return [[rule(items, k, q) for k in range(len(items))] for q in range(len(items))]
    return B.name_role(select, B.samples(VOCAB, N), causal)


SELECTIONS = {  # one selection per role the census can name, each what the measure reads and nothing else
    "previous": lambda it, k, q: k == q - 1,
    "nearby": lambda it, k, q: 1 <= abs(k - q) <= 2,
    "offset": lambda it, k, q: k == q - 3,
    "first": lambda it, k, q: False,  # nothing selected: the compiled head reads BOS alone
    "punctuation": lambda it, k, q: it[k] == ".",
    "duplicate": lambda it, k, q: k < q and it[k] == it[q],
    "induction": lambda it, k, q: k >= 1 and it[k - 1] == it[q],
}


def test_a_selection_of_bos_only_is_first_token():
    name, words = _role(SELECTIONS["first"])
    assert name == "first" and words == f"{measures.get('first').target} ({B.BOS} here)"
    # special reads the same key here (BOS is the one added position); first is the more specific name
    assert _role(SELECTIONS["first"], causal=False)[0] == "first"


def test_a_three_back_selection_is_an_offset_that_says_its_distance():
    assert _role(SELECTIONS["offset"]) == ("offset", "the key 3 positions back")
    assert _role(lambda it, k, q: k == q - 2, causal=False) == ("offset", "the key 2 positions back")
    assert _role(lambda it, k, q: k == q + 1, causal=False) == ("offset", "the key 1 position ahead")


def test_previous_is_the_registrys_definition_query_1_left_out():
    """The registry's previous token averages over queries 2..T-1: what the first item (query 1, whose previous
    position is BOS) selects is no part of it. The bridge's own rule made the first item select nothing."""
    assert _role(SELECTIONS["previous"]) == ("previous", "the previous token")
    assert _role(lambda it, k, q: k == q - 1 or (q == 0 and k == 0))[0] == "previous"
    # ... and a fixed offset of 1 back is the previous token, never "offset"
    assert _role(SELECTIONS["previous"], causal=False)[0] == "previous"


def test_every_role_the_census_names_can_be_written():
    can_name = {name for name, m, inputs in measures.census_scores() if name == m.name and m.needs == "tokens"
                and m.is_share and not m.lower_is_notable}
    assert set(B.role_measures()) == can_name
    for name in can_name - {"special"}:  # special: BOS, the one added position, is the first token (above)
        assert _role(SELECTIONS[name])[0] == name, name


def test_what_no_measure_reads_is_not_named():
    for rule in (lambda it, k, q: k <= q,  # a running mean
                 lambda it, k, q: k == 0,  # the first item (position 1), not BOS
                 lambda it, k, q: it[k] == it[q]):  # the same token, itself included
        assert _role(rule) == ("", "keys no census measure describes")
    # a share short of the naming level is not named; one above it says how much of the head's attention it is
    assert _role(lambda it, k, q: k == q - 1 or (k == q - 3 and q % 2 == 0))[0] == ""
    near = _role(lambda it, k, q: k == q - 1 or (k == q == 7))  # the last item of the longest inputs reads itself too
    assert near[0] == "previous" and near[1].startswith("the previous token (9") and "% of its attention" in near[1]


def test_a_compiled_program_writes_the_roles():
    """Through Tracr: a head that selects nothing (BOS) and shift_by(3), compiled and named."""
    none = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.FALSE).named("to_bos")
    bos = rasp.numerical(rasp.Aggregate(none, rasp.numerical(rasp.Map(lambda t: 1, rasp.tokens)), default=0)
                         ).named("bos_only")
    back3 = lib.shift_by(3, rasp.tokens).named("three_back")
    program = rasp.SequenceMap(lambda a, b: f"{a}:{b}", back3, rasp.categorical(rasp.Map(lambda v: round(v, 1), bos))
                               ).named("both")
    config, _ = B.compile_program(program, {"w", "x", "y", "z"}, 8, True, "bos and three back")
    heads = {h.expr.rsplit("_", 1)[0]: h for h in config.heads}
    assert (heads["bos_only"].pattern, heads["three_back"].pattern) == ("first", "offset")
    assert heads["three_back"].selects == "each query selects the key 3 positions back"
    assert heads["bos_only"].selects.startswith("each query selects the first token")
