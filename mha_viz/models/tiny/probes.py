"""Pattern scores per head, measured against ground truth from the corpus generator, with uniform baselines.

Every score is the mean attention weight a head puts on a target key, over (query, key) pairs picked from ground
truth. The baseline is the same mean for a head that spreads its attention evenly over every key it may see
(1 / (q + 1) for a causal query at q). A head is "doing" a pattern only as far as it beats that baseline, and even
then the score is a measured heuristic, not a label of what the head is for.

Tensors: attentions (L, H, Q, K) float32, as in `AttentionRun.attentions`.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable

import torch

# The pair scorers are the page's (one definition of each score, shared with the Similarity view and the census).
# The probe command is a consumer of analysis/ that lives here until issue 18 moves it: the one exception to the
# models -> analysis rule in tests/unit/test_layers.py.
from mha_viz.analysis.pairs import (  # noqa: F401
    HeadScores,
    Pair,
    copy_score,
    induction_score,
    previous_token_pairs,
    previous_token_score,
    score_pairs,
    subject_score,
)
from mha_viz.contract import Head
from mha_viz.models.interventions import HeadEdit
from mha_viz.models.tiny.evidence import (  # noqa: F401
    EVIDENCE,
    RELATION_WORDS,
    RELATIONS,
    causal_summary,
    load_evidence,
    set_verdict,
    typed_evidence,
)


def verb_form_ids(model, ex) -> tuple[int, int]:
    """(id of the verb form that agrees with the subject, id of the other form) of one agreement example."""
    agree, other = ex.verb_forms[int(ex.plural)], ex.verb_forms[1 - int(ex.plural)]
    return model.vocab.id(agree), model.vocab.id(other)


def agreement_accuracy(model, examples: Iterable, ablate: Iterable[Head] = ()) -> float:
    """Share of agreement examples where the model's next-token logit at the position before the verb is higher
    for the verb form that agrees with the subject than for the other form (Linzen et al. 2016; chance is 0.5).

    model: a `TinyModel` (anything with `run` and `vocab`); examples: `corpus.Example`s with verb annotations.
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
    # lengths (tokens with <bos>; 64 is the model's max_len), on distinct random words (corpus.unrepeated_sequences
    # and corpus.placed_repeats, a sequence said twice anywhere in the text).
    context_lengths: tuple[int, ...] = (12, 40, 64)
    n_context: int = 60  # texts per length and relation
    n_bands: int = 3
    seed: int = 2024  # seed, seed + 1, ..., seed + 4 for the five sets; seed + 5 + 2i, seed + 6 + 2i for length i


def forward_batch(model, examples, keep: torch.Tensor | None = None,
                  replace: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """One batched forward of corpus examples through a TinyModel's network (padded on the right: the model is
    causal, so padding after a text changes nothing at its positions). keep: (L, H), 1 = head on; replace:
    (L, H, dh), what a switched-off head outputs instead of 0 (mean ablation), the page's `HeadEdit`.
    Returns (logits (N, T, V), attentions (N, L, H, T, T), lengths)."""
    lengths = [len(ex.tokens) for ex in examples]
    ids = torch.full((len(examples), max(lengths)), model.vocab.pad_id, dtype=torch.long)  # (N, T)
    for i, ex in enumerate(examples):
        ids[i, : lengths[i]] = torch.tensor(model.vocab.encode(list(ex.tokens)))
    keep = None if keep is None else keep[None]  # (1, L, H)
    edit = HeadEdit(keep, None if replace is None or keep is None else replace[None, :, :, None])  # (1, L, H, 1, dh)
    with torch.no_grad():
        logits, _, attentions = model.lm(ids, None, edit)  # (N, T, V), _, (N, L, H, T, T)
    return logits.float(), attentions.float(), lengths


def _per_text(attentions: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    return [attentions[i, :, :, :n, :n] for i, n in enumerate(lengths)]  # each (L, H, n, n)


def agreement_from_logits(model, examples, logits: torch.Tensor) -> float:
    """`agreement_accuracy` on logits (N, T, V) already computed for `examples`."""
    correct = 0
    for i, ex in enumerate(examples):
        row = logits[i, ex.verb_pos - 1]  # (V,)
        good, bad = verb_form_ids(model, ex)
        correct += int(row[good] > row[bad])
    return correct / len(examples)


def heldout_loss(model, examples) -> float:
    """Mean next-token cross-entropy (nats) over every real (non-padding) target of `examples`."""
    logits, _, lengths = forward_batch(model, examples)
    ids = torch.full(logits.shape[:2], -100, dtype=torch.long)  # (N, T); -100: not scored
    for i, ex in enumerate(examples):
        ids[i, : lengths[i]] = torch.tensor(model.vocab.encode(list(ex.tokens)))
    return float(torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                   ids[:, 1:].reshape(-1), ignore_index=-100))


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
    {"previous_token": {"12": [band, ...], ...}, "induction": {...}} (`banded_scores` entries)."""
    out: dict = {"previous_token": {}, "induction": {}}
    for cs in sets:
        _, att_u, len_u = forward_batch(model, cs.unrepeated)
        _, att_r, len_r = forward_batch(model, cs.repeated)
        prev_pairs = [previous_token_pairs(n) for n in len_u]
        ind_pairs = [[(s, f + 1) for f, s in ex.repeats] for ex in cs.repeated]
        out["previous_token"][str(cs.length)] = banded_scores(_per_text(att_u, len_u), prev_pairs, cs.length,
                                                              n_bands, "previous token")
        out["induction"][str(cs.length)] = banded_scores(_per_text(att_r, len_r), ind_pairs, cs.length, n_bands,
                                                         "induction")
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
              late_share: float = 0.0, early_share: float = 0.0) -> "ProbeSets":
        from mha_viz.models.tiny import corpus

        too_long = [n for n in cfg.context_lengths if n > max_len]
        if too_long:
            raise ValueError(f"context lengths {too_long} exceed the model's max_len {max_len}")
        return cls(
            random=corpus.random_sequences(cfg.n_random, cfg.seed, cfg.random_length),
            repeated=corpus.repeated_sequences(cfg.n_repeated, cfg.seed + 1, cfg.repeated_lengths),
            agreement=corpus.agreement_examples(cfg.n_agreement, cfg.seed + 2, "opposite", max_len),
            loss=corpus.training_texts(cfg.n_loss, cfg.seed + 3, max_len, random_share, late_share,
                                      early_share),
            reference=corpus.agreement_examples(cfg.n_reference, cfg.seed + 4, "opposite", max_len),
            context=tuple(ContextSets.build(n, cfg.n_context, cfg.seed + 5 + 2 * i)
                          for i, n in enumerate(cfg.context_lengths)),
            n_bands=cfg.n_bands,
        )


def measure(model, sets: ProbeSets) -> dict:
    """Every measure of one model on the held-out sets: per-head scores (L, H) as nested lists, their uniform
    baselines, the agreement accuracy and the held-out loss."""
    _, att_random, len_random = forward_batch(model, sets.random)
    _, att_rep, len_rep = forward_batch(model, sets.repeated)
    logits_agr, att_agr, len_agr = forward_batch(model, sets.agreement)
    repeats = [ex.repeats for ex in sets.repeated]
    scores = {
        "previous_token": previous_token_score(_per_text(att_random, len_random)),
        "induction": induction_score(_per_text(att_rep, len_rep), repeats),
        "duplicate": copy_score(_per_text(att_rep, len_rep), repeats),
        "subject": subject_score(_per_text(att_agr, len_agr),
                                 [(ex.subject_pos, ex.verb_pos) for ex in sets.agreement]),
    }
    out = {
        "loss": round(heldout_loss(model, sets.loss), 4),
        "agreement_accuracy": round(agreement_from_logits(model, sets.agreement, logits_agr), 4),
        "scores": {k: [[round(float(v), 4) for v in row] for row in s.scores] for k, s in scores.items()},
        "baselines": {k: round(s.baseline, 4) for k, s in scores.items()},
    }
    if sets.context:
        out["context"] = measure_context(model, list(sets.context), sets.n_bands)
    return out


def agreement_margin_from_logits(model, examples, logits: torch.Tensor) -> float:
    """Mean logit margin (nats) of the agreeing verb form over the other form, at the position before the verb:
    a graded version of `agreement_from_logits`, which only counts the sign."""
    total = 0.0
    for i, ex in enumerate(examples):
        row = logits[i, ex.verb_pos - 1]  # (V,)
        good, bad = verb_form_ids(model, ex)
        total += float(row[good] - row[bad])
    return total / len(examples)


SET_SIZES = (1, 2, 3)  # the causal check switches off the top 1, 2 and 3 subject heads, and every set of as many others


def causal_check(model, sets: ProbeSets, subject_scores: torch.Tensor) -> dict:
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

    def ablated(heads) -> dict:
        keep = torch.ones(L, H)  # (L, H)
        for head in heads:
            keep[head] = 0.0
        logits, _, _ = forward_batch(model, sets.agreement, keep, means)
        return {"accuracy": round(agreement_from_logits(model, sets.agreement, logits), 4),
                "margin": round(agreement_margin_from_logits(model, sets.agreement, logits), 4)}

    every = [(l, h) for l in range(L) for h in range(H)]
    ranked = sorted(every, key=lambda lh: (-float(subject_scores[lh]), lh))
    heads = [[ablated([(l, h)]) for h in range(H)] for l in range(L)]
    out_sets = []
    for k in SET_SIZES:
        top = ranked[:k]
        other_sets = list(combinations([lh for lh in every if lh not in top], k))
        others = [ablated(c) for c in other_sets]
        worst = min(range(len(others)), key=lambda i: (others[i]["accuracy"], others[i]["margin"]))
        worst_set = other_sets[worst]
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
    shares = tuple(train_config.get(k, 0.0) for k in ("random_share", "late_share", "early_share"))
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
        subject = torch.tensor(last["scores"]["subject"])  # (L, H)
        checked = {"causal": causal_check(final, sets, subject)} if causal else {}
    finally:
        torch.set_num_threads(before)
    return {
        "about": "Written by `make probe` (python -m mha_viz.models.tiny.probes) from the saved weights. Scores "
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
            (layer, head), value = best_head(final["scores"][rel])
            print(f"{rel}: L{layer} H{head} {value:.0%} (uniform {final['baselines'][rel]:.0%})")
        for rel, role in context_roles(final["context"]).items():
            bands = "; ".join(f"length {n}: " + " / ".join("-" if v is None else f"{v:.2f}" for v in b)
                              for n, b in role["bands"].items())
            print(f"{rel} over the context: L{role['head'][0]} H{role['head'][1]}, lowest band {role['min']:.2f} "
                  f"({bands})")
        print()


if __name__ == "__main__":
    main()
