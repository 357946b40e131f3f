"""Unknown words take no part in a reading, on a text whose known repeats are above the support floor.

`analysis.scores.pattern_scores` reused the name `unknown` for its check of score names, so the unknown positions
passed in were dropped before the positions were built: on tiny, "the cat sat on the mat . zxqv qwzx zxqv qwzx zxqv .
the cat sat on the mat" read L0 H3 as "duplicate 35% over 6 queries" (0.7% on its known tokens), while the query
count beside it was right. The earlier tests used texts whose known repeats fall below the floor, so they could not
see it. Every path that shows a reading (the Layer badges and captions, Inside a head, Notes & export, Similarity &
scores, the Lesson, the notebook grid) reads it through `analysis.run_scores`.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mha_viz import analysis, measures
from mha_viz.analysis import scores as scores_module
from mha_viz.contract import AttentionRun

from helpers import loaded, open_link

# Known repeats above the support floor ("the", "cat", "on", "the", "." again), unknown words between them, one of
# them ("sat", "mat", unknown to tiny) right after a known word that repeats: an unknown induction target.
TEXT = "the cat sat on the mat . zxqv qwzx zxqv qwzx zxqv . the cat sat on the mat"
REPEATS = ("duplicate", "induction")


@pytest.fixture(scope="module")
def run() -> AttentionRun:
    r = loaded("tiny").run(TEXT)
    assert len(r.unknown) >= 7, r.tokens  # zxqv, qwzx, sat and mat are unknown to tiny
    support = analysis.run_support(r, True)
    assert all(support[n] >= measures.SUPPORT_FLOOR for n in REPEATS), support  # a number is shown for both
    return r


def _scrambled(run: AttentionRun, seed: int) -> AttentionRun:
    """The same run, with every unknown query's attention row replaced by a random causal row, and every known
    query's mass on unknown keys shuffled among those keys (the row's sum and its mass on known keys kept)."""
    gen = torch.Generator().manual_seed(seed)
    att = run.attentions.clone()  # (L, H, Q, K)
    L, H, T, _ = att.shape
    unknown = sorted(run.unknown)
    for q in range(T):
        allowed = q + 1
        if q in run.unknown:
            row = torch.rand(L, H, allowed, generator=gen)  # (L, H, q + 1)
            att[:, :, q, :allowed] = row / row.sum(-1, keepdim=True)
            att[:, :, q, allowed:] = 0.0
        else:
            seen = [k for k in unknown if k <= q]
            if len(seen) > 1:
                perm = torch.tensor(seen)[torch.randperm(len(seen), generator=gen)]
                att[:, :, q, seen] = run.attentions[:, :, q, perm]
    return AttentionRun(**{**run.__dict__, "attentions": att})


def test_the_issues_example_reads_its_known_tokens_only(run):
    got, _ = analysis.run_scores(run, True)
    known = [p for p in range(len(run.tokens)) if p not in run.unknown]
    assert float(got["duplicate"][0, 3]) < 0.05, float(got["duplicate"][0, 3])  # 0.35 with the unknowns counted
    # the same value from the known tokens alone: the attention of unknown queries, and to unknown keys, never counts
    pos = measures.Positions.of(len(run.tokens), True, run.tokens, run.token_ids, run.special, unknown=run.unknown)
    assert all(q in known and k in known for k, q in pos.repeats)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1))
def test_attention_of_and_to_unknown_words_changes_no_repeat_reading(run, seed):
    """Property: scrambling the rows of unknown queries, and moving a known query's attention among unknown keys,
    changes no duplicate or induction value and no support."""
    before, _ = analysis.run_scores(run, True)
    scrambled = _scrambled(run, seed)
    assert not torch.equal(scrambled.attentions, run.attentions)
    after, _ = analysis.run_scores(scrambled, True)
    for name in REPEATS:
        assert torch.equal(before[name], after[name]), name
    assert analysis.run_support(run, True) == analysis.run_support(scrambled, True)


def test_an_unknown_induction_target_is_not_a_target():
    """'cat' repeats, and the word after its first occurrence is unknown: no induction target there."""
    pos = measures.Positions.of(6, True, token_ids=[1, 5, 2, 9, 5, 2], added=(0,), unknown=(2, 5))
    # "cat"(1) unk(2) x(3) "cat"(4) unk(5): the repeat (1, 4) targets 2, which is unknown
    from mha_viz.measures.scoring import repeat_mask

    assert not repeat_mask(pos, 1).any() and repeat_mask(pos, 0)[4, 1]


@pytest.fixture
def positions_seen(monkeypatch):
    """Every (length, unknown positions) the readings were built with, spied where `pattern_scores` builds them."""
    seen: list[tuple[int, frozenset]] = []
    real = scores_module.positions

    def spy(t, causal, token_ids=None, added=(), tokens=(), unknown=()):
        seen.append((t, frozenset(int(p) for p in unknown)))
        return real(t, causal, token_ids, added, tokens, unknown)

    monkeypatch.setattr(scores_module, "positions", spy)
    return seen


# Each view that shows a reading of the page's run, with a text of its own so no cache of another test answers it.
VIEWS = {"Layer": "zzvq", "Inside a head": "qqzv", "Similarity & scores": "vvzq", "Notes & export": "zqqv"}


@pytest.mark.parametrize("view", VIEWS)
def test_every_view_builds_its_readings_with_the_unknown_positions(view, positions_seen):
    text = TEXT.replace("zxqv", VIEWS[view])
    run = loaded("tiny").run(text)
    open_link({"model": "tiny", "text": text, "view": view, "layer": "0"})
    mine = [u for t, u in positions_seen if t == len(run.tokens)]
    assert mine, f"{view} built no reading of the run"
    assert all(u == frozenset(run.unknown) for u in mine), (view, mine, run.unknown)


def test_the_notebook_grid_and_the_lesson_build_their_readings_with_the_unknown_positions(run, positions_seen):
    from mha_viz.app.lesson import readings
    from mha_viz.notebook import widget

    widget.badge_labels(run, True)
    reading = readings.read("tiny", run)
    assert len(positions_seen) >= 2 and all(u == frozenset(run.unknown) for _, u in positions_seen), positions_seen
    assert float(reading.scores["duplicate"][0, 3]) < 0.05
