"""The one naming rule (`analysis.census.name_heads`), on per-input values made by hand: a head is named when it
beats its control (paired), is not clearly below the leader (paired), and no higher head that beats its control is
left out. The orderings the issue found are rebuilt here: a noisy head named above narrow stronger ones (SmolLM2's
first token, MiniLM's special), a fixed-offset head named "induction" because naming never read the control."""
from __future__ import annotations

import itertools

import torch

from mha_viz.analysis.census import CONTROL_SHARE, TIE_TOLERANCE, name_heads


def _values(means, spread, n=48, seed=0):
    """(n, 1, H) per-input values: head h is means[h] + spread[h] * noise, noise the same draw for every call."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(n, 1, len(means), generator=gen)  # (n, 1, H)
    return (torch.tensor(means)[None, None] + torch.tensor(spread)[None, None] * noise).clamp(0, 1)


def test_a_head_equal_to_its_control_is_never_named():
    """A 2-back head on repeated sequences of period 3 and 4 scores the same on their unrepeated twins (the same
    positions): 0.54 both, so nothing is named however high the value."""
    v = _values([0.54, 0.02], [0.3, 0.01])
    k = name_heads(v, v.clone(), seed=1)
    assert k.named == () and k.leader is None
    assert float(k.against_low.max()) <= 0.0 + 1e-9


def test_a_true_induction_head_beats_its_control_and_is_named():
    v = _values([0.95, 0.54, 0.05], [0.02, 0.3, 0.02])
    control = v.clone()
    control[..., 0] = _values([0.05], [0.02], seed=3)[..., 0]  # the induction head on unrepeated twins: nothing
    k = name_heads(v, control)
    assert k.named == ((0, 0),) and k.leader == (0, 0)
    assert float(k.against_low[0, 0]) > float(k.margin[0, 0]) >= CONTROL_SHARE * (1 - 0.06)


def test_a_noisy_head_is_never_named_while_a_higher_head_is_left_out():
    """SmolLM2 first token: L23 H2 (0.957, wide interval) was named, L20 H6 (0.990) and four others above it were
    not. Now the leader is the highest, the heads within the tie tolerance of it are named, and the rule is monotone:
    every head that beats its control and scores at least the lowest named one is named too."""
    means = [0.990, 0.984, 0.977, 0.974, 0.961, 0.957, 0.744, 0.748]
    spread = [0.005, 0.006, 0.01, 0.01, 0.02, 0.15, 0.05, 0.01]
    v = _values(means, spread)
    control = torch.full_like(v, 0.05)
    k = name_heads(v, control, seed=2)
    score = v.mean(0)[0]
    named = {h for _, h in k.named}
    assert 0 in named and k.leader == (0, 0)
    for a, b in itertools.permutations(range(len(means)), 2):
        if b in named and float(score[a]) >= float(score[b]) and bool(k.beats[0, a]):
            assert a in named, (a, b, k.named)
    # the tie is what the paired interval could not rule out, and it is said as one
    for _, h in k.named:
        assert float(k.gap_low[0, h]) <= TIE_TOLERANCE or float(score[h]) >= min(float(score[j]) for _, j in k.named)


def test_a_head_just_outside_the_tie_with_a_narrow_gap_is_not_named_and_one_inside_is():
    """Paired: the gap between two heads that move together input by input is tight even where each head's own
    interval is wide."""
    base = _values([0.6], [0.2])[..., 0]  # (n, 1): a shared swing from input to input
    v = torch.stack([base, base - 0.005, base - 0.1], -1).clamp(0, 1)  # (n, 1, 3)
    k = name_heads(v, torch.zeros_like(v))
    assert {h for _, h in k.named} == {0, 1}  # 0.005 below the leader: a tie; 0.1 below, on every input: not


def test_the_names_do_not_depend_on_the_order_heads_are_listed_in():
    v = _values([0.9, 0.9, 0.4, 0.85], [0.05, 0.05, 0.05, 0.05])
    control = torch.full_like(v, 0.1)
    names = set(name_heads(v, control).named)
    perm = [3, 2, 1, 0]
    flipped = name_heads(v[..., perm], control[..., perm]).named
    assert {(0, perm[h]) for _, h in flipped} == names


def test_a_score_whose_low_end_is_notable_names_its_lowest_heads():
    v = _values([0.1, 0.9, 0.12], [0.02, 0.02, 0.02])  # e.g. distance (x uniform): a band near the diagonal
    k = name_heads(v, torch.ones_like(v), lower_is_notable=True)
    assert {h for _, h in k.named} == {0, 2} or {h for _, h in k.named} == {0}
    assert (0, 1) not in k.named


def test_inputs_where_the_control_was_not_read_are_left_out():
    v = _values([0.9, 0.1], [0.02, 0.02])
    control = torch.full_like(v, 0.1)
    control[:10] = float("nan")  # those inputs' words did not line up on the control
    k = name_heads(v, control)
    assert k.n == v.shape[0] - 10 and k.named == ((0, 0),)
