"""The shipped tiny model and each of its seeds read the sentences a student types, with crisp heads (issue 51).

On the thirty ordinary sentences of `ordinary_sentences` (written for the tests, none from the training text),
run the way the page runs a text (`Model.run`): no word reaches the model as unknown; a previous-token head puts
>= 0.9 of its attention on the previous token; an induction head >= 0.6 on the token after the first copy when
each sentence is said twice; the untrained twin far below both. The same on random in-vocabulary sequences of the
whole context. On held-out agreement probes whose attractor has the opposite number, a relation head reads the
verb's subject far above uniform and above the untrained twin, and the model prefers the agreeing verb form.
"""
from __future__ import annotations

import random

import pytest
import torch

from mha_viz.analysis.pairs import induction_score, previous_token_score, subject_score
from mha_viz.models.registry import load_model
from mha_viz.models.tiny import corpus
from tests.models.tiny.ordinary_sentences import SENTENCES

MODELS = ("tiny", "tiny#seed1", "tiny#seed2", "tiny#seed3")
CONTEXT = 128


def untrained(name: str) -> str:
    return "tiny-untrained" if name == "tiny" else f"{name}@0"


def twice(model, sentence: str) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """The sentence said twice, through the page's path: its attention (L, H, T, T) and the (first, second)
    positions of every token of the second copy but the last."""
    n = len(model.run(sentence).tokens) - 1  # without <bos>
    run = model.run(f"{sentence} {sentence}")
    assert len(run.tokens) == 1 + 2 * n
    return run.attentions, [(1 + i, 1 + n + i) for i in range(n - 1)]


def heads(name: str) -> dict[str, float]:
    model = load_model(name)
    runs = [model.run(s) for s in SENTENCES]
    out = {"unknown": sum(len(r.unknown) for r in runs),
           "previous": previous_token_score([r.attentions for r in runs]).best()[1]}
    pairs = [twice(model, s) for s in SENTENCES]
    out["induction"] = induction_score([a for a, _ in pairs], [p for _, p in pairs]).best()[1]
    random_runs = [model.run(" ".join(ex.tokens[1:])) for ex in corpus.random_sequences(20, 5103, CONTEXT - 1)]
    out["previous, random"] = previous_token_score([r.attentions for r in random_runs]).best()[1]
    rng = random.Random(5104)
    rep = [rng.sample(corpus.vocabulary_words(), rng.randint(20, 60)) for _ in range(20)]
    rep_runs = [model.run(" ".join(w + w)) for w in rep]
    out["induction, random"] = induction_score(
        [r.attentions for r in rep_runs], [[(1 + i, 1 + len(w) + i) for i in range(len(w) - 1)] for w in rep]).best()[1]
    probes = corpus.agreement_examples(200, 5102, "opposite", CONTEXT)
    agree = [model.run(ex.text) for ex in probes]
    scores = subject_score([r.attentions for r in agree], [(ex.subject_pos, ex.verb_pos) for ex in probes])
    out["relation"], out["relation baseline"] = scores.best()[1], scores.baseline
    right = 0
    for ex, r in zip(probes, agree):
        good, bad = (model.vocab.id(ex.verb_forms[i]) for i in (int(ex.plural), 1 - int(ex.plural)))
        right += int(r.logits[ex.verb_pos - 1, good] > r.logits[ex.verb_pos - 1, bad])
    out["agreement"] = right / len(probes)
    return out


@pytest.fixture(scope="module")
def measured():
    cache: dict[str, dict[str, float]] = {}

    def get(name: str) -> dict[str, float]:
        if name not in cache:
            cache[name] = heads(name)
        return cache[name]

    return get


@pytest.mark.parametrize("name", MODELS)
def test_no_word_of_the_sentences_is_unknown(measured, name):
    assert measured(name)["unknown"] == 0


@pytest.mark.parametrize("name", MODELS)
def test_previous_token_and_induction_heads_on_ordinary_sentences(measured, name):
    trained, base = measured(name), measured(untrained(name))
    assert trained["previous"] >= 0.9, trained
    assert trained["induction"] >= 0.6, trained
    assert base["previous"] < trained["previous"] / 2 and base["induction"] < trained["induction"] / 4, base


@pytest.mark.parametrize("name", MODELS)
def test_heads_on_random_in_vocabulary_sequences(measured, name):
    trained, base = measured(name), measured(untrained(name))
    assert trained["previous, random"] >= 0.9, trained
    assert trained["induction, random"] >= 0.6, trained
    assert base["previous, random"] < 0.2 and base["induction, random"] < 0.2, base


@pytest.mark.parametrize("name", MODELS)
def test_a_relation_head_reads_the_subject_across_an_attractor_of_opposite_number(measured, name):
    trained, base = measured(name), measured(untrained(name))
    assert trained["relation"] >= 3 * trained["relation baseline"], trained
    assert trained["relation"] > base["relation"] + 0.2, (trained, base)
    assert trained["agreement"] >= 0.9, trained
