"""Pure scorers of the head census: what each head does over many inputs made for the question, against chance.

Each scorer takes one input's attention (L, H, T, T) and the positions the question is about, and returns one
value per head (L, H) together with what uniform attention over the allowed keys would score on the same
positions, so a head counts only as far as it beats that. `summarise` pools the per-input values of many inputs
into a mean and a bootstrap interval over inputs (Efron 1979: resample the inputs with replacement).

Measures and where they come from:
    previous, first, entropy   `analysis.scores.pattern_scores` (Clark et al. 2019, section 3): the page's own
                               definitions, so the census and the page can never disagree on what they mean
    nearby                     attention mass on the keys 1..w positions away (either side), a windowed version of
                               `previous`; ours (Voita et al. 2019 call heads that attend to adjacent tokens
                               "positional"; they count only the +-1 neighbour)
    distance                   attention-weighted mean distance to the keys over uniform attention's (ours; Vig &
                               Belinkov 2019 plot the mean attention distance per layer): below 1, a band near the
                               diagonal that `previous` and `nearby` may miss
    induction, duplicate       on repeated random tokens, Olsson et al. 2022 ("In-context learning and induction
                               heads"): at a token's second occurrence, attention to the token after its first
                               occurrence (induction) or to the first occurrence itself (duplicate; Wang et al. 2022)
    dependency relations       Clark et al. 2019, section 4.2: a head "predicts" the most-attended word; its score is
                               how often that is the gold word, against the best fixed-offset baseline ("always the
                               word k to the left/right"). Ours differs: the candidates are the other non-special
                               positions the query may see (Clark et al. use word-level maps of parsed WSJ text,
                               every word a candidate); every word here is one token, so no piece merging is needed
    special                    mass on the tokenizer-added special positions ([CLS], [SEP], <bos>)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from mha_viz.analysis._checks import attention as _attention
from mha_viz.analysis.scores import allowed_keys, nearby_mask, pattern_scores, uniform_pattern  # noqa: F401 (re-exported)

Pair = tuple[int, int]  # (query position, key position)
OFFSETS = tuple(k for k in range(-5, 6) if k != 0)  # Clark et al.'s fixed-offset baselines: the word k away


def _att(att: torch.Tensor) -> torch.Tensor:
    return _attention(att, "att", (4,), "(L, H, Q, K)")


def mask_mass(att: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The attention mass each head puts on the keys `mask` (Q, K) marks, averaged over the queries with at least
    one marked key -> ((L, H), the same for uniform attention over the allowed keys). NaN where no query has one.

    Causality is read from `att` (lower-triangular: causal); `mask` should mark only allowed keys."""
    att = _att(att)
    n_layers, n_heads, t, _ = att.shape
    mask = torch.as_tensor(mask, dtype=torch.bool)
    if mask.shape != (t, t):
        raise ValueError(f"mask must be ({t}, {t}), one entry per (query, key); got {tuple(mask.shape)}")
    rows = mask.any(-1)  # (Q,)
    if not rows.any():
        return torch.full((n_layers, n_heads), float("nan")), float("nan")
    causal = bool(att.triu(diagonal=1).amax() <= 1e-6) and t > 1
    mass = (att * mask).sum(-1)[..., rows]  # (L, H, R)
    uniform = (uniform_pattern(t, causal) * mask).sum(-1)[rows]  # (R,)
    return mass.mean(-1), float(uniform.mean())  # (L, H), float


def pairs_mask(pairs: Sequence[Pair], t: int) -> torch.Tensor:
    """(Q, K) bool with the given (query, key) pairs set."""
    mask = torch.zeros(t, t, dtype=torch.bool)  # (Q, K)
    for q, k in pairs:
        if not (0 <= q < t and 0 <= k < t):
            raise ValueError(f"pair (query {q}, key {k}) is outside a {t}-token input")
        mask[q, k] = True
    return mask


def pair_mass(att: torch.Tensor, pairs: Sequence[Pair]) -> tuple[torch.Tensor, float]:
    """Mean attention on the key of each (query, key) pair (one key per query: pass each query once) -> ((L, H),
    uniform). The induction and duplicate scores of Olsson et al. 2022 are this on their pairs."""
    t = att.shape[-1]
    queries = [q for q, _ in pairs]
    if len(set(queries)) != len(queries):
        raise ValueError("pair_mass takes one key per query; a query appears twice (use mask_mass for several keys)")
    return mask_mass(att, pairs_mask(pairs, t))


def repeat_pairs(token_ids: Sequence[int], content: Sequence[bool]) -> tuple[list[Pair], list[Pair]]:
    """From the token ids of one input, the (query, key) pairs of Olsson et al. 2022's two scores: at every
    position q whose token occurred before (last at f, with f + 1 < q so the target is not the previous token),
    induction (q, f + 1) and duplicate (q, f). Only non-special positions (`content`) count, as query or key."""
    last: dict[int, int] = {}
    induction, duplicate = [], []
    for q, (tok, ok) in enumerate(zip(token_ids, content)):
        if not ok:
            continue
        f = last.get(tok)
        if f is not None and f + 1 < q and content[f + 1]:
            induction.append((q, f + 1))
            duplicate.append((q, f))
        last[tok] = q
    return induction, duplicate


def nearby_score(att: torch.Tensor, content: Sequence[bool], window: int = 2) -> tuple[torch.Tensor, float]:
    """Attention mass within `window` positions of the query, itself excluded -> ((L, H), uniform)."""
    att = _att(att)
    t = att.shape[-1]
    causal = bool(att.triu(diagonal=1).amax() <= 1e-6) and t > 1
    return mask_mass(att, nearby_mask(t, window, content, causal))


def distance_score(att: torch.Tensor, content: Sequence[bool]) -> tuple[torch.Tensor, float]:
    """How far a head looks: the attention-weighted mean distance |q - k| to the non-special keys (the weights
    renormalised over them, as the page's "hide special tokens" does), divided by the same mean under uniform
    attention, averaged over the queries that see at least two non-special keys -> ((L, H), 1.0). Below 1: a band
    near the diagonal (0 would be attention on the query itself); above 1: far keys. Special positions are left
    out because [CLS]/[SEP] would count as far away wherever the query is."""
    att = _att(att)
    n_layers, n_heads, t, _ = att.shape
    causal = bool(att.triu(diagonal=1).amax() <= 1e-6) and t > 1
    c = torch.as_tensor(list(content), dtype=torch.bool)  # (T,)
    keys = allowed_keys(t, causal) & c[None, :]  # (Q, K)
    rows = c & (keys.sum(-1) >= 2)  # (Q,)
    if not rows.any():
        return torch.full((n_layers, n_heads), float("nan")), float("nan")
    pos = torch.arange(t)
    dist = (pos[:, None] - pos[None, :]).abs().float() * keys  # (Q, K)
    uniform = dist.sum(-1) / keys.sum(-1).clamp_min(1)  # (Q,)
    w = att * keys  # (L, H, Q, K)
    mass = w.sum(-1)  # (L, H, Q)
    mean = (w * dist).sum(-1) / mass.clamp_min(1e-12)  # (L, H, Q)
    ratio = (mean / uniform.clamp_min(1e-12))[..., rows]  # (L, H, R)
    return ratio.mean(-1), 1.0


def special_score(att: torch.Tensor, special: Sequence[int]) -> tuple[torch.Tensor, float]:
    """Mass on the tokenizer-added special positions, averaged over every query -> ((L, H), uniform); NaN when the
    input has none (SmolLM2 adds no <bos>: its sink is position 0, the `first` score)."""
    att = _att(att)
    t = att.shape[-1]
    causal = bool(att.triu(diagonal=1).amax() <= 1e-6) and t > 1
    mask = torch.zeros(t, t, dtype=torch.bool)  # (Q, K)
    for k in special:
        mask[:, int(k)] = True
    return mask_mass(att, mask & allowed_keys(t, causal))


def text_scores(att: torch.Tensor, causal: bool, content: Sequence[bool], special: Sequence[int],
                window: int = 2) -> dict[str, tuple[torch.Tensor, float]]:
    """The scores any input has: previous, nearby, distance, first, special, entropy -> {name: ((L, H), uniform)}.
    previous, first and entropy are `pattern_scores`' own."""
    att = _att(att)
    t = att.shape[-1]
    page = pattern_scores(att, causal=causal)
    uni = pattern_scores(uniform_pattern(t, causal)[None, None], causal=causal)
    out = {name: (page[name], float(uni[name][0, 0])) for name in ("previous", "first", "entropy")}
    out["nearby"] = nearby_score(att, content, window)
    out["distance"] = distance_score(att, content)
    out["special"] = special_score(att, special)
    return out


# -- structural dependency: Clark et al. 2019, section 4.2 ---------------------------------------------------------
def most_attended(att: torch.Tensor, query: int, candidates: torch.Tensor) -> torch.Tensor:
    """Which candidate key each head attends to most from `query` -> (L, H) positions. candidates: (K,) bool, the
    keys that count (not the query itself, not special positions, only keys the query may see)."""
    idx = candidates.nonzero().flatten()  # (C,)
    if idx.numel() == 0:
        raise ValueError(f"query {query} has no candidate key")
    return idx[att[..., query, idx].argmax(-1)]  # (L, H)


def candidates_for(query: int, t: int, content: Sequence[bool], causal: bool) -> torch.Tensor:
    """(K,) bool: the keys Clark et al.'s classifier picks from: the other non-special positions the query sees."""
    c = torch.as_tensor(list(content), dtype=torch.bool).clone()  # (K,)
    c[query] = False
    if causal:
        c[query + 1:] = False
    return c


def dependency_hits(att: torch.Tensor, pairs: Sequence[Pair], content: Sequence[bool], causal: bool
                    ) -> tuple[torch.Tensor, float]:
    """Clark et al. 2019's accuracy on one input: the share of (query, gold key) pairs where the head's most-
    attended candidate key is the gold one -> ((L, H), uniform). Uniform attention has no single most-attended key;
    its baseline is the chance of picking the gold key at random among the candidates, mean 1 / #candidates."""
    att = _att(att)
    t = att.shape[-1]
    if not pairs:
        n_layers, n_heads = att.shape[:2]
        return torch.full((n_layers, n_heads), float("nan")), float("nan")
    hits, chance = [], []
    for q, k in pairs:
        cand = candidates_for(q, t, content, causal)
        if not cand[k]:
            raise ValueError(f"gold key {k} of query {q} is not a candidate (special, the query itself, or ahead)")
        hits.append((most_attended(att, q, cand) == k).float())  # (L, H)
        chance.append(1.0 / float(cand.sum()))
    return torch.stack(hits).mean(0), sum(chance) / len(chance)  # (L, H), float


def offset_accuracy(pairs: Sequence[Pair]) -> dict[int, float]:
    """Clark et al.'s fixed-offset baselines on one input's pairs: for each offset k in OFFSETS, the share of pairs
    whose gold key is the query's position + k."""
    if not pairs:
        return {k: float("nan") for k in OFFSETS}
    return {k: sum(1.0 for q, g in pairs if g - q == k) / len(pairs) for k in OFFSETS}


def best_offset(per_input: Sequence[dict[int, float]]) -> tuple[int, float]:
    """The one offset that is right most often, averaged over inputs as the head scores are, and its accuracy."""
    totals = {k: [d[k] for d in per_input if not math.isnan(d[k])] for k in OFFSETS}
    means = {k: sum(v) / len(v) for k, v in totals.items() if v}
    if not means:
        return 0, float("nan")
    k = max(means, key=lambda o: (means[o], -abs(o)))
    return k, means[k]


# -- pooling over inputs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pooled:
    """One score over many inputs: the mean (L, H) over inputs where it is measurable, a bootstrap interval over
    inputs, the uniform baseline averaged the same way, and how many inputs counted."""
    mean: torch.Tensor  # (L, H)
    low: torch.Tensor  # (L, H)
    high: torch.Tensor  # (L, H)
    uniform: float
    n: int


def summarise(values: Sequence[torch.Tensor], uniforms: Sequence[float], seed: int = 0, n_boot: int = 200,
              level: float = 0.95) -> Pooled:
    """Pool per-input values (each (L, H)) and their uniform baselines: NaN inputs (the score not measurable
    there) are left out. The interval is the percentile bootstrap over inputs (`n_boot` resamples, seeded)."""
    keep = [i for i, v in enumerate(values) if not bool(torch.isnan(v).all())]
    if not keep:
        shape = values[0].shape if len(values) else (0, 0)
        nan = torch.full(shape, float("nan"))
        return Pooled(nan, nan.clone(), nan.clone(), float("nan"), 0)
    stack = torch.stack([values[i] for i in keep])  # (N, L, H)
    n = stack.shape[0]
    mean = stack.mean(0)  # (L, H)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (n_boot, n), generator=gen)  # (B, N)
    boot = stack[idx].mean(1)  # (B, L, H)
    alpha = (1 - level) / 2
    low, high = torch.quantile(boot, alpha, dim=0), torch.quantile(boot, 1 - alpha, dim=0)  # (L, H) each
    uniform = sum(uniforms[i] for i in keep) / len(keep)
    return Pooled(mean, low, high, float(uniform), n)


def drop_lost(drop: float, ablated_drop: float) -> float:
    """The share of the in-context loss drop (the first copy's loss minus the second copy's; Olsson et al. 2022
    compare the loss late and early in the context, we compare the two copies of a repeated random sequence) that
    is gone when heads are switched off: 1 = all of it, 0 = none, NaN when there was no drop to lose."""
    if not drop > 0:
        return float("nan")
    return (drop - ablated_drop) / drop
