"""The registry of measures (`mha_viz.measures`): every entry is complete and computable, and every place that
shows a per-head score names it by a registry name and words it from the entry."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch

from mha_viz import measures as M
from mha_viz.analysis import census as C
from mha_viz.analysis import scores as S

PKG = Path(__file__).resolve().parents[2] / "mha_viz"


def test_the_registry_is_read_through_plain_names():
    """`measures.REGISTRY` and `measures.get(name)`: a plain module, with no class swapped in behind it."""
    import types

    assert type(M) is types.ModuleType
    assert M.get("previous") is M.REGISTRY["previous"] and M.get("previous (text)") is M.REGISTRY["previous"]
    assert "induction" in M.REGISTRY
    with pytest.raises(KeyError, match="registered measure"):
        M.get("previous token")


@pytest.mark.parametrize("name", list(M.REGISTRY))
def test_every_entry_is_complete_and_computes_its_baseline(name):
    m = M.get(name)
    assert m.name == name and m.label and m.meaning and m.citation and m.unmeasurable
    assert m.notable in ("high", "low")
    assert any(year in m.citation for year in ("19", "20")), "a citation names its paper and year"
    for causal in (True, False):
        t = 9
        gold = ((6, 2), (8, 4)) if m.needs == "gold" else ()
        tokens = ("[CLS]", "a", ",", "b", "c", "a", ",", "b", ".")
        pos = M.Positions.of(t, causal, tokens, token_ids=[1, 2, 3, 4, 5, 2, 3, 4, 6], added=(0,), gold=gold)
        att = torch.softmax(torch.randn(2, 3, t, t), -1)
        if causal:
            att = att.tril() / att.tril().sum(-1, keepdim=True)
        value, base = m.measure(att, pos)
        assert value.shape == (2, 3) and not torch.isnan(value).any(), name
        assert math.isfinite(base)
        uniform = M.uniform_pattern(t, causal)[None, None].expand(2, 3, t, t)
        if m.chance is None:  # the baseline is the measure of uniform attention on the same positions
            torch.testing.assert_close(m(uniform, pos), torch.full((2, 3), base))
    assert "nan" not in m.sentence(0.5).lower() and m.sentence(float("nan")).startswith("Not measurable")


def test_page_scores_and_badges_are_registry_names():
    assert set(S.SCORE_NAMES) <= set(M.REGISTRY) and set(M.BADGES) <= set(S.SCORE_NAMES)
    att = torch.softmax(torch.randn(1, 2, 6, 6), -1)
    assert list(S.pattern_scores(att)) == list(S.SCORE_NAMES)
    assert all(not M.get(n).lower_is_notable and M.get(n).is_share for n in M.BADGES)


def test_census_score_names_resolve_to_their_measure_and_inputs():
    for score, m, inputs in M.census_scores():
        assert M.of_score(score) == (m, inputs)
        assert M.score_words(score).startswith(m.meaning) and M.INPUTS[inputs] in M.score_words(score)
    assert M.of_score("previous (text)") == (M.get("previous"), "texts")
    assert M.score_label("previous (text)") == "previous token (text)"
    t = 8
    pos = M.Positions(t, True)
    att = M.uniform_pattern(t, True)[None, None]
    for inputs in ("random", "texts"):
        assert {n for n in C.input_scores(att, pos, inputs)} == {s for s, _, on in M.census_scores() if on == inputs}


def test_one_definition_each_across_page_census_and_circuits():
    """The badges, the census and the circuits view read previous, induction and duplicate from the same entries."""
    torch.manual_seed(1)
    ids = [7, 1, 2, 3, 4, 1, 2, 3, 4]
    t = len(ids)
    att = torch.softmax(torch.randn(2, 2, t, t), -1)
    page = S.pattern_scores(att, ids, added=(0,))
    pos = M.Positions.of(t, False, token_ids=ids, added=(0,))
    census = C.input_scores(att, pos, "repeated")
    torch.testing.assert_close(page["induction"], census["induction"][0])
    torch.testing.assert_close(page["duplicate"], census["duplicate"][0])
    torch.testing.assert_close(page["previous"], C.input_scores(att, pos, "random")["previous"][0])


def _string_constants(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)}


def test_no_view_or_export_keeps_its_own_copy_of_a_measures_words():
    """A measure's sentence of meaning is written once, in its entry: no other module of the package holds it."""
    meanings = {m.meaning for m in M.REGISTRY.values()} | {m.citation for m in M.REGISTRY.values()}
    offenders = [f"{p.relative_to(PKG.parent)}: {s[:60]}" for p in PKG.rglob("*.py")
                 if p.relative_to(PKG).as_posix() != "measures/registry.py"
                 for s in _string_constants(p) if s in meanings]
    assert not offenders, offenders


def test_confidence_is_the_mean_largest_weight():
    """Voita et al. 2019's confidence, by a loop over rows: each row's largest weight, rows that see one key left
    out (their largest weight is 1 whatever the head does)."""
    torch.manual_seed(2)
    t = 7
    att = torch.softmax(torch.randn(2, 2, t, t), -1).tril()
    att = att / att.sum(-1, keepdim=True)  # (L, H, T, T), causal
    value = M.get("confidence")(att, M.Positions(t, True))
    for l in range(2):
        for h in range(2):
            rows = [max(float(w) for w in att[l, h, q, : q + 1]) for q in range(1, t)]
            assert float(value[l, h]) == pytest.approx(sum(rows) / len(rows), abs=1e-6)
    base = M.get("confidence").baseline(M.Positions(t, True))
    assert base == pytest.approx(sum(1 / (q + 1) for q in range(1, t)) / (t - 1))


def test_the_measures_page_table_is_the_registry():
    """docs/measures.md's table of measures is made from the entries, so a new or reworded measure cannot leave it
    stale."""
    readme = (PKG.parent / "docs" / "measures.md").read_text()
    start = readme.index("<!-- measures:")
    start = readme.index("\n", start) + 1
    table = readme[start:readme.index("<!-- /measures -->")].strip()
    assert table == M.markdown_table(), ("docs/measures.md's measures table differs from the registry: replace it with "
                                        "python -c 'from mha_viz import measures; print(measures.markdown_table())'")


def test_the_probes_pair_scores_are_the_registry_measures():
    """The tiny probes' and the Similarity ground truth's pair scores (analysis/pairs.py) pool the registry's `gold`
    measure: on one text, previous-token pairs give the registry's `previous`, and given repeats its `induction`."""
    from mha_viz.analysis import pairs

    torch.manual_seed(3)
    t = 10
    att = torch.softmax(torch.randn(2, 3, t, t), -1).tril()
    att = att / att.sum(-1, keepdim=True)  # (L, H, T, T), causal
    torch.testing.assert_close(pairs.previous_token_score(att).scores, M.get("previous")(att, M.Positions(t, True)))
    ids = [0, 1, 2, 3, 4, 1, 2, 3, 4, 5]
    repeats = [(k, q) for q in range(t) for k in range(q) if ids[k] == ids[q]]
    torch.testing.assert_close(pairs.induction_score(att, repeats).scores,
                               M.get("induction")(att, M.Positions.of(t, True, token_ids=ids)))


def _causal_random(t: int, causal: bool, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, 1, t, t, generator=g)  # (1, 1, T, T)
    if causal:
        logits = logits.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    return logits.softmax(-1)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", [n for n in M.ONE_INPUT if n != "offset"])
def test_support_counts_the_queries_a_reading_averages_over(name, causal):
    """A measure's support is the number of query rows its value depends on: changing any other row leaves the
    value as it was. Checked row by row on an input with specials, punctuation, repeats and an unknown."""
    tokens = ["[CLS]", "a", "b", ",", "a", "b", "c", "?", "?", "a", "[SEP]"]
    ids = [0, 1, 2, 3, 1, 2, 4, 9, 9, 1, 5]
    t = len(tokens)
    pos = M.Positions.of(t, causal, tokens, ids, added=(0, t - 1), unknown=(7, 8))
    att = _causal_random(t, causal)
    base = M.get(name)(att, pos)[0, 0]
    moved = 0
    for q in range(t):
        other = att.clone()
        other[..., q, :] = _causal_random(t, causal, seed=q + 1)[..., q, :]
        moved += int(not torch.allclose(M.get(name)(other, pos)[0, 0], base, equal_nan=True))
    # Query 0 of a causal model sees one key, so its row cannot move: `self` and `special` count it (its weight
    # on itself, a special position, is 1), the rest leave it out as a row with nothing to measure.
    forced = int(causal and name in ("self", "special"))
    assert M.get(name).support(pos) == moved + forced


def test_two_unknowns_never_repeat_each_other():
    ids = [0, 7, 7, 7, 2, 7]  # 7: the unknown token's id at positions 1, 2, 3, 5
    pos = M.Positions.of(6, True, token_ids=ids, added=(0,), unknown=(1, 2, 3, 5))
    assert pos.repeats == ()
    assert M.get("induction").support(pos) == 0 and M.get("duplicate").support(pos) == 0
    assert math.isnan(float(M.get("induction")(_causal_random(6, True), pos)[0, 0]))
    # the same ids without the unknowns marked: every unknown repeats every other (what the page did before)
    assert len(M.Positions.of(6, True, token_ids=ids, added=(0,)).repeats) == 6
    # a generator's repeats are filtered too
    given = M.Positions(6, True, added=frozenset({0}), repeats=((1, 3), (2, 5)), unknown=frozenset({1, 2}))
    assert M.get("duplicate").support(given) == 0


def test_a_reading_below_the_floor_has_no_number_and_says_its_support():
    m = M.get("induction")
    few = m.reading(0.86, 1)
    assert M.TOO_FEW in few and "86" not in few and "1 query" in few
    enough = m.reading(0.5, M.SUPPORT_FLOOR)
    assert "50%" in enough and f"over {M.SUPPORT_FLOOR} queries" in enough
    # a badge below the floor is not ranked; at the floor it is
    scores = {n: torch.zeros(1, 1) for n in M.BADGES}
    scores["induction"] = torch.ones(1, 1)
    base = {n: 0.0 for n in M.BADGES}
    support = {n: 10 for n in M.BADGES}
    support["induction"] = M.SUPPORT_FLOOR - 1
    assert S.top_badges(scores, base, 0, 0, support=support) == []
    assert M.TOO_FEW in S.badge_caption(scores, base, support, 0, 0)
    support["induction"] = M.SUPPORT_FLOOR
    assert S.top_badges(scores, base, 0, 0, support=support) == [("induction", 1.0)]
    assert S.badge_caption(scores, base, support, 0, 0) == f"measured: 100% → induction, {M.SUPPORT_FLOOR} queries"


def test_best_offsets_name_the_offset_read():
    t = 9
    att = torch.zeros(1, 3, t, t)  # (1, H, T, T): H0 reads 1 back, H1 3 back, H2 2 ahead (an encoder)
    for q in range(t):
        att[0, 0, q, max(q - 1, 0)] = 1
        att[0, 1, q, max(q - 3, 0)] = 1
        att[0, 2, q, min(q + 2, t - 1)] = 1
    pos = M.Positions(t, False)
    assert M.best_offsets(att, pos).tolist() == [[-1, -3, 2]]
    assert [M.offset_words(d) for d in (-3, 2)] == ["3 back", "2 ahead"]
    assert torch.allclose(M.get("offset")(att, pos), torch.ones(1, 3))
