"""One input set against the census (`analysis.agreement`), on the tiny model's census: agreement, disagreement
and too little support each said in words, and the heads named for a role are the census's named heads."""
from __future__ import annotations

import pytest
import torch

import mha_viz
from mha_viz import analysis, measures
from mha_viz.analysis.agreement import agreement, census_heads, census_roles, head_agreement


@pytest.fixture(scope="module")
def tiny():
    model = mha_viz.load_model("tiny")
    return model, mha_viz.head_census(model)


def _readings(model, text):
    run = model.run(text)
    return analysis.run_scores(run, model.causal)[0], analysis.run_support(run, model.causal)


def test_roles_are_the_census_named_heads(tiny):
    model, census = tiny
    heads = census_heads(census, "induction")
    assert heads == [h for h, _ in census.named("induction")] and heads
    for head in heads:
        assert "induction" in census_roles(census, head)


def test_agreement_disagreement_and_too_few_are_said(tiny):
    model, census = tiny
    (head,) = census_heads(census, "induction")[:1]
    scores, support = _readings(model, "anna went to market and tom saw anna")
    # one repeated pair of words: too few queries for induction on this input
    assert support["induction"] < measures.SUPPORT_FLOOR
    assert measures.TOO_FEW in agreement(census, "induction", scores, support)
    # enough support; the census's head set as the highest: agrees
    support = dict(support, induction=5)
    scores = dict(scores, induction=torch.zeros_like(scores["induction"]))
    scores["induction"][head] = 0.9
    assert "agrees" in agreement(census, "induction", scores, support)
    # another head higher on this input: the sentence names it and the census's head
    other = (head[0], (head[1] + 1) % model.n_heads)
    scores["induction"][other] = 0.99
    scores["induction"][head] = 0.4
    words = agreement(census, "induction", scores, support)
    assert "scores higher" in words and mha_viz.names.head_name(other) in words
    assert any("scores higher" in line for line in head_agreement(census, head, scores, support))
