"""The registered measures the census reads (`mha_viz.measures`) and the census's own pooling, on hand-made
attention whose answers are known, and each re-derived by a plain loop over attention rows on random attention."""
import math

import pytest
import torch

from mha_viz import measures as M
from mha_viz.analysis import census as C
from mha_viz.analysis import census_inputs as I
from mha_viz.analysis.scores import pattern_scores, previous_pairs, uniform_pattern


def measure(name, att, causal, added=(), **kw):
    """((L, H), uniform baseline) of one registered measure on one input."""
    return M.get(name).measure(att, M.Positions(att.shape[-1], causal, added=frozenset(added), **kw))


def without(content):
    return tuple(i for i, c in enumerate(content) if not c)


def causal_softmax(x: torch.Tensor) -> torch.Tensor:
    t = x.shape[-1]
    return x.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf")).softmax(-1)


def random_att(L=2, H=3, T=9, causal=True, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(L, H, T, T, generator=g) * 2
    return causal_softmax(x) if causal else x.softmax(-1)


def previous_head(t: int) -> torch.Tensor:
    att = torch.zeros(t, t)
    att[0, 0] = 1.0
    att[torch.arange(1, t), torch.arange(t - 1)] = 1.0
    return att  # (T, T)


def test_nearby_of_a_previous_token_head_is_one_and_uniform_scores_its_baseline():
    t = 8
    content = [True] * t
    att = torch.stack([previous_head(t), uniform_pattern(t, True)])[None]  # (1, 2, T, T)
    value, uniform = measure("nearby", att, True, without(content))
    assert value[0, 0] == pytest.approx(1.0)
    assert value[0, 1] == pytest.approx(uniform)
    # by hand: queries 2..7 see keys 1..2 away, not key 0: query 2 -> {1}, then 2 keys each
    assert uniform == pytest.approx((1 / 3 + 2 / 4 + 2 / 5 + 2 / 6 + 2 / 7 + 2 / 8) / 6)


def test_nearby_skips_special_positions_and_position_zero():
    t = 6
    content = [False, True, True, True, True, False]  # [CLS] ... [SEP]
    mask = M.nearby_mask(t, 1, content, causal=False)
    assert not mask[:, 0].any() and not mask[:, 5].any() and not mask[5].any() and not mask[:2].any()
    assert mask[2].nonzero().flatten().tolist() == [1, 3]


def test_nearby_matches_a_plain_loop_over_rows():
    for causal in (True, False):
        att = random_att(causal=causal, seed=1)
        t = att.shape[-1]
        content = [i not in (0, 5) for i in range(t)]
        value, _ = measure("nearby", att, causal, without(content))
        for l in range(att.shape[0]):
            for h in range(att.shape[1]):
                rows = []
                for q in range(2, t):
                    if not content[q]:
                        continue
                    keys = [k for k in range(1, t) if content[k] and 1 <= abs(q - k) <= 2 and (k <= q or not causal)]
                    if keys:
                        rows.append(sum(float(att[l, h, q, k]) for k in keys))
                assert float(value[l, h]) == pytest.approx(sum(rows) / len(rows), abs=1e-6)


def test_previous_is_the_page_definition_from_query_two():
    assert previous_pairs(5) == [(2, 1), (3, 2), (4, 3)]
    att = random_att(seed=2)
    t = att.shape[-1]
    scores = C.input_scores(att, M.Positions(t, True), "random")
    loop = torch.tensor([[sum(float(att[l, h, q, q - 1]) for q in range(2, t)) / (t - 2) for h in range(3)]
                         for l in range(2)])
    torch.testing.assert_close(scores["previous"][0], loop)
    torch.testing.assert_close(scores["previous"][0], pattern_scores(att, causal=True)["previous"])


def test_induction_and_duplicate_on_a_hand_made_induction_head():
    ids = [1, 10, 11, 12, 10, 11, 12]  # <bos> a b c a b c
    t = len(ids)
    pos = M.Positions.of(t, True, token_ids=ids, added=(0,))
    assert set(pos.repeats) == {(1, 4), (2, 5), (3, 6)}
    induction = [(4, 2), (5, 3), (6, 4)]
    att = uniform_pattern(t, True).clone()  # (T, T)
    for q, k in induction:
        att[q] = 0.0
        att[q, k] = 1.0
    att = att[None, None]
    value, uniform = M.get("induction").measure(att, pos)
    assert value.item() == pytest.approx(1.0)
    assert uniform == pytest.approx((1 / 5 + 1 / 6 + 1 / 7) / 3)
    assert M.get("duplicate")(att, pos).item() == 0.0
    # The census hands the repeats it generated (the unrepeated control keeps the positions, not the words).
    given = M.Positions(t, True, added=frozenset({0}), repeats=((1, 4), (2, 5), (3, 6)))
    assert M.get("induction")(att, given).item() == pytest.approx(1.0)


def test_gold_mass_matches_a_plain_loop():
    att = random_att(seed=3)
    pairs = ((5, 2), (6, 3), (8, 1))
    value, uniform = measure("gold", att, True, gold=pairs)
    for l in range(2):
        for h in range(3):
            assert float(value[l, h]) == pytest.approx(sum(float(att[l, h, q, k]) for q, k in pairs) / 3, abs=1e-6)
    assert uniform == pytest.approx((1 / 6 + 1 / 7 + 1 / 9) / 3)


def test_dependency_hits_count_the_most_attended_candidate():
    t = 6
    att = uniform_pattern(t, False).clone()  # (T, T)
    att[4] = torch.tensor([0.5, 0.3, 0.05, 0.05, 0.05, 0.05])  # [CLS] most, then word 1: [CLS] is no candidate
    att[2] = torch.tensor([0.1, 0.1, 0.5, 0.2, 0.05, 0.05])  # itself most, then 3: itself is no candidate
    hits, chance = measure("det→noun", att[None, None], False, (0,), gold=((4, 1), (2, 3)))
    assert hits.item() == 1.0
    assert chance == pytest.approx(1 / 4)  # 5 words, minus the query itself
    miss, _ = measure("det→noun", att[None, None], False, (0,), gold=((4, 2),))
    assert miss.item() == 0.0
    with pytest.raises(ValueError, match="not a candidate"):
        measure("det→noun", att[None, None], False, (0,), gold=((4, 0),))


def test_dependency_hits_match_a_plain_loop_causal():
    att = random_att(seed=4)
    pairs = ((5, 2), (7, 6), (8, 1))
    hits, chance = measure("verb→subject", att, True, (0,), gold=pairs)
    for l in range(2):
        for h in range(3):
            n = 0
            for q, k in pairs:
                cands = [j for j in range(1, q)]  # words before q (the query itself and <bos> excluded)
                best = max(cands, key=lambda j: float(att[l, h, q, j]))
                n += best == k
            assert float(hits[l, h]) == pytest.approx(n / 3)
    assert chance == pytest.approx((1 / 4 + 1 / 6 + 1 / 7) / 3)


def test_offset_baseline_is_the_most_often_right_offset():
    per_input = [C.offset_accuracy([(2, 1), (5, 3)]), C.offset_accuracy([(4, 3)])]
    assert per_input[0][-1] == 0.5 and per_input[0][-2] == 0.5 and per_input[1][-1] == 1.0
    assert C.best_offset(per_input) == (-1, pytest.approx(0.75))
    assert math.isnan(C.best_offset([C.offset_accuracy([])])[1])


def test_summarise_pools_means_and_bootstraps_over_inputs():
    values = [torch.full((2, 2), float(v)) for v in (0.0, 1.0, 0.5, float("nan"))]
    pooled = C.summarise(values, [0.1, 0.2, 0.3, 0.9], seed=0, n_boot=500)
    assert pooled.n == 3
    torch.testing.assert_close(pooled.mean, torch.full((2, 2), 0.5))
    assert pooled.uniform == pytest.approx(0.2)  # the NaN input's baseline is left out too
    assert (pooled.low <= pooled.mean).all() and (pooled.high >= pooled.mean).all()
    assert float(pooled.high[0, 0] - pooled.low[0, 0]) > 0.1
    same = C.summarise([torch.ones(1, 1)] * 5, [0.5] * 5)
    assert same.low.item() == same.high.item() == 1.0
    assert C.summarise(values, [0.0] * 4, seed=3).low.tolist() == C.summarise(values, [0.0] * 4, seed=3).low.tolist()


def test_drop_lost():
    assert C.drop_lost(2.0, 0.5) == pytest.approx(0.75)
    assert C.drop_lost(2.0, 2.0) == 0.0
    assert math.isnan(C.drop_lost(0.0, 1.0))


def test_special_score_is_nan_without_special_tokens():
    att = random_att(causal=False, seed=5)
    assert torch.isnan(measure("special", att, False)[0]).all()
    value, uniform = measure("special", att, False, (0, 8))
    loop = (att[..., :, 0] + att[..., :, 8]).mean(-1)  # (L, H)
    torch.testing.assert_close(value, loop)
    assert uniform == pytest.approx(2 / 9)


# -- inputs ------------------------------------------------------------------------------------------------------
WORDS = tuple(f"w{i}" for i in range(40))
NOUNS = (("dog", "dogs"), ("cat", "cats"), ("key", "keys"), ("box", "boxes"))


def test_inputs_are_seeded_and_reproducible():
    a = I.repeated_sequences(WORDS, 5, (3, 6), seed=1)
    assert a == I.repeated_sequences(WORDS, 5, (3, 6), seed=1)
    assert a != I.repeated_sequences(WORDS, 5, (3, 6), seed=2)
    for item in a:
        m = len(item.words) // 2
        assert item.words[:m] == item.words[m:] and len(set(item.words[:m])) == m
        for q, k in item.pairs["induction"]:
            assert item.words[q] == item.words[k - 1]
    for item, twin in zip(a, I.unrepeated_twins(a, WORDS, 0)):
        assert len(twin.words) == len(item.words) and len(set(twin.words)) == len(twin.words)
        assert twin.pairs == item.pairs


@pytest.mark.parametrize("causal", [True, False])
def test_template_arcs_point_at_the_right_words(causal):
    items = I.template_sentences(NOUNS, ("old", "red"), ("near", "of"), (("sees", "see"),), "the", "the", ".",
                                 30, seed=0, causal=causal)
    assert set(items[0].pairs) == set(I.CAUSAL_RELATIONS if causal else I.ENCODER_RELATIONS)
    singular, nouns = {s for s, _ in NOUNS}, {n for pair in NOUNS for n in pair}
    for item in items:
        w = item.words
        for q, k in item.pairs.get("noun→det", ()):
            assert w[q] in nouns and w[k] == "the"
        for q, k in item.pairs.get("det→noun", ()):
            assert w[q] == "the" and w[k] in nouns
        for q, k in item.pairs.get("noun→adj", ()) + item.pairs.get("adj→noun", ()):
            assert {w[q], w[k]} <= nouns | {"old", "red"} and k - q == (-1 if causal else 1)
        (verb, subject), = item.pairs["verb→subject"]
        assert (w[verb] == "sees") == (w[subject] in singular)  # the verb agrees with the subject
        # the attractor, the noun right before the verb, has the other number
        assert (w[verb - 1] in singular) != (w[subject] in singular)
        for q, k in (arc for arcs in item.pairs.values() for arc in arcs):
            assert 0 <= q < len(w) and 0 <= k < len(w) and q != k
            assert k < q or not causal  # a causal query sees only earlier words
    shuffled = I.shuffled(items, 0)
    assert [sorted(s.words) for s in shuffled] == [sorted(i.words) for i in items]
    assert any(s.words != i.words for s, i in zip(shuffled, items))


def test_distance_is_one_for_uniform_and_small_for_a_band():
    t = 10
    content = [False] + [True] * (t - 1)
    band = torch.zeros(t, t)
    for q in range(t):
        keys = [k for k in (q - 1, q, q + 1) if 0 <= k < t]
        band[q, keys] = 1 / len(keys)
    att = torch.stack([uniform_pattern(t, False), band])[None]  # (1, 2, T, T)
    value, base = measure("distance", att, False, without(content))
    assert base == pytest.approx(1.0)
    assert value[0, 0] == pytest.approx(1.0, abs=1e-6)  # [CLS] left out and the rest renormalised: still uniform
    assert value[0, 1] < 0.3
    # by a plain loop over rows, for random causal attention
    att = random_att(seed=6)
    t = att.shape[-1]
    content = [i != 0 for i in range(t)]
    value, _ = measure("distance", att, True, without(content))
    for l in range(2):
        for h in range(3):
            ratios = []
            for q in range(t):
                keys = [k for k in range(1, q + 1)]
                if not content[q] or len(keys) < 2:
                    continue
                w = [float(att[l, h, q, k]) for k in keys]
                mean = sum(wk * (q - k) for wk, k in zip(w, keys)) / sum(w)
                ratios.append(mean / (sum(q - k for k in keys) / len(keys)))
            assert float(value[l, h]) == pytest.approx(sum(ratios) / len(ratios), abs=1e-5)
