"""Mean attention of every head on (query, key) pairs picked from ground truth, pooled over texts, against the
same mean under uniform attention over the visible keys: the tiny model's probes and the Similarity view's
ground-truth table. Each text's value is the registered `gold` measure (`mha_viz.measures`), so the probes' previous
token on its pairs is the registry's `previous`, and its induction the registry's on the repeats it was given. Each
score is named by its registered measure (`HeadScores.relation`): "previous", "induction", "duplicate", and
"pre-verb→subject" (the mean attention on the subject from where the verb is predicted: that relation's `gold`).

Tensors: attentions (L, H, Q, K) float32, as in `AttentionRun.attentions`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mha_viz import measures
from mha_viz.analysis.scores import previous_pairs
from mha_viz.contract import Head

Pair = tuple[int, int]  # (query position, key position)
SUBJECT = "pre-verb→subject"  # the registered relation a causal model's subject score reads (census_result.role_scores)


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

    @property
    def label(self) -> str:
        """The registered measure's short label, for a table."""
        return measures.get(self.relation).label if self.relation in measures.REGISTRY else self.relation

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
    gold = measures.REGISTRY["gold"]  # the one definition of attention on given (query, key) pairs
    total = torch.zeros(mats[0].shape[:2])  # (L, H)
    base, n = 0.0, 0
    for a, ps in zip(mats, per_text):
        T = a.shape[-1]
        ps = [tuple(p) for p in ps]
        for q, k in ps:
            if not (0 <= k <= q < T if causal else 0 <= k < T and 0 <= q < T):
                raise ValueError(f"pair (query {q}, key {k}) is outside a {T}-token text (or looks ahead)")
        if not ps:
            continue
        if len({q for q, _ in ps}) != len(ps):
            raise ValueError(f"{relation!r}: a query appears in two pairs; pass one key per query")
        # Pooled over pairs: each text's mean over its queries, weighted by how many it has.
        value, uniform = gold.measure(a.float(), measures.Positions(T, causal, gold=tuple(ps)))  # (L, H), float
        total += value * len(ps)
        base += uniform * len(ps)
        n += len(ps)
    if n == 0:
        raise ValueError(f"no (query, key) pairs to score for {relation!r}; the texts lack that relation")
    return HeadScores(relation, total / n, base / n, n)


def previous_token_pairs(T: int) -> list[Pair]:
    """Each query and the token right before it: `scores.previous_pairs`, the page's own definition (from
    position 2 on, so attending to <bos> never counts)."""
    return previous_pairs(T)


def previous_token_score(attentions: torch.Tensor | Sequence[torch.Tensor]) -> HeadScores:
    """Attention to the previous token (the "previous token head" of Elhage et al. 2021 and Olsson et al. 2022)."""
    mats = _as_list(attentions)
    return score_pairs(mats, [previous_token_pairs(a.shape[-1]) for a in mats], "previous")


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
    return score_pairs(mats, [[(s, f) for f, s in r] for r in per_text], "duplicate")


def subject_score(
    attentions: torch.Tensor | Sequence[torch.Tensor], subjects: Pair | Sequence[Pair]
) -> HeadScores:
    """From the position where the verb is predicted (the token before it) to the verb's true subject: the registry's
    pre-verb→subject pairs, scored by mean attention on the subject (its `gold`).
    subjects: (subject_pos, verb_pos) per text. The agreement task is Linzen et al. 2016 ("Assessing the ability
    of LSTMs to learn syntax-sensitive dependencies"); reading it off attention follows Clark et al. 2019."""
    mats = _as_list(attentions)
    per_text = [subjects] if isinstance(attentions, torch.Tensor) else list(subjects)
    return score_pairs(mats, [[(v - 1, s)] for s, v in per_text], SUBJECT)
