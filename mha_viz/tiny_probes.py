"""The tiny model's probes (`make probe`): pattern scores per head, measured against ground truth from generated
inputs, with uniform baselines, and the causal check of agreement; written to each model folder's probes.json.
Each score is filed under its registered measure (`mha_viz.measures`; `evidence.RELATIONS`): "previous" and
"induction"/"duplicate" on the census's own generators (`analysis.census_inputs`: random word sequences, distinct
words said twice) over the corpus's vocabulary, "pre-verb→subject" on the corpus's agreement sentences, which the
census's templates cannot replace (each needs its verb's two forms, for agreement, and the training distribution).

Every score is the mean attention weight a head puts on a target key, over (query, key) pairs picked from ground
truth. The baseline is the same mean for a head that spreads its attention evenly over every key it may see
(1 / (q + 1) for a causal query at q). A head is "doing" a pattern only as far as it beats that baseline, and even
then the score is a measured heuristic, not a label of what the head is for.

Tensors: attentions (L, H, Q, K) float32, as in `AttentionRun.attentions`.

A consumer of both models/ and analysis/, above them: it measures the tiny model through the contract only
(`Model.run_many` for the runs with every head on, `Model.run_batch_keep` for the heads switched off), with the
page's pair scorers (analysis/pairs.py: one definition of each score, shared with the Similarity view and the
census). models/tiny/evidence.py reads the file it writes, so the model needs nothing from here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

import torch

from mha_viz.analysis import census_inputs
from mha_viz.analysis.pairs import (  # noqa: F401  (the scorers the probe tests use too)
    SUBJECT,
    HeadScores,
    Pair,
    copy_score,
    induction_score,
    previous_token_pairs,
    previous_token_score,
    score_pairs,
    subject_score,
)
from mha_viz.contract import Head, Model
from mha_viz.models.tiny.evidence import (  # noqa: F401
    EVIDENCE,
    RELATION_WORDS,
    RELATIONS,
    causal_summary,
    load_evidence,
    set_verdict,
    typed_evidence,
)
from mha_viz.names import head_name


def verb_form_ids(model: Model, ex) -> tuple[int, int]:
    """(id of the verb form that agrees with the subject, id of the other form) of one agreement example."""
    agree, other = ex.verb_forms[int(ex.plural)], ex.verb_forms[1 - int(ex.plural)]
    return model.token_id(agree), model.token_id(other)


def agreement_accuracy(model, examples: Iterable, ablate: Iterable[Head] = ()) -> float:
    """Share of agreement examples where the model's next-token logit at the position before the verb is higher
    for the verb form that agrees with the subject than for the other form (Linzen et al. 2016; chance is 0.5).

    model: the tiny model (any model whose tokens are the generator's words); examples: `corpus.Example`s with verb
    annotations.
    """
    ablate = frozenset(ablate)
    correct = total = 0
    for ex in examples:
        if ex.verb_pos is None or ex.verb_forms is None:
            raise ValueError("agreement_accuracy needs examples with verb_pos and verb_forms "
                             "(corpus.agreement_examples)")
        run = model.run(ex.text, ablate)
        if list(run.tokens) != list(ex.tokens):
            raise ValueError(f"the model tokenized {ex.text!r} differently from the generator; positions would be off")
        row = run.logits[ex.verb_pos - 1]  # (V,)
        good, bad = verb_form_ids(model, ex)
        correct += int(row[good] > row[bad])
        total += 1
    if total == 0:
        raise ValueError("no examples given to agreement_accuracy")
    return correct / total


# -- the probe command: every measure on every saved checkpoint, written to assets/tiny/probes.json ------------
# Held-out inputs: seeds the trainer never uses (its data_seed is 1234), inputs it never saw in this form.
@dataclass(frozen=True)
class ProbeConfig:
    n_random: int = 60  # random in-vocabulary word sequences: the previous-token measure
    random_length: int = 32
    n_repeated: int = 60  # random sequences said twice: induction and duplicate measures
    repeated_lengths: tuple[int, int] = (8, 24)
    n_agreement: int = 300  # agreement sentences whose attractor has the other number: subject and accuracy
    n_loss: int = 200  # texts from the training distribution: held-out loss
    n_reference: int = 200  # other agreement sentences: the mean outputs that switched-off heads give instead
    # The whole context: previous-token and induction per position band (thirds of the text), at several input
    # lengths (tokens with <bos>; 128 is the model's max_len), on distinct random words (corpus.unrepeated_sequences
    # and corpus.placed_repeats, a sequence said twice anywhere in the text).
    context_lengths: tuple[int, ...] = (12, 40, 128)
    n_context: int = 60  # texts per length and relation
    n_bands: int = 3
    seed: int = 2024  # seed, seed + 1, ..., seed + 4 for the five sets; seed + 5 + 2i, seed + 6 + 2i for length i


def run_examples(model: Model, examples, logits: bool = False) -> tuple[list[torch.Tensor], list]:
    """Each example run with every head on, through the contract (`Model.run_many`: texts of similar length in
    padded batches, the same numbers as one `run` each). Returns (attentions, each (L, H, n, n); logits, each
    (n, V), or None without `logits`). The generator's tokens must be what the model makes of the text, or the
    ground-truth positions would point at other words."""
    def keep(i: int, run) -> tuple:
        if list(run.tokens) != list(examples[i].tokens):
            raise ValueError(f"the model tokenized {examples[i].text!r} differently from the generator "
                             f"({run.tokens[:8]} ...); positions would be off")
        return run.attentions, run.logits

    got = model.run_many([ex.text for ex in examples], keep, logits=logits)
    return [a for a, _ in got], [lg for _, lg in got]


def verb_margins(model: Model, examples, rows: torch.Tensor) -> torch.Tensor:
    """The logit of the agreeing verb form minus the other form's, where the verb is predicted -> (N,), from `rows`
    (N, V): each example's logits at verb_pos - 1."""
    ids = torch.tensor([verb_form_ids(model, ex) for ex in examples])  # (N, 2): agreeing, other
    picked = rows.gather(1, ids)  # (N, 2)
    return picked[:, 0] - picked[:, 1]  # (N,)


def agreement(margins: torch.Tensor) -> dict | list[dict]:
    """Agreement accuracy (the share of positive margins, Linzen et al. 2016; chance 0.5) and the mean margin
    (nats), rounded as the probe file keeps them. margins: (N,) or (S, N) -> one dict, or S of them."""
    if margins.ndim == 2:
        return [agreement(m) for m in margins]
    return {"accuracy": round(float((margins > 0).float().mean()), 4), "margin": round(float(margins.mean()), 4)}


def ablated_margins(model: Model, examples, head_sets: list, means: torch.Tensor) -> torch.Tensor:
    """For each set of heads, switched off together by mean ablation (each one's output set to its row of `means`
    (L, H, dh) at every position), every example's verb margin (`verb_margins`) -> (S, N). One
    `Model.run_batch_keep` per example, one row per set, logits read only where the verb is predicted."""
    keep = torch.ones(len(head_sets), model.n_layers, model.n_heads)  # (S, L, H)
    for s, heads in enumerate(head_sets):
        for layer, head in heads:
            keep[s, layer, head] = 0.0
    replace = means[None, :, :, None]  # (1, L, H, 1, dh): the same mean at every position of every row
    ids = torch.tensor([verb_form_ids(model, ex) for ex in examples])  # (N, 2)
    out = torch.empty(len(head_sets), len(examples))  # (S, N)
    for i, ex in enumerate(examples):
        _, logits = model.run_batch_keep(ex.text, keep, replace, positions=[ex.verb_pos - 1])  # (S, 1, V)
        picked = logits[:, 0, ids[i]]  # (S, 2)
        out[:, i] = picked[:, 0] - picked[:, 1]
    return out


def heldout_loss(model: Model, examples) -> float:
    """Mean next-token cross-entropy (nats) over every target of `examples`, pooled over texts."""
    def nats(i: int, run) -> tuple[float, int]:
        ids = torch.tensor(run.token_ids)  # (n,)
        return float(torch.nn.functional.cross_entropy(run.logits[:-1], ids[1:], reduction="sum")), len(ids) - 1

    sums = model.run_many([ex.text for ex in examples], nats, logits=True)
    return sum(s for s, _ in sums) / sum(n for _, n in sums)


@dataclass(frozen=True)
class ContextSets:
    """Texts of one input length for the whole-context measures: distinct random words (previous token) and
    distinct random words with a sequence said twice somewhere (induction)."""
    length: int
    unrepeated: list
    repeated: list

    @classmethod
    def build(cls, length: int, n: int, seed: int) -> "ContextSets":
        from mha_viz.models.tiny import corpus

        return cls(length, corpus.unrepeated_sequences(n, seed, length), corpus.placed_repeats(n, seed + 1, length))


def band_of(q: int, length: int, n_bands: int) -> int:
    """The position band (0 = the first of n_bands equal stretches of a `length`-token text) query q falls in."""
    return q * n_bands // length


def band_positions(band: int, length: int, n_bands: int) -> list[int]:
    """[first, last] query position of `band` in a `length`-token text (<bos> is position 0)."""
    inside = [q for q in range(length) if band_of(q, length, n_bands) == band]
    return [inside[0], inside[-1]]


def banded_scores(attentions: list[torch.Tensor], pairs: list[list[Pair]], length: int, n_bands: int,
                  relation: str) -> list[dict]:
    """`score_pairs` on the (query, key) pairs of each position band separately: per band its query positions,
    the number of pairs, the (L, H) scores as nested lists and the uniform baseline. A band no pair falls in
    (induction at the start of a short text) has n_pairs 0 and scores None."""
    out = []
    for band in range(n_bands):
        inside = [[(q, k) for q, k in ps if band_of(q, length, n_bands) == band] for ps in pairs]
        entry = {"band": band, "positions": band_positions(band, length, n_bands),
                 "n_pairs": sum(len(ps) for ps in inside), "scores": None, "baseline": None}
        if entry["n_pairs"]:
            kept = [(a, ps) for a, ps in zip(attentions, inside) if ps]
            s = score_pairs([a for a, _ in kept], [ps for _, ps in kept], relation)
            entry["scores"] = [[round(float(v), 4) for v in row] for row in s.scores]
            entry["baseline"] = round(s.baseline, 4)
        out.append(entry)
    return out


def measure_context(model, sets: "list[ContextSets]", n_bands: int) -> dict:
    """Previous-token and induction scores per position band at every probed length:
    {"previous": {"12": [band, ...], ...}, "induction": {...}} (`banded_scores` entries)."""
    out: dict = {"previous": {}, "induction": {}}
    for cs in sets:
        att_u, _ = run_examples(model, cs.unrepeated)
        att_r, _ = run_examples(model, cs.repeated)
        prev_pairs = [previous_token_pairs(a.shape[-1]) for a in att_u]
        ind_pairs = [[(s, f + 1) for f, s in ex.repeats] for ex in cs.repeated]
        out["previous"][str(cs.length)] = banded_scores(att_u, prev_pairs, cs.length, n_bands, "previous")
        out["induction"][str(cs.length)] = banded_scores(att_r, ind_pairs, cs.length, n_bands, "induction")
    return out


def census_examples(generator, n: int, length, seed: int) -> list:
    """The census's generator (`census_inputs.random_sequences` or `repeated_sequences`) over the corpus's vocabulary,
    as the corpus's `Example`s the probes run: <bos> first, so word i is token i + 1, and a word said twice gives
    `repeats` (first, second) from the generator's duplicate pairs."""
    from mha_viz.models.tiny import corpus

    out = []
    for item in generator(corpus.vocabulary_words(), n, length, seed):
        repeats = tuple(sorted((k + 1, q + 1) for q, k in item.pairs.get("duplicate", ())))
        out.append(corpus.Example(tokens=(corpus.BOS, *item.words), relation="repeat" if repeats else "random",
                                  repeats=repeats))
    return out


@dataclass(frozen=True)
class ProbeSets:
    random: list
    repeated: list
    agreement: list
    loss: list
    reference: list
    context: tuple = ()  # ContextSets, one per length
    n_bands: int = 3

    @classmethod
    def build(cls, cfg: ProbeConfig, max_len: int, random_share: float = 0.0,
              late_share: float = 0.0, early_share: float = 0.0, english_share: float = 0.0,
              english_repeat_share: float = 0.0) -> "ProbeSets":
        from mha_viz.models.tiny import corpus

        too_long = [n for n in cfg.context_lengths if n > max_len]
        if too_long:
            raise ValueError(f"context lengths {too_long} exceed the model's max_len {max_len}")
        return cls(
            random=census_examples(census_inputs.random_sequences, cfg.n_random, cfg.random_length, cfg.seed),
            repeated=census_examples(census_inputs.repeated_sequences, cfg.n_repeated, cfg.repeated_lengths,
                                     cfg.seed + 1),
            agreement=corpus.agreement_examples(cfg.n_agreement, cfg.seed + 2, "opposite", max_len),
            loss=corpus.training_texts(cfg.n_loss, cfg.seed + 3, max_len, random_share, late_share,
                                      early_share, english_share, english_repeat_share),
            reference=corpus.agreement_examples(cfg.n_reference, cfg.seed + 4, "opposite", max_len),
            context=tuple(ContextSets.build(n, cfg.n_context, cfg.seed + 5 + 2 * i)
                          for i, n in enumerate(cfg.context_lengths)),
            n_bands=cfg.n_bands,
        )


def measure(model, sets: ProbeSets) -> dict:
    """Every measure of one model on the held-out sets: per-head scores (L, H) as nested lists, their uniform
    baselines, the agreement accuracy and the held-out loss."""
    att_random, _ = run_examples(model, sets.random)
    att_rep, _ = run_examples(model, sets.repeated)
    att_agr, logits_agr = run_examples(model, sets.agreement, logits=True)
    repeats = [ex.repeats for ex in sets.repeated]
    scores = {
        "previous": previous_token_score(att_random),
        "induction": induction_score(att_rep, repeats),
        "duplicate": copy_score(att_rep, repeats),
        SUBJECT: subject_score(att_agr, [(ex.subject_pos, ex.verb_pos) for ex in sets.agreement]),
    }
    rows = torch.stack([lg[ex.verb_pos - 1] for lg, ex in zip(logits_agr, sets.agreement)])  # (N, V)
    out = {
        "loss": round(heldout_loss(model, sets.loss), 4),
        "agreement_accuracy": agreement(verb_margins(model, sets.agreement, rows))["accuracy"],
        "scores": {k: [[round(float(v), 4) for v in row] for row in s.scores] for k, s in scores.items()},
        "baselines": {k: round(s.baseline, 4) for k, s in scores.items()},
    }
    if sets.context:
        out["context"] = measure_context(model, list(sets.context), sets.n_bands)
    return out


SET_SIZES = (1, 2, 3)  # the causal check switches off the top 1, 2 and 3 subject heads, and every set of as many others


def agreement_causal_check(model, sets: ProbeSets, subject_scores: torch.Tensor) -> dict:
    """Does agreement run through the heads that attend to the subject? Switch heads off and measure agreement
    (accuracy, and the mean logit margin of the agreeing verb form) on the held-out agreement sentences.

    "Off" is mean ablation: a head's output is replaced by its mean over every position of other sentences of the
    same task (`sets.reference`: agreement sentences from another seed), as Wang et al. 2022 (*Interpretability in
    the wild*, the IOI circuit) replace a head by its mean over the task's distribution, rather than by 0. A zeroed
    layer-0 head shifts every later layer's input off the distribution it was trained on, so zeroing *any* layer-0
    head hurts agreement, whatever it attends to (measured: 20 random sets of 3 zeroed heads left as little as 37%);
    the mean keeps that typical contribution and removes only what the head says about this sentence.

    - "heads": each head switched off alone (as Michel et al. 2019 ablate heads one at a time).
    - "sets": for k in SET_SIZES, the k heads with the highest subject scores switched off together, against
      EVERY set of k other heads (all C(L*H - k, k) of them, not a sample).
    Returns {"ablation", "reference", "none", "top", "heads": (L, H) nested {"accuracy", "margin"}, "sets": [...]}.
    """
    from itertools import combinations

    L, H = subject_scores.shape
    means = model.head_means([ex.text for ex in sets.reference])  # (L, H, dh), the page's mean-ablation path
    every = [(l, h) for l in range(L) for h in range(H)]
    ranked = sorted(every, key=lambda lh: (-float(subject_scores[lh]), lh))
    # Every set of heads the check switches off, measured in one pass over the sentences (one row per set).
    other_sets = {k: list(combinations([lh for lh in every if lh not in ranked[:k]], k)) for k in SET_SIZES}
    head_sets = [(), *[(lh,) for lh in every], *[tuple(ranked[:k]) for k in SET_SIZES],
                 *[c for k in SET_SIZES for c in other_sets[k]]]
    head_sets = list(dict.fromkeys(head_sets))  # the top head alone is also a single head
    result = dict(zip(head_sets, agreement(ablated_margins(model, sets.agreement, head_sets, means))))

    def ablated(heads) -> dict:
        return result[tuple(heads)]

    heads = [[ablated([(l, h)]) for h in range(H)] for l in range(L)]
    out_sets = []
    for k in SET_SIZES:
        top = ranked[:k]
        others = [ablated(c) for c in other_sets[k]]
        worst = min(range(len(others)), key=lambda i: (others[i]["accuracy"], others[i]["margin"]))
        worst_set = other_sets[k][worst]
        out_sets.append({
            "k": k, "top": [list(lh) for lh in top], "top_result": ablated(top), "n_others": len(others),
            "others_mean_accuracy": round(sum(o["accuracy"] for o in others) / len(others), 4),
            "others_mean_margin": round(sum(o["margin"] for o in others) / len(others), 4),
            "worst_other": [list(lh) for lh in worst_set], "worst_other_result": others[worst],
        })
    return {"ablation": "mean", "reference": "other agreement sentences", "none": ablated(()),
            "top": list(ranked[0]), "heads": heads, "sets": out_sets}


def probe(folder, cfg: ProbeConfig = ProbeConfig(), quiet: bool = True, causal: bool = True) -> dict:
    """Measure every saved checkpoint of the tiny model in `folder` (and, with `causal`, the causal check on the
    last one); returns the evidence as written to `folder`/probes.json."""
    import json
    from pathlib import Path

    from mha_viz.models.tiny.adapter import checkpoint_steps, load_tiny
    from mha_viz.models.tiny.train import LOG, sha256

    folder = Path(folder)
    steps = checkpoint_steps(folder)
    if not steps:
        raise FileNotFoundError(f"no checkpoints in {folder / 'checkpoints'}; run `make train` first")
    log = json.loads((folder / LOG).read_text()) if (folder / LOG).exists() else {}
    train_config = log.get("train_config", {})
    shares = tuple(train_config.get(k, 0.0) for k in ("random_share", "late_share", "early_share", "english_share",
                                                      "english_repeat_share"))
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the same sums in the same order on any machine, so the test can compare closely
    try:
        final = load_tiny(folder=folder)
        sets = ProbeSets.build(cfg, final.config.max_len, *shares)
        per_step = []
        for step in steps:
            result = {"step": step, **measure(load_tiny(folder=folder, step=step), sets)}
            per_step.append(result)
            if not quiet:
                best = {k: max(max(r) for r in v) for k, v in result["scores"].items()}
                print(f"step {step:>6}: loss {result['loss']:.3f}, "
                      + ", ".join(f"{k} {v:.2f}" for k, v in best.items())
                      + f", agreement {result['agreement_accuracy']:.3f}", flush=True)
        last = measure(final, sets)
        subject = torch.tensor(last["scores"][SUBJECT])  # (L, H)
        checked = {"causal": agreement_causal_check(final, sets, subject)} if causal else {}
    finally:
        torch.set_num_threads(before)
    return {
        "about": "Written by `make probe` (python -m mha_viz.tiny_probes) from the saved weights. Scores "
                 "are mean attention weights on held-out inputs, per head (layer, head); baselines are uniform "
                 "attention over the visible keys; \"context\" holds previous-token and induction per position "
                 "band (thirds of the text) at several input lengths. A test recomputes every number from the "
                 "shipped weights.",
        "probe_config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
        "weights": {p.relative_to(folder).as_posix(): sha256(p)
                    for p in [folder / "model.safetensors", *sorted((folder / "checkpoints").glob("*.safetensors"))]},
        "steps": steps,
        "per_step": per_step,
        "final": {**last, "step": steps[-1], **checked},
    }


def best_head(scores: list[list[float]]) -> tuple[tuple[int, int], float]:
    """The (layer, head) with the highest score, ties to the lowest (layer, head), and its score."""
    L, H = len(scores), len(scores[0])
    head = min(((l, h) for l in range(L) for h in range(H)), key=lambda lh: (-scores[lh[0]][lh[1]], lh))
    return head, scores[head[0]][head[1]]


def write_probe(folder, causal: bool = True) -> dict:
    """`probe` the folder and write its evidence file there (what `make probe` does for each seed)."""
    import json
    from pathlib import Path

    evidence = probe(folder, quiet=False, causal=causal)
    (Path(folder) / EVIDENCE).write_text(json.dumps(evidence, indent=1) + "\n")
    print(f"wrote {Path(folder) / EVIDENCE}")
    return evidence


def main(argv: list[str] | None = None) -> None:
    import argparse
    from pathlib import Path

    from mha_viz.models.tiny.evidence import context_roles
    from mha_viz.models.tiny.train import seed_folders
    from mha_viz.settings import ASSETS

    parser = argparse.ArgumentParser(description="Measure every saved checkpoint of the tiny model and of every "
                                                 "other training seed under it, and write probes.json next to "
                                                 "each one's weights.")
    parser.add_argument("--folder", default=str(ASSETS / "tiny"), help="the tiny model's folder")
    parser.add_argument("--no-seeds", action="store_true", help="only the folder itself, not its seeds/seedN")
    parser.add_argument("--seed", type=int, default=None, help="only seed N under the folder (0: the folder)")
    args = parser.parse_args(argv)
    root = Path(args.folder)
    folders = [root] if args.no_seeds else [root, *seed_folders(root)]
    if args.seed is not None:
        folders = [root if args.seed == 0 else root / "seeds" / f"seed{args.seed}"]
    for folder in folders:
        print(f"{folder}:")
        # The causal check (every set of up to 3 heads switched off) on the shipped seed only: it is most of
        # the probe's time, and the other seeds are there to show which head took which pattern.
        evidence = write_probe(folder, causal=folder == root)
        final = evidence["final"]
        for rel in RELATIONS:  # the notes view words the rest (mha_viz/app/views/notes.py)
            head, value = best_head(final["scores"][rel])
            print(f"{rel}: {head_name(head)} {value:.0%} (uniform {final['baselines'][rel]:.0%})")
        for rel, role in context_roles(final["context"]).items():
            bands = "; ".join(f"length {n}: " + " / ".join("-" if v is None else f"{v:.2f}" for v in b)
                              for n, b in role["bands"].items())
            print(f"{rel} over the context: {head_name(tuple(role['head']))}, lowest band {role['min']:.2f} "
                  f"({bands})")
        print()


if __name__ == "__main__":
    main()
