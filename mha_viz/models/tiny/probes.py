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
    seed: int = 2024  # seed, seed + 1, ..., seed + 4 for the five sets


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
    edit = None
    if replace is not None:  # HeadEdit refuses a replacement without a keep mask
        edit = HeadEdit(None if keep is None else keep[None], replace[None, :, :, None])  # (1, L, H), (1, L, H, 1, dh)
        keep = None
    with torch.no_grad():
        logits, _, attentions = model.lm(ids, keep, edit)  # (N, T, V), _, (N, L, H, T, T)
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
class ProbeSets:
    random: list
    repeated: list
    agreement: list
    loss: list
    reference: list

    @classmethod
    def build(cls, cfg: ProbeConfig, max_len: int, random_share: float = 0.0) -> "ProbeSets":
        from mha_viz.models.tiny import corpus

        return cls(
            random=corpus.random_sequences(cfg.n_random, cfg.seed, cfg.random_length),
            repeated=corpus.repeated_sequences(cfg.n_repeated, cfg.seed + 1, cfg.repeated_lengths),
            agreement=corpus.agreement_examples(cfg.n_agreement, cfg.seed + 2, "opposite", max_len),
            loss=corpus.training_texts(cfg.n_loss, cfg.seed + 3, max_len, random_share),
            reference=corpus.agreement_examples(cfg.n_reference, cfg.seed + 4, "opposite", max_len),
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
    return {
        "loss": round(heldout_loss(model, sets.loss), 4),
        "agreement_accuracy": round(agreement_from_logits(model, sets.agreement, logits_agr), 4),
        "scores": {k: [[round(float(v), 4) for v in row] for row in s.scores] for k, s in scores.items()},
        "baselines": {k: round(s.baseline, 4) for k, s in scores.items()},
    }


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


def set_verdict(entry: dict, base_accuracy: float) -> bool:
    """"Far more": the top-k set costs at least three times the accuracy the average set of k others costs, and
    more than the worst of them."""
    top_drop = base_accuracy - entry["top_result"]["accuracy"]
    mean_drop = base_accuracy - entry["others_mean_accuracy"]
    below_worst = entry["top_result"]["accuracy"] < entry["worst_other_result"]["accuracy"]
    return top_drop >= 3 * max(mean_drop, 0.0) and below_worst


def causal_summary(causal: dict) -> dict:
    """The top subject head's effect next to the strongest effect of any other single head."""
    (tl, th) = causal["top"]
    top = causal["heads"][tl][th]
    others = [(c["margin"], (l, h), c) for l, row in enumerate(causal["heads"]) for h, c in enumerate(row)
              if (l, h) != (tl, th)]
    margin, head, c = min(others)
    return {"top": (tl, th), "top_margin": top["margin"], "top_accuracy": top["accuracy"],
            "base_margin": causal["none"]["margin"], "base_accuracy": causal["none"]["accuracy"],
            "next": head, "next_margin": margin, "next_accuracy": c["accuracy"],
            "min_other_accuracy": min(o[2]["accuracy"] for o in others)}

EVIDENCE = "probes.json"  # in the tiny model's folder; written by `python -m mha_viz.models.tiny.probes`
RELATIONS = ("previous_token", "induction", "duplicate", "subject")
RELATION_WORDS = {
    "previous_token": "previous token (random word sequences)",
    "induction": "induction: token after the first occurrence (a random sequence said twice)",
    "duplicate": "first occurrence itself (a random sequence said twice)",
    "subject": "subject, where the verb is predicted (agreement sentences)",
}


def probe(folder, cfg: ProbeConfig = ProbeConfig(), quiet: bool = True) -> dict:
    """Measure every saved checkpoint of the tiny model in `folder` (and the causal check on the last one);
    returns the evidence as written to `folder`/probes.json."""
    import json
    from pathlib import Path

    from mha_viz.models.tiny.adapter import checkpoint_steps, load_tiny
    from mha_viz.models.tiny.train import LOG, sha256

    folder = Path(folder)
    steps = checkpoint_steps(folder)
    if not steps:
        raise FileNotFoundError(f"no checkpoints in {folder / 'checkpoints'}; run `make train` first")
    log = json.loads((folder / LOG).read_text()) if (folder / LOG).exists() else {}
    random_share = log.get("train_config", {}).get("random_share", 0.0)
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the same sums in the same order on any machine, so the test can compare closely
    try:
        final = load_tiny(folder=folder)
        sets = ProbeSets.build(cfg, final.config.max_len, random_share)
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
        causal = causal_check(final, sets, subject)
    finally:
        torch.set_num_threads(before)
    return {
        "about": "Written by `make probe` (python -m mha_viz.models.tiny.probes) from the saved weights. Scores "
                 "are mean attention weights on held-out inputs, per head (layer, head); baselines are uniform "
                 "attention over the visible keys. A test recomputes every number from the shipped weights.",
        "probe_config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(cfg).items()},
        "weights": {p.relative_to(folder).as_posix(): sha256(p)
                    for p in [folder / "model.safetensors", *sorted((folder / "checkpoints").glob("*.safetensors"))]},
        "steps": steps,
        "per_step": per_step,
        "final": {**last, "step": steps[-1], "causal": causal},
    }


def load_evidence(folder=None) -> dict | None:
    """The evidence file of the tiny model (see `probe`), or None when it has not been written."""
    import json
    from pathlib import Path

    from mha_viz.settings import ASSETS

    path = Path(folder or ASSETS / "tiny") / EVIDENCE
    return json.loads(path.read_text()) if path.exists() else None


def best_head(scores: list[list[float]]) -> tuple[tuple[int, int], float]:
    """The (layer, head) with the highest score, ties to the lowest (layer, head), and its score."""
    L, H = len(scores), len(scores[0])
    head = min(((l, h) for l in range(L) for h in range(H)), key=lambda lh: (-scores[lh[0]][lh[1]], lh))
    return head, scores[head[0]][head[1]]


def _fmt_head(head) -> str:
    return f"L{head[0]} H{head[1]}"


def evidence_markdown(evidence: dict) -> str:
    """The notes' section on the tiny model, worded from the evidence file, so no number in it is typed by hand."""
    first, final = evidence["per_step"][0], evidence["final"]
    last_step = final["step"]
    lines = [
        "### What the probes measured on the in-repo tiny model",
        "",
        f"`make probe` measured every saved training step of `tiny` (step 0 is its seeded initialisation, step "
        f"{last_step} the shipped weights) on held-out inputs the trainer never saw; the numbers below are read "
        "from the file it wrote (`assets/tiny/probes.json`), and a test recomputes them from the weights.",
        "",
    ]
    for rel in ("previous_token", "induction", "duplicate", "subject"):
        head, value = best_head(final["scores"][rel])
        _, start = best_head(first["scores"][rel])
        lines.append(f"- {RELATION_WORDS[rel]}: the best head ({_fmt_head(head)}) puts {value:.0%} of its attention "
                     f"there, against {final['baselines'][rel]:.0%} for uniform attention; at step 0 the best "
                     f"head put {start:.0%}.")
    c = causal_summary(final["causal"])
    far = c["top_margin"] < 0.5 * c["next_margin"]
    lines += [
        f"- Agreement: the model picks the verb form that agrees with the subject on {final['agreement_accuracy']:.0%} "
        f"of {evidence['probe_config']['n_agreement']} held-out sentences whose attractor noun has the other number; "
        f"at step 0 it did on {first['agreement_accuracy']:.0%} (chance is 50%).",
        f"- Switching a head off here means mean ablation (its output replaced by its mean over "
        f"{evidence['probe_config']['n_reference']} other agreement sentences, as Wang et al. 2022 do), since zeroing "
        f"also takes away the typical contribution every later layer was trained to expect. Switching off "
        f"{_fmt_head(c['top'])}, the head that attends most to the subject, cuts the mean logit margin of the "
        f"agreeing verb form from {c['base_margin']:.1f} to {c['top_margin']:.1f} (accuracy "
        f"{c['base_accuracy']:.0%} to {c['top_accuracy']:.0%}); switching off any one other head leaves at least "
        f"{c['next_margin']:.1f} ({_fmt_head(c['next'])}; accuracies {c['min_other_accuracy']:.0%} or more)"
        + (": agreement runs mostly through that head, not only alongside its attention." if far else
           ": not far enough apart to say agreement runs through that head more than through others."),
    ]
    for entry in final["causal"].get("sets", []):
        k, top, worst = entry["k"], entry["top_result"], entry["worst_other_result"]
        if k == 1:
            continue
        lines.append(
            f"- The {k} heads with the highest subject scores ({', '.join(_fmt_head(h) for h in entry['top'])}) "
            f"off together: agreement accuracy {top['accuracy']:.0%}, margin {top['margin']:.1f}. Every one of the "
            f"{entry['n_others']} sets of {k} other heads: accuracy {entry['others_mean_accuracy']:.0%} on average, "
            f"margin {entry['others_mean_margin']:.1f}; the most harmful of them "
            f"({', '.join(_fmt_head(h) for h in entry['worst_other'])}) leaves {worst['accuracy']:.0%}"
            + (" - far less harm than the subject heads do." if set_verdict(entry, c["base_accuracy"])
               else " - not far enough below the subject heads to say agreement runs through them."))
    lines += [
        "",
        "**The training timeline** (the Training view) shows the same heads at every saved step. The patterns are "
        "not there at the start: they appear during training"
        + (", from an initialisation where no head beats uniform attention by more than 5 points on any measure. "
           if all(best_head(first["scores"][r])[1] <= first["baselines"][r] + 0.05 for r in RELATIONS) else ". ")
        + "Olsson et al. 2022 (*In-context learning and induction heads*) found that "
        "induction heads form abruptly, in a phase change early in training that shows as a bump in the training "
        "loss. In this model, between consecutive saved steps:",
        "",
    ]
    steps = [s["step"] for s in evidence["per_step"]]
    for rel in ("previous_token", "induction", "subject"):
        best = [best_head(s["scores"][rel])[1] for s in evidence["per_step"]]
        jumps = [(best[i + 1] - best[i], i) for i in range(len(best) - 1)]
        rise, i = max(jumps)
        lines.append(f"- {RELATION_WORDS[rel].split(' (')[0].split(':')[0]}: the best score rose most between steps "
                     f"{steps[i]} and {steps[i + 1]}, from {best[i]:.0%} to {best[i + 1]:.0%} "
                     f"({rise * 100:+.0f} points).")
    losses = [s["loss"] for s in evidence["per_step"]]
    drop, j = max((losses[i] - losses[i + 1], i) for i in range(len(losses) - 1))
    lines += [
        f"- Held-out loss: {losses[0]:.2f} nats at step 0, {losses[-1]:.2f} at step {steps[-1]}; it fell most "
        f"between steps {steps[j]} and {steps[j + 1]} ({losses[j]:.2f} to {losses[j + 1]:.2f}).",
        "",
        "These are measurements of this model on this corpus's inputs; they do not say what the heads of another "
        "model do, and a high score says where attention went, not what the head is for.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json
    from pathlib import Path

    from mha_viz.settings import ASSETS

    parser = argparse.ArgumentParser(description="Measure every saved checkpoint of the tiny model and write "
                                                 "probes.json next to its weights.")
    parser.add_argument("--folder", default=str(ASSETS / "tiny"), help="the tiny model's folder")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    evidence = probe(folder, quiet=False)
    (folder / EVIDENCE).write_text(json.dumps(evidence, indent=1) + "\n")
    print(f"wrote {folder / EVIDENCE}\n")
    print(evidence_markdown(evidence))


if __name__ == "__main__":
    main()


NOTES_MARK = "<!-- tiny-model-evidence"


def fill_notes(notes: str, evidence: dict | None) -> str:
    """The notes with the line starting with NOTES_MARK replaced by `evidence_markdown(evidence)` (or by a line
    saying how to write the evidence file)."""
    lines = notes.split("\n")
    section = evidence_markdown(evidence) if evidence else (
        "*The tiny model's measured numbers appear here once `make probe` has written assets/tiny/probes.json.*")
    return "\n".join(section if line.startswith(NOTES_MARK) else line for line in lines)
