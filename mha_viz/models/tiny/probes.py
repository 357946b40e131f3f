"""Pattern scores per head, measured against ground truth from the corpus generator, with uniform baselines.

Every score is the mean attention weight a head puts on a target key, over (query, key) pairs picked from ground
truth. The baseline is the same mean for a head that spreads its attention evenly over every key it may see
(1 / (q + 1) for a causal query at q). A head is "doing" a pattern only as far as it beats that baseline, and even
then the score is a measured heuristic, not a label of what the head is for.

Tensors: attentions (L, H, Q, K) float32, as in `AttentionRun.attentions`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from mha_viz.contract import Head

Pair = tuple[int, int]  # (query position, key position)


@dataclass(frozen=True)
class HeadScores:
    relation: str
    scores: torch.Tensor  # (L, H) mean attention on the target
    baseline: float  # the same mean under uniform attention over the visible keys
    n_pairs: int

    def ranked(self) -> list[Head]:
        """Heads from highest to lowest score; ties broken by (layer, head) so the order is stable."""
        L, H = self.scores.shape
        return sorted(((l, h) for l in range(L) for h in range(H)), key=lambda lh: (-float(self.scores[lh]), lh))

    def best(self) -> tuple[Head, float]:
        head = self.ranked()[0]
        return head, float(self.scores[head])


def _as_list(attentions: torch.Tensor | Sequence[torch.Tensor]) -> list[torch.Tensor]:
    items = [attentions] if isinstance(attentions, torch.Tensor) else list(attentions)
    for a in items:
        if a.dim() != 4 or a.shape[-1] != a.shape[-2]:
            raise ValueError(f"attentions must be (layer, head, query, key) with Q == K; got {tuple(a.shape)}")
    return items


def score_pairs(
    attentions: torch.Tensor | Sequence[torch.Tensor],
    pairs: Sequence[Pair] | Sequence[Sequence[Pair]],
    relation: str,
    causal: bool = True,
) -> HeadScores:
    """Mean attention of every head on the (query, key) pairs of each text, pooled over texts.

    attentions: one (L, H, Q, K) tensor with a list of pairs, or a list of tensors with one list of pairs each.
    """
    mats = _as_list(attentions)
    per_text = [pairs] if isinstance(attentions, torch.Tensor) else list(pairs)
    if len(per_text) != len(mats):
        raise ValueError(f"got {len(mats)} attention tensors but {len(per_text)} lists of pairs; pass one per text")
    total = torch.zeros(mats[0].shape[:2])  # (L, H)
    base, n = 0.0, 0
    for a, ps in zip(mats, per_text):
        T = a.shape[-1]
        for q, k in ps:
            if not (0 <= k <= q < T if causal else 0 <= k < T and 0 <= q < T):
                raise ValueError(f"pair (query {q}, key {k}) is outside a {T}-token text (or looks ahead)")
            total += a[:, :, q, k].float()  # (L, H)
            base += 1.0 / (q + 1) if causal else 1.0 / T
            n += 1
    if n == 0:
        raise ValueError(f"no (query, key) pairs to score for {relation!r}; the texts lack that relation")
    return HeadScores(relation, total / n, base / n, n)


def previous_token_pairs(T: int) -> list[Pair]:
    """Each query and the token right before it; from position 2 on, so attending to <bos> never counts."""
    return [(q, q - 1) for q in range(2, T)]


def previous_token_score(attentions: torch.Tensor | Sequence[torch.Tensor]) -> HeadScores:
    """Attention to the previous token (the "previous token head" of Elhage et al. 2021 and Olsson et al. 2022)."""
    mats = _as_list(attentions)
    return score_pairs(mats, [previous_token_pairs(a.shape[-1]) for a in mats], "previous token")


def induction_score(
    attentions: torch.Tensor | Sequence[torch.Tensor], repeats: Sequence[Pair] | Sequence[Sequence[Pair]]
) -> HeadScores:
    """Induction (Olsson et al. 2022, "In-context learning and induction heads"): at the second occurrence of a
    token, attention to the token that followed its first occurrence. repeats: (first, second) positions."""
    mats = _as_list(attentions)
    per_text = [repeats] if isinstance(attentions, torch.Tensor) else repeats
    return score_pairs(mats, [[(s, f + 1) for f, s in r] for r in per_text], "induction")


def copy_score(
    attentions: torch.Tensor | Sequence[torch.Tensor], repeats: Sequence[Pair] | Sequence[Sequence[Pair]]
) -> HeadScores:
    """At the second occurrence of a term, attention to its first occurrence (a "duplicate token head",
    Wang et al. 2022, "Interpretability in the wild"). repeats: (first, second) positions."""
    mats = _as_list(attentions)
    per_text = [repeats] if isinstance(attentions, torch.Tensor) else repeats
    return score_pairs(mats, [[(s, f) for f, s in r] for r in per_text], "first occurrence")


def subject_score(
    attentions: torch.Tensor | Sequence[torch.Tensor], subjects: Pair | Sequence[Pair]
) -> HeadScores:
    """From the position where the verb is predicted (the token before it) to the verb's true subject.
    subjects: (subject_pos, verb_pos) per text. The agreement task is Linzen et al. 2016 ("Assessing the ability
    of LSTMs to learn syntax-sensitive dependencies"); reading it off attention follows Clark et al. 2019."""
    mats = _as_list(attentions)
    per_text = [subjects] if isinstance(attentions, torch.Tensor) else list(subjects)
    return score_pairs(mats, [[(v - 1, s)] for s, v in per_text], "subject")


def agreement_accuracy(model, examples: Iterable, ablate: Iterable[Head] = ()) -> float:
    """Share of agreement examples where the model's next-token logit at the position before the verb is higher
    for the verb form that agrees with the subject than for the other form (Linzen et al. 2016; chance is 0.5).

    model: a `TinyModel` (anything with `run` and `vocab`); examples: `corpus.Example`s with verb annotations.
    """
    ablate = frozenset(ablate)
    correct = total = 0
    for ex in examples:
        if ex.verb_pos is None or ex.verb_forms is None:
            raise ValueError("agreement_accuracy needs examples with verb_pos and verb_forms (corpus.agreement_examples)")
        run = model.run(ex.text, ablate)
        if list(run.tokens) != list(ex.tokens):
            raise ValueError(f"the model tokenized {ex.text!r} differently from the generator; positions would be off")
        row = run.logits[ex.verb_pos - 1]  # (V,)
        good, bad = (model.vocab.id(w) for w in (ex.verb_forms[int(ex.plural)], ex.verb_forms[1 - int(ex.plural)]))
        correct += int(row[good] > row[bad])
        total += 1
    if total == 0:
        raise ValueError("no examples given to agreement_accuracy")
    return correct / total


def relation_scores(model, nearby, repeats, agreements) -> dict[str, HeadScores]:
    """Run `model` on held-out corpus examples and score every head on the three relations."""
    def attn(examples):
        return [model.run(ex.text).attentions for ex in examples]

    rep_attn = attn(repeats)
    return {
        "nearby": previous_token_score(attn(nearby)),
        "repeat": induction_score(rep_attn, [ex.repeats for ex in repeats]),
        "repeat-copy": copy_score(rep_attn, [ex.repeats for ex in repeats]),
        "agreement": subject_score(attn(agreements), [(ex.subject_pos, ex.verb_pos) for ex in agreements]),
    }
