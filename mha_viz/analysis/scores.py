"""Measured pattern scores per head: where each head's attention went on one input, against what uniform
attention would give. Every score is a measurement on this input; a high score is not a label of what the
head "does".
"""
from __future__ import annotations

import math

import torch

from mha_viz import measures as M
from mha_viz.analysis._checks import attention as _attention
from mha_viz.contract import AttentionRun
from mha_viz.measures import allowed_keys, nearby_mask, uniform_pattern  # noqa: F401 (re-exported)

# Keys of the dict returned by `pattern_scores`, in display order: every registered measure one input can be
# scored on (`mha_viz.measures`, where each is defined, worded and cited once).
SCORE_NAMES = M.ONE_INPUT
NEARBY_WINDOW = M.NEARBY_WINDOW


def positions(t: int, causal: bool, token_ids=None, added=(), tokens=(), unknown=()) -> M.Positions:
    """The token facts of one input that the measures read (`measures.Positions.of`)."""
    if token_ids is not None and not isinstance(token_ids, torch.Tensor):
        token_ids = list(token_ids)
    return M.Positions.of(t, causal, tuple(tokens), token_ids, added, unknown=unknown)


def pattern_scores(att: torch.Tensor, token_ids=None, added=(), causal: bool = False,
                   tokens=(), names: tuple[str, ...] = SCORE_NAMES, unknown=()) -> dict[str, torch.Tensor]:
    """Where each head's attention went on this input: a dict of (L, H) scores, keys `SCORE_NAMES`, each computed
    by its registered measure (`mha_viz.measures`: the definitions, their sources and where ours differ).

    att: (L, H, T, T) attention probabilities; token_ids: T ids, or T token strings (equal values mean the same
    token; None or empty: the tokens decide, and without them the repeat scores are NaN); added: the positions the
    tokenizer added ([CLS], [SEP], <bos>: `run.special`); causal: True for decoder-only models (att must be
    lower-triangular); tokens: the T token strings (punctuation is read from them); names: the measures wanted (all
    by default; the Layer grid's captions need only the badges: SmolLM2 at 128 tokens, 35 ms of 76); unknown: the
    positions the tokenizer mapped to its unknown token (`run.unknown`), never counted as repeating each other.
    A score is NaN where it cannot be measured (e.g. T = 1). Compare a score with `uniform_baselines(...)`: a head
    that spreads attention evenly already scores above 0.
    """
    att = _attention(att, "att", (4,), "(L, H, Q, K)")
    t = att.shape[-1]
    above = torch.triu_indices(t, t, offset=1)  # (2, T(T-1)/2): the cells above the diagonal, gathered alone
    if causal and t > 1 and att[..., above[0], above[1]].amax() > 1e-4:
        raise ValueError("att has weight above the diagonal, so it is not causal; pass causal=False "
                         "for a bidirectional (encoder) model")
    not_scores = [name for name in names if name not in SCORE_NAMES]
    if not_scores:
        raise ValueError(f"{not_scores} are not scores; use names from: {', '.join(SCORE_NAMES)}")
    pos = positions(t, causal, token_ids, added, tokens, unknown)
    return {name: M.REGISTRY[name](att, pos) for name in names}


def previous_pairs(t: int) -> list[tuple[int, int]]:
    """The (query, key) pairs the registered `previous` measure averages over: (q, q - 1) for q = 2..T-1 (its
    entry says why query 1 is left out)."""
    return [(q, q - 1) for q in range(2, t)]


def uniform_baselines(t: int, causal: bool, token_ids=None, added=(), tokens=(),
                      names: tuple[str, ...] = SCORE_NAMES, unknown=()) -> dict[str, float]:
    """What every measure of `pattern_scores` gives for uniform attention on the same positions: {name: float}.
    A measured score means something only above its baseline."""
    pos = positions(t, causal, token_ids, added, tokens, unknown)
    return {name: M.REGISTRY[name].baseline(pos) for name in names}


def top_badges(scores: dict[str, torch.Tensor], baselines: dict[str, float], layer: int, head: int,
               n: int = 2, min_excess: float = 0.1, support: dict[str, int] | None = None
               ) -> list[tuple[str, float]]:
    """Up to n (name, score) pairs of one head whose score is furthest above its uniform baseline.

    Only the measures registered as badges count (shares of attention, where high is notable), only those at least
    `min_excess` above baseline, never NaN, and, given `support` (`run_support`: queries averaged per measure),
    only those read over `measures.SUPPORT_FLOOR` queries or more. Word them with `describe_score`.
    scores: from `pattern_scores`; baselines: from `uniform_baselines` for the same input.
    """
    missing = [name for name in M.BADGES if name not in scores or name not in baselines]
    if missing:
        raise ValueError(f"scores and baselines must come from pattern_scores and uniform_baselines; "
                         f"missing {missing}")
    n_layers, n_heads = scores[M.BADGES[0]].shape
    if not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise ValueError(f"head ({layer}, {head}) does not exist: scores cover layers 0-{n_layers - 1} "
                         f"and heads 0-{n_heads - 1}")
    found = []
    for name in M.BADGES:
        if support is not None and support.get(name, 0) < M.SUPPORT_FLOOR:
            continue
        value = float(scores[name][layer, head])
        excess = value - baselines[name]
        if not math.isnan(excess) and excess >= min_excess:
            found.append((excess, name, value))
    found.sort(reverse=True)
    return [(name, value) for _, name, value in found[:n]]


def run_scores(run: AttentionRun, causal: bool,
               names: tuple[str, ...] = SCORE_NAMES) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """`pattern_scores` and `uniform_baselines` of one run (the measures `names`), prepared the same way wherever
    they are shown."""
    args = (list(run.token_ids) or None, tuple(run.special))
    t = len(run.tokens)
    return (pattern_scores(run.attentions, *args, causal=causal, tokens=run.tokens, names=names, unknown=run.unknown),
            uniform_baselines(t, causal, *args, tokens=run.tokens, names=names, unknown=run.unknown))


def run_positions(run: AttentionRun, causal: bool) -> M.Positions:
    """The token facts the measures read of one run, as `run_scores` reads them."""
    return positions(len(run.tokens), causal, list(run.token_ids) or None, tuple(run.special), run.tokens,
                     run.unknown)


def run_support(run: AttentionRun, causal: bool, names: tuple[str, ...] = SCORE_NAMES) -> dict[str, int]:
    """{measure: how many queries its reading on this run averages over}: below `measures.SUPPORT_FLOOR` a reading
    is shown as "too few queries on this input", not as a number."""
    pos = run_positions(run, causal)
    return {name: M.REGISTRY[name].support(pos) for name in names}


def describe_reading(name: str, value: float, n: int) -> str:
    """`describe_score` with its support: how many queries the value averages over, and no number below
    `measures.SUPPORT_FLOOR`."""
    if name not in SCORE_NAMES:
        raise ValueError(f"{name!r} is not a score; use one of: {', '.join(SCORE_NAMES)}")
    return M.REGISTRY[name].reading(value, n)


def describe_score(name: str, value: float) -> str:
    """Plain words for one measured score, e.g. "62% of attention goes to the previous token on this
    input." Describes a measurement on this input, never a role of the head (the registry's sentence)."""
    if name not in SCORE_NAMES:
        raise ValueError(f"{name!r} is not a score; use one of: {', '.join(SCORE_NAMES)}")
    return M.REGISTRY[name].sentence(value)


def badge_caption(scores: dict[str, torch.Tensor], baselines: dict[str, float], support: dict[str, int],
                  layer: int, head: int, n: int = 2) -> str:
    """One head's caption under its heatmap, in both hosts (the Layer grid, the notebook grid): its up to `n`
    strongest measured scores on this input with how many queries each averaged over ("48% → previous token, 14
    queries"); a measure that stands out on fewer than `measures.SUPPORT_FLOOR` queries says so without a number.
    `nearby` restating a previous/next-token head (its mass is the +-1 neighbour's) is left out: it says nothing."""
    top = top_badges(scores, baselines, layer, head, n=n + 1, support=support)
    if len(top) > 1:
        neighbour = float(scores["previous"][layer, head]) + float(scores["next"][layer, head])
        top = [(name, value) for name, value in top
               if not (name == "nearby" and top[0][0] in ("previous", "next") and neighbour >= 0.8 * value)]
    top = top[:n]
    if top:
        return "measured: " + " · ".join(f"{value:.0%} → {M.REGISTRY[name].label}, {M.queries_words(support[name])}"
                                         for name, value in top)
    few = [name for name, _ in top_badges(scores, baselines, layer, head, n=n)
           if support.get(name, 0) < M.SUPPORT_FLOOR]
    if few:
        return "measured: " + " · ".join(f"{M.REGISTRY[name].label}: {M.TOO_FEW} ({support.get(name, 0)})"
                                         for name in few)
    return "measured: no location stands out"
