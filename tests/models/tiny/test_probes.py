"""The evidence, on held-out inputs: the trained model has a sharp previous-token head on random word sequences,
a head that copies from a sequence's first occurrence, a subject head, and gets agreement right; the heads that
attend to the subject are the ones agreement depends on; its initialisation has none of this.

The thresholds are the targets the tiny model was built to meet (benchmarks/RESULTS.md, "Where the tests came
from"). The seeds differ from the trainer's (1234) and from the probe file's (2024-2034), so these texts were never
trained on and are not the ones the notes report.
"""
import pytest
import torch

from mha_viz import load_model
from mha_viz.models.tiny import corpus
from mha_viz.tiny_probes import (
    ablated_margins,
    agreement_accuracy,
    copy_score,
    induction_score,
    previous_token_score,
    score_pairs,
    subject_score,
)

RANDOM = corpus.random_sequences(40, seed=3101, length=32)
REPEATED = corpus.repeated_sequences(40, seed=3102)
AGREEMENT = corpus.agreement_examples(200, seed=3103, attractor="opposite")


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/models/tiny/conftest.py


@pytest.fixture(scope="module")
def trained():
    return load_model("tiny")


@pytest.fixture(scope="module")
def untrained():
    return load_model("tiny-untrained")


def _attn(model, examples):
    # The page's path: one `run` per text, as typed (the generator's tokens round-trip through the tokenizer).
    runs = [model.run(ex.text) for ex in examples]
    assert all(list(r.tokens) == list(ex.tokens) for r, ex in zip(runs, examples))
    return [r.attentions for r in runs]


@pytest.fixture(scope="module")
def scores(trained, untrained):
    out = {}
    for name, model in (("trained", trained), ("untrained", untrained)):
        rep = _attn(model, REPEATED)
        repeats = [ex.repeats for ex in REPEATED]
        out[name] = {
            "previous token": previous_token_score(_attn(model, RANDOM)),
            "induction": induction_score(rep, repeats),
            "duplicate": copy_score(rep, repeats),
            "subject": subject_score(_attn(model, AGREEMENT), [(ex.subject_pos, ex.verb_pos) for ex in AGREEMENT]),
            "rep_attn": rep,
        }
        for key in ("previous token", "induction", "duplicate", "subject"):
            head, best = out[name][key].best()
            print(f"{name} {key}: best {head} {best:.3f} (uniform {out[name][key].baseline:.3f})")
    return out


def test_a_head_attends_to_the_previous_token_of_any_word_sequence(scores):
    assert scores["trained"]["previous token"].best()[1] >= 0.8


def test_a_head_copies_from_the_first_occurrence_of_a_repeated_sequence(scores):
    best = max(scores["trained"]["induction"].best()[1], scores["trained"]["duplicate"].best()[1])
    assert best >= 0.5


def test_a_head_attends_to_the_subject_where_the_verb_is_predicted(scores):
    assert scores["trained"]["subject"].best()[1] >= 0.9


def test_the_initialisation_is_within_noise_of_uniform(scores):
    u = scores["untrained"]
    assert u["previous token"].best()[1] <= 0.3
    assert u["induction"].best()[1] <= 0.15 and u["duplicate"].best()[1] <= 0.15


def test_induction_head_picks_the_right_continuation_not_any_earlier_word(scores):
    # A head could score on induction by spreading attention over the whole first copy. Compare the best
    # induction head's attention on the true continuation with its mean on the other words of the first copy.
    (layer, head), _ = scores["trained"]["induction"].best()
    right, wrong = [], []
    for ex, a in zip(REPEATED, scores["trained"]["rep_attn"]):
        m = (len(ex.tokens) - 1) // 2
        for first, second in ex.repeats:
            others = [i for i in range(1, m + 1) if i != first + 1]
            right.append(float(a[layer, head, second, first + 1]))
            wrong.append(float(a[layer, head, second, others].mean()))
    r, w = sum(right) / len(right), sum(wrong) / len(wrong)
    print(f"induction head {(layer, head)}: right continuation {r:.3f}, other words of the first copy {w:.3f}")
    assert r > 5 * w


def test_trained_predicts_agreement_and_the_initialisation_is_at_chance(trained, untrained):
    acc, acc_u = agreement_accuracy(trained, AGREEMENT), agreement_accuracy(untrained, AGREEMENT)
    print(f"agreement accuracy (attractor of the other number): trained {acc:.3f}, untrained {acc_u:.3f}")
    assert acc >= 0.95
    assert 0.3 <= acc_u <= 0.7  # chance is 0.5


REFERENCE = [ex.text for ex in corpus.agreement_examples(150, seed=3104, attractor="opposite")]


def _margin(model, ablate=()) -> float:
    """Mean logit margin of the agreeing verb form over the other one, where the verb is predicted; the heads in
    `ablate` mean-ablated over REFERENCE (the page's path: `run(..., ablation="mean", reference=...)`)."""
    total = 0.0
    for ex in AGREEMENT:
        row = model.run(ex.text, ablate, ablation="mean", reference=REFERENCE).logits[ex.verb_pos - 1]  # (V,)
        good, bad = (model.vocab.id(w) for w in (ex.verb_forms[int(ex.plural)], ex.verb_forms[1 - int(ex.plural)]))
        total += float(row[good] - row[bad])
    return total / len(AGREEMENT)


def test_switching_off_the_subject_head_removes_far_more_agreement_than_any_other_head(trained, scores):
    # Accuracy only counts the sign of the margin; the margin shows how much of the agreement a head carries.
    # Mean ablation (agreement_causal_check says why not zero). probes.json and the notes give other seeds' figures.
    top = scores["trained"]["subject"].best()[0]
    base = _margin(trained)
    margins = {(l, h): _margin(trained, [(l, h)]) for l in range(trained.n_layers) for h in range(trained.n_heads)}
    others = {head: m for head, m in margins.items() if head != top}
    nearest = min(others, key=others.get)
    print(f"agreement margin: all on {base:.2f}; without subject head {top} {margins[top]:.2f}; "
          f"without any one other head >= {others[nearest]:.2f} ({nearest})")
    assert margins[top] < 0.25 * base
    assert margins[top] < 0.5 * others[nearest]


@pytest.mark.parametrize("k", [2, 3])
def test_switching_off_the_top_subject_heads_removes_more_agreement_than_any_as_many_others(trained, scores, k):
    # The causal check, against every set of k other heads (not a sample), mean-ablated over REFERENCE.
    # Batched (tiny_probes.ablated_margins: one run_batch_keep per sentence, one row per set);
    # test_the_batched_probe_margins_equal_the_page_run ties it to the page's run.
    # Measured on the margin (as the single-head test above): accuracy only counts its sign. The shipped seed
    # (length-scaled attention): all on 8.18; the top 2 subject heads off -0.00 against 2.34 or more for any other
    # 2; the top 3 off -0.14 against 0.92 or more for any other 3 (the most harmful: L0 H0, H1, H2, which every
    # later head reads).
    from itertools import combinations

    L, H = trained.n_layers, trained.n_heads
    means = trained.head_means(REFERENCE)  # (L, H, dh)
    top = tuple(scores["trained"]["subject"].ranked()[:k])
    rest = [(l, h) for l in range(L) for h in range(H) if (l, h) not in top]
    sets = [(), top, *combinations(rest, k)]
    margins = ablated_margins(trained, AGREEMENT, sets, means).mean(1)  # (S,): each set's mean margin
    base, off = float(margins[0]), float(margins[1])
    others = {c: float(m) for c, m in zip(sets[2:], margins[2:])}
    mean_other = sum(others.values()) / len(others)
    worst = min(others, key=others.get)
    print(f"agreement margin: all on {base:.2f}; top {k} subject heads {top} off {off:.2f}; "
          f"{len(others)} sets of {k} others: mean {mean_other:.2f}, most harmful {others[worst]:.2f} {worst}")
    assert off < 0.25 * base  # most of the agreement is gone
    assert off < others[worst]  # more than the most harmful set of as many other heads


def test_the_batched_probe_margins_equal_the_page_run(trained):
    # tiny_probes.ablated_margins runs each sentence once with one row per set of heads switched off
    # (Model.run_batch_keep); each row must be the page's own run with those heads mean-ablated.
    examples = AGREEMENT[:6]
    sets = [(), ((2, 1), (0, 3)), ((1, 0),)]
    got = ablated_margins(trained, examples, sets, trained.head_means(REFERENCE))  # (3, 6)
    for s, heads in enumerate(sets):
        for i, ex in enumerate(examples):
            row = trained.run(ex.text, heads, ablation="mean", reference=REFERENCE).logits[ex.verb_pos - 1]  # (V,)
            agree, other = ex.verb_forms[int(ex.plural)], ex.verb_forms[1 - int(ex.plural)]
            margin = row[trained.token_id(agree)] - row[trained.token_id(other)]
            assert abs(float(got[s, i]) - float(margin)) < 1e-4


def test_the_probe_runs_are_the_page_runs(trained):
    from mha_viz.tiny_probes import run_examples

    examples = REPEATED[:5] + AGREEMENT[:5]
    attentions, logits = run_examples(trained, examples, logits=True)
    for i, ex in enumerate(examples):
        run = trained.run(ex.text)
        torch.testing.assert_close(attentions[i], run.attentions, atol=1e-5, rtol=0)
        torch.testing.assert_close(logits[i], run.logits, atol=1e-4, rtol=0)


def test_scores_on_hand_made_patterns():
    # The functions themselves, on patterns whose answer is known.
    T = 6
    prev = torch.zeros(1, 2, T, T)
    prev[0, 0, 0, 0] = 1
    prev[0, 0, torch.arange(1, T), torch.arange(0, T - 1)] = 1  # head 0: previous token
    prev[0, 1] = torch.ones(T, T).tril() / torch.arange(1, T + 1).unsqueeze(1)  # head 1: uniform
    s = previous_token_score(prev)
    assert s.scores[0, 0] == 1 and abs(float(s.scores[0, 1]) - s.baseline) < 1e-6
    assert s.best() == ((0, 0), 1.0)
    # Uniform causal attention scores exactly its baseline on every measure.
    uni = prev[:, 1:]
    assert abs(float(induction_score(uni, [(1, 4)]).scores) - 1 / 5) < 1e-6
    assert abs(float(copy_score(uni, [(1, 4)]).scores) - 1 / 5) < 1e-6
    assert abs(float(subject_score(uni, (1, 5)).scores) - 1 / 5) < 1e-6
    with pytest.raises(ValueError, match="looks ahead"):
        score_pairs(uni, [(2, 3)], "bad")
    with pytest.raises(ValueError, match="no \\(query, key\\) pairs"):
        induction_score(uni, [])


def test_the_probes_report_under_registered_names_on_the_censuss_inputs():
    """One vocabulary: each probe score is named by the registered measure it is, the one the census names that role
    by (census_result.role_scores for a causal model), and the random and repeated probe sets are the census's own
    generators (census_inputs) over the corpus's vocabulary. The probes used to file "previous_token" and "subject"
    and to draw those sets from the corpus's generators of their own."""
    from mha_viz import measures
    from mha_viz.analysis import census_inputs
    from mha_viz.analysis.census_result import role_scores
    from mha_viz.analysis.pairs import SUBJECT as PAIRS_SUBJECT
    from mha_viz.models.tiny.evidence import CONTEXT_RELATIONS, RELATION_WORDS, RELATIONS, SUBJECT, load_evidence
    from mha_viz.tiny_probes import ProbeConfig, ProbeSets, census_examples

    roles = role_scores(True)
    assert set(roles.values()) <= set(RELATIONS) and SUBJECT == roles["subject"] == PAIRS_SUBJECT
    assert all(name in measures.REGISTRY for name in RELATIONS) and set(RELATION_WORDS) == set(RELATIONS)
    assert set(CONTEXT_RELATIONS) <= set(RELATIONS)
    uni = torch.ones(1, 1, 6, 6).tril() / torch.arange(1, 7).unsqueeze(1)  # (1, 1, T, T)
    made = [previous_token_score(uni), induction_score(uni, [(1, 4)]), copy_score(uni, [(1, 4)]),
            subject_score(uni, (1, 5))]
    assert tuple(s.relation for s in made) == RELATIONS
    cfg = ProbeConfig(n_random=3, n_repeated=3, n_agreement=2, n_loss=2, n_reference=2, context_lengths=(12,),
                      n_context=2)
    sets = ProbeSets.build(cfg, 64)
    words = corpus.vocabulary_words()
    assert [ex.tokens[1:] for ex in sets.random] == [w.words for w in census_inputs.random_sequences(
        words, cfg.n_random, cfg.random_length, cfg.seed)]
    twice = census_inputs.repeated_sequences(words, cfg.n_repeated, cfg.repeated_lengths, cfg.seed + 1)
    assert [ex.tokens[1:] for ex in sets.repeated] == [w.words for w in twice]
    for ex, w in zip(sets.repeated, twice):  # word i is token i + 1; (first, second) of every word said twice
        assert sorted((s - 1, f - 1) for f, s in ex.repeats) == sorted(w.pairs["duplicate"])
    assert census_examples(census_inputs.random_sequences, 2, 5, 7)[0].repeats == ()
    shipped = load_evidence()
    assert shipped is not None and set(shipped["final"]["scores"]) == set(RELATIONS)
    assert set(shipped["final"]["context"]) == set(CONTEXT_RELATIONS)


def test_a_probe_file_written_before_the_registered_names_still_reads(tmp_path):
    import json

    from mha_viz.models.tiny.evidence import EVIDENCE, SUBJECT, load_evidence

    old = {"per_step": [{"step": 0, "scores": {"previous_token": [[0.5]], "subject": [[0.2]]},
                         "baselines": {"previous_token": 0.1, "subject": 0.1},
                         "context": {"previous_token": {}, "induction": {}}}]}
    (tmp_path / EVIDENCE).write_text(json.dumps(old))
    step = load_evidence(tmp_path)["per_step"][0]
    assert step["scores"] == {"previous": [[0.5]], SUBJECT: [[0.2]]} and set(step["context"]) == {"previous",
                                                                                                "induction"}
