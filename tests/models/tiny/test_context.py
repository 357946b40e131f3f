"""The tiny model across its whole context: in every shipped seed, one head attends to the previous
token and one head does induction at >= 0.9 in every position band (thirds of the text) at input lengths 12, 40
and 64 (the model's max_len). Checked twice: in the shipped evidence (each seed's probes.json, re-measured here
so a stale file fails), and on fresh random sequences from seeds the probes never used (2029-2034 are theirs),
through the page's `run`, finding each head by its score rather than by name."""
import pytest
import torch

from mha_viz import load_model, seeds
from mha_viz.models.tiny import corpus
from mha_viz.models.tiny.evidence import CONTEXT_RELATIONS, context_roles, load_evidence
from mha_viz.models.tiny.train import SEEDS, TINY_ASSETS, seed_folders, sha256
from mha_viz.tiny_probes import (
    ContextSets,
    ProbeConfig,
    band_of,
    banded_scores,
    measure_context,
    previous_token_pairs,
)

TARGET = 0.9
LENGTHS = ProbeConfig().context_lengths
FOLDERS = [TINY_ASSETS, *seed_folders(TINY_ASSETS)]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/models/tiny/conftest.py


def _name(folder) -> str:
    if isinstance(folder, str):
        return folder
    return "tiny" if folder == TINY_ASSETS else f"tiny#{folder.name}"


def test_every_listed_seed_ships_with_its_evidence():
    assert [_name(f) for f in FOLDERS] == seeds("tiny") == ["tiny"] + [f"tiny#seed{s}" for s in SEEDS]
    for folder in FOLDERS:
        evidence = load_evidence(folder)
        assert evidence is not None, f"no probes.json in {folder}: run `make probe`"
        for name, digest in evidence["weights"].items():
            assert sha256(folder / name) == digest, f"{folder / name} changed since `make probe`: run it again"
        assert tuple(evidence["probe_config"]["context_lengths"]) == LENGTHS
        assert [s["step"] for s in evidence["per_step"]] == evidence["steps"]
        assert all("context" in s for s in evidence["per_step"]), "every saved step is measured over the context"


# The target. The recipe (train.py: late repeats, early repeats, 65-token texts, 4,000 steps) mended the
# shipped seed's induction at positions 4-7 of a 12-token text (0.84 without the early repeats); the position margin
# (TinyConfig.train_margin) the last positions of the context. What was left: a seed whose previous-token head
# faded along the text (seed 1's L1 H1: 0.97 at position 20, 0.84-0.89 at 52-63, its lost weight spread over the
# 3-16 keys before), because with plain softmax a fixed score margin buys less weight as keys accumulate. Four
# recipe changes only moved which seed faded; scaling each query's scores by log(keys it sees)
# (TinyConfig.length_scaled) made every seed hold.


def _cases(names):
    return [pytest.param(n, rel, id=f"{_name(n)}-{rel}") for n in names for rel in CONTEXT_RELATIONS]


@pytest.mark.parametrize("folder,rel", _cases(FOLDERS))
def test_the_evidence_shows_both_heads_hold_every_band_at_every_length(folder, rel):
    final = load_evidence(folder)["final"]
    roles = context_roles(final["context"])
    role = roles[rel]
    print(f"{_name(folder)} {rel}: L{role['head'][0]} H{role['head'][1]} {role['bands']}")
    assert set(role["bands"]) == {str(n) for n in LENGTHS}
    for length, bands in role["bands"].items():
        assert [e["band"] for e in final["context"][rel][length]] == list(range(len(bands)))
        scored = [v for v in bands if v is not None]
        # Only induction at the start of a short text has no pair (the second copy of a 3-word sequence
        # starts at position 4 at the earliest); every band of a 40- or 64-token text has pairs.
        assert len(scored) == len(bands) or (rel == "induction" and length == "12" and bands[0] is None)
        assert min(scored) >= TARGET, f"{_name(folder)} {rel} at length {length}: {bands}"


@pytest.mark.parametrize("folder", FOLDERS, ids=_name)
def test_the_files_context_numbers_match_a_fresh_measurement_of_the_weights(folder):
    from mha_viz.models.tiny.adapter import load_tiny

    cfg = ProbeConfig(**{k: tuple(v) if isinstance(v, list) else v
                         for k, v in load_evidence(folder)["probe_config"].items()})
    sets = [ContextSets.build(n, cfg.n_context, cfg.seed + 5 + 2 * i) for i, n in enumerate(cfg.context_lengths)]
    fresh = measure_context(load_tiny(folder=folder), sets, cfg.n_bands)
    shipped = load_evidence(folder)["final"]["context"]
    for rel in CONTEXT_RELATIONS:
        for length, bands in shipped[rel].items():
            for a, b in zip(bands, fresh[rel][length]):
                assert (a["n_pairs"], a["positions"]) == (b["n_pairs"], b["positions"])
                if a["scores"] is not None:
                    assert torch.allclose(torch.tensor(a["scores"]), torch.tensor(b["scores"]), atol=2e-4)


def _fresh_bands(model, length: int, seed: int) -> dict[str, list]:
    """Both relations per band on new texts, one `run` per text as the page does; heads found by score."""
    texts = {"previous": corpus.unrepeated_sequences(20, seed, length),
             "induction": corpus.placed_repeats(30, seed + 1, length)}
    out = {}
    for rel, examples in texts.items():
        runs = [model.run(ex.text) for ex in examples]
        assert all(list(r.tokens) == list(ex.tokens) for r, ex in zip(runs, examples))
        pairs = ([previous_token_pairs(len(ex.tokens)) for ex in examples] if rel == "previous"
                 else [[(s, f + 1) for f, s in ex.repeats] for ex in examples])
        out[rel] = banded_scores([r.attentions for r in runs], pairs, length, 3, rel)
    return out


@pytest.mark.parametrize("name,rel", _cases(seeds("tiny")))
def test_on_sequences_the_probes_never_used_the_same_heads_hold_every_band(name, rel):
    model = load_model(name)
    by_length = {n: _fresh_bands(model, n, 5101 + 10 * n) for n in LENGTHS}
    # The head with the best mean over every band and length: one head must carry the whole context.
    cells = [torch.tensor(e["scores"]) for n in LENGTHS for e in by_length[n][rel] if e["scores"] is not None]
    mean = torch.stack(cells).mean(0)  # (L, H)
    head = divmod(int(mean.argmax()), mean.shape[1])
    final = load_evidence(model.folder)["final"]["context"]
    shipped, context = tuple(context_roles(final)[rel]["head"]), final[rel]
    # A pattern can be split over two heads that both hold it (tiny#seed2's L1 H0 and L1 H1 do induction
    # within 0.005 of each other on average), so fresh texts may pick the other one: then it must hold every
    # band in the file too, and both must hold every band here.
    in_file = min(e["scores"][head[0]][head[1]] for bands in context.values() for e in bands if e["scores"])
    assert head == shipped or in_file >= TARGET, \
        f"{name} {rel}: fresh texts pick L{head} ({in_file:.2f} at worst in the file), the file L{shipped}"
    for lh in dict.fromkeys([head, shipped]):
        for n in LENGTHS:
            bands = [None if e["scores"] is None else e["scores"][lh[0]][lh[1]] for e in by_length[n][rel]]
            print(f"{name} {rel} L{lh[0]} H{lh[1]} length {n}: {bands}")
            assert min(v for v in bands if v is not None) >= TARGET, f"{name} {rel} L{lh} at length {n}: {bands}"


def test_bands_split_the_text_into_thirds_and_score_only_their_own_pairs():
    assert [band_of(q, 12, 3) for q in range(12)] == [0] * 4 + [1] * 4 + [2] * 4
    assert [band_of(q, 64, 3) for q in (21, 22, 42, 43, 63)] == [0, 1, 1, 2, 2]
    T = 9
    a = torch.zeros(1, 2, T, T)  # (L, H, Q, K): head 0 looks back one token, head 1 at <bos>
    a[0, 0, 0, 0] = 1
    a[0, 0, torch.arange(1, T), torch.arange(0, T - 1)] = 1
    a[0, 0, 7:, :] = 0
    a[0, 0, 7:, 0] = 1  # ... except in the last third
    a[0, 1, :, 0] = 1
    bands = banded_scores([a], [previous_token_pairs(T)], T, 3, "previous token")
    assert [e["positions"] for e in bands] == [[0, 2], [3, 5], [6, 8]]
    assert [e["n_pairs"] for e in bands] == [1, 3, 3]  # previous-token pairs start at position 2
    assert [e["scores"][0][0] for e in bands] == [1.0, 1.0, round(1 / 3, 4)]
    assert all(e["scores"][0][1] == 0.0 for e in bands)
    empty = banded_scores([a], [[(8, 4)]], T, 3, "induction")
    assert [e["n_pairs"] for e in empty] == [0, 0, 1] and empty[0]["scores"] is None


def test_placed_repeats_are_distinct_words_with_one_sequence_said_twice_anywhere():
    examples = corpus.placed_repeats(200, seed=7, length=64)
    ends = set()
    for ex in examples:
        assert len(ex.tokens) == 64 and ex.tokens[0] == corpus.BOS
        m = len(ex.repeats)
        assert m >= 3
        for first, second in ex.repeats:
            assert ex.tokens[first] == ex.tokens[second] and second - first == m
        words = [t for i, t in enumerate(ex.tokens[1:], 1) if i not in {s for _, s in ex.repeats}]
        assert len(set(words)) == len(words)  # every other word occurs once
        ends.add(band_of(ex.repeats[-1][1], 64, 3))
    assert ends == {0, 1, 2}  # second copies end in every third of the text
    for ex in corpus.unrepeated_sequences(5, seed=7, length=64):
        assert len(ex.tokens) == 64 and len(set(ex.tokens)) == 64
