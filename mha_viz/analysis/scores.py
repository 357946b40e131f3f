"""Measured pattern scores per head: where each head's attention went on one input, against what uniform
attention would give. Every score is a measurement on this input; a high score is not a label of what the
head "does".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mha_viz.analysis._checks import attention as _attention
from mha_viz.analysis._checks import position_mask as _position_mask
from mha_viz.analysis.tokens import special_mask
from mha_viz.contract import AttentionRun

# Keys of the dict returned by `pattern_scores`, in display order.
SCORE_NAMES = ("previous", "next", "nearby", "self", "first", "special", "same_token", "entropy")
NEARBY_WINDOW = 2  # positions either side: the census's `nearby` window (census_run.CensusConfig.window)


def allowed_keys(t: int, causal: bool) -> torch.Tensor:
    """(Q, K) bool: the keys each query may attend to."""
    return torch.ones(t, t, dtype=torch.bool).tril() if causal else torch.ones(t, t, dtype=torch.bool)  # (Q, K)


def nearby_mask(t: int, window: int, content: Sequence[bool], causal: bool) -> torch.Tensor:
    """(Q, K) bool: for each non-special query q from position 2 on, the non-special keys k with
    1 <= |q - k| <= window that q may see (position 0 is never a target: it is <bos>/[CLS] or the attention sink
    of models without one, as for `previous` in `pattern_scores`)."""
    if window < 1:
        raise ValueError(f"window must be at least 1; got {window}")
    c = torch.as_tensor(list(content), dtype=torch.bool)  # (T,)
    pos = torch.arange(t)
    dist = (pos[:, None] - pos[None, :]).abs()  # (Q, K)
    mask = (dist >= 1) & (dist <= window) & allowed_keys(t, causal) & c[:, None] & c[None, :]  # (Q, K)
    mask[:, 0] = False
    mask[:2] = False
    return mask


def pattern_scores(att: torch.Tensor, token_ids=None, special_mask=None, causal: bool = False,
                   content=None) -> dict[str, torch.Tensor]:
    """Where each head's attention went on this input: a dict of (L, H) scores, keys `SCORE_NAMES`.

    Each score is a fraction of attention mass in [0, 1], averaged over the query rows where the target
    exists. Clark et al. 2019, "What Does BERT Look At?", section 3, measure attention to the previous/next
    token, [CLS], [SEP] and punctuation this way, and each head's entropy; Kovaleva et al. 2019 describe
    diagonal and vertical patterns; earlier copies of the current token are where the duplicate-token heads of
    Wang et al. 2022 attend (Olsson et al. 2022's induction heads attend to the token after such a copy):
      previous    att[q, q-1], mean over queries q = 2..T-1 (`previous_pairs`): position 0 is never the target.
                  It is <bos>/[CLS] in models that add one and the attention sink of most models that do not (see
                  `first`), so counting query 1 would credit a head that rests on position 0 with reading the
                  previous token. Clark et al. count every query; the tiny model's probes use this same function
      next        att[q, q+1], mean over queries q = 0..T-2 (always 0 in a causal model)
      nearby      sum of att[q, k] over keys 1 <= |q - k| <= 2 (itself excluded), mean over queries q = 2..T-1:
                  the census's `nearby` (`nearby_mask`, the same function the census uses), here on this one input; keys
                  and queries only at `content` positions (not tokenizer-added specials), never position 0.
                  Ours: a windowed `previous`/`next` (Voita et al. 2019 count only the +-1 neighbour); it shows a
                  band along the diagonal that neither `previous` nor `next` alone may reach
      self        att[q, q], mean over all queries
      first       att[q, 0], mean over queries q = 1..T-1 (query 0 attending to itself is `self`)
      special     sum of att[q, k] over keys k with special_mask[k], mean over all queries; NaN if the
                  mask is None or selects no position
      same_token  sum of att[q, k] over earlier keys k < q with token_ids[k] == token_ids[q], mean over
                  only those queries that have such an earlier occurrence; NaN if none has (or no ids)
      entropy     row entropy / log(number of keys the row may attend to: q+1 if causal, else T), mean
                  over rows with more than one allowed key; 1 = even spread, 0 = all on one key
    A score is NaN where it cannot be measured (e.g. T = 1). Compare a score with
    `uniform_baselines(...)`: a head that spreads attention evenly already scores above 0.

    att: (L, H, T, T) attention probabilities; token_ids: T ids, or T token strings (equal values mean
    the same token; None or empty: same_token is NaN); special_mask: (T,) bool (see
    `special_mask`); causal: True for decoder-only models (att must be lower-triangular); content: (T,) bool,
    the positions `nearby` may count (None: every position; `run_scores` passes the non-special ones).
    """
    att = _attention(att, "att", (4,), "(L, H, Q, K)")
    n_layers, n_heads, t, _ = att.shape
    if causal and att.triu(diagonal=1).amax() > 1e-4:
        raise ValueError("att has weight above the diagonal, so it is not causal; pass causal=False "
                         "for a bidirectional (encoder) model")
    nan = torch.full((n_layers, n_heads), float("nan"))  # (L, H)

    def mean_or_nan(x: torch.Tensor) -> torch.Tensor:  # (L, H, R) -> (L, H)
        return x.mean(-1) if x.shape[-1] > 0 else nan.clone()

    scores = {
        # previous_pairs: from query 2, so a head resting on position 0 is not counted as reading the previous token
        "previous": mean_or_nan(att.diagonal(offset=-1, dim1=-2, dim2=-1)[..., 1:]),  # (L, H)  from (L, H, T-2)
        "next": mean_or_nan(att.diagonal(offset=1, dim1=-2, dim2=-1)),  # (L, H)  from (L, H, T-1)
        "self": mean_or_nan(att.diagonal(dim1=-2, dim2=-1)),  # (L, H)  from (L, H, T)
        "first": mean_or_nan(att[..., 1:, 0]),  # (L, H)  from (L, H, T-1)
    }

    scores["nearby"] = _nearby(att, content, causal)  # (L, H)

    mask = None if special_mask is None else _position_mask(special_mask, t, "special_mask")  # (T,)
    if mask is None or not mask.any():
        scores["special"] = nan.clone()
    else:
        scores["special"] = (att @ mask.float()).mean(-1)  # (L, H): (L, H, Q, K) @ (K,) -> (L, H, Q)

    # Plain values: a dict keyed on 0-d tensors would hash each element by identity, so no token would ever
    # match an earlier one.
    token_ids = [] if token_ids is None else (token_ids.tolist() if isinstance(token_ids, torch.Tensor)
                                              else list(token_ids))
    if not token_ids:  # AttentionRun.token_ids is [] when an adapter does not report ids
        scores["same_token"] = nan.clone()
    else:
        if len(token_ids) != t:
            raise ValueError(f"token_ids must hold one id per position ({t}); got {len(token_ids)}. "
                             f"Pass run.token_ids (or run.tokens) of the same run.")
        codes: dict = {}
        ids = torch.tensor([codes.setdefault(tok, len(codes)) for tok in token_ids])  # (T,)
        earlier = torch.tril(torch.ones(t, t, dtype=torch.bool), diagonal=-1)  # (Q, K)  k < q
        same = (ids[:, None] == ids[None, :]) & earlier  # (Q, K)
        rows = same.any(-1)  # (Q,)  queries with an earlier occurrence
        q_idx, k_idx = same.nonzero(as_tuple=True)  # the few (query, key) pairs that match: gathered, not a T x T mask
        mass = torch.zeros(n_layers, n_heads, t).index_add_(-1, q_idx, att[..., q_idx, k_idx])  # (L, H, Q)
        scores["same_token"] = mean_or_nan(mass[..., rows])  # (L, H)

    n_allowed = torch.arange(1, t + 1) if causal else torch.full((t,), t)  # (Q,)
    rows = n_allowed > 1  # (Q,)  a single allowed key has no spread to measure
    ent = -torch.xlogy(att, att).sum(-1)  # (L, H, Q)  nats
    norm_ent = ent[..., rows] / n_allowed[rows].float().log()  # (L, H, R)
    scores["entropy"] = mean_or_nan(norm_ent.clamp(0.0, 1.0))  # (L, H)
    return {name: scores[name] for name in SCORE_NAMES}


def _nearby(att: torch.Tensor, content, causal: bool) -> torch.Tensor:
    """(L, H, Q, K) -> (L, H): the census's nearby mass (its own mask), NaN when no query has a nearby key."""

    n_layers, n_heads, t, _ = att.shape
    content = [True] * t if content is None else [bool(c) for c in _position_mask(content, t, "content")]
    mask = nearby_mask(t, NEARBY_WINDOW, content, causal)  # (Q, K)
    rows = mask.any(-1)  # (Q,)
    if not rows.any():
        return torch.full((n_layers, n_heads), float("nan"))  # (L, H)
    return (att * mask).sum(-1)[..., rows].mean(-1)  # (L, H)  from (L, H, R)


def previous_pairs(t: int) -> list[tuple[int, int]]:
    """The (query, key) pairs the previous-token score averages over: (q, q - 1) for q = 2..T-1. The one
    definition of "previous token" for the page (`pattern_scores`), the census and the tiny model's probes; the
    <bos>/[CLS] question is decided in `pattern_scores`' docstring."""
    return [(q, q - 1) for q in range(2, t)]


def uniform_pattern(t: int, causal: bool) -> torch.Tensor:
    """Attention spread evenly over every allowed key -> (T, T): 1/T, or 1/(q+1) on and below the
    diagonal for a causal model. The reference a score is compared with."""
    if t < 1:
        raise ValueError(f"t must be a positive number of tokens; got {t}")
    allowed = torch.ones(t, t)  # (Q, K)
    if causal:
        allowed = torch.tril(allowed)  # (Q, K)
    return allowed / allowed.sum(-1, keepdim=True)  # (Q, K)


def uniform_baselines(t: int, causal: bool, token_ids=None, special_mask=None, content=None) -> dict[str, float]:
    """What `pattern_scores` gives for `uniform_pattern(t, causal)` on the same positions: a dict of
    floats with keys `SCORE_NAMES`. A measured score means something only above its baseline."""
    uniform = uniform_pattern(t, causal)[None, None]  # (1, 1, T, T)
    scores = pattern_scores(uniform, token_ids, special_mask, causal, content)
    return {name: float(value[0, 0]) for name, value in scores.items()}


def top_badges(scores: dict[str, torch.Tensor], baselines: dict[str, float], layer: int, head: int,
               n: int = 2, min_excess: float = 0.1) -> list[tuple[str, float]]:
    """Up to n (name, score) pairs of one head whose score is furthest above its uniform baseline.

    Only location scores count (not `entropy`, whose uniform baseline is its maximum), only those at least
    `min_excess` above baseline, and never NaN. Word them with `describe_score`.
    scores: from `pattern_scores`; baselines: from `uniform_baselines` for the same input.
    """
    missing = [name for name in SCORE_NAMES if name not in scores or name not in baselines]
    if missing:
        raise ValueError(f"scores and baselines must come from pattern_scores and uniform_baselines; "
                         f"missing {missing}")
    n_layers, n_heads = scores["self"].shape
    if not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise ValueError(f"head ({layer}, {head}) does not exist: scores cover layers 0-{n_layers - 1} "
                         f"and heads 0-{n_heads - 1}")
    found = []
    for name in SCORE_NAMES:
        if name == "entropy":
            continue
        value = float(scores[name][layer, head])
        excess = value - baselines[name]
        if not math.isnan(excess) and excess >= min_excess:
            found.append((excess, name, value))
    found.sort(reverse=True)
    return [(name, value) for _, name, value in found[:n]]


def run_scores(run: AttentionRun, causal: bool) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """`pattern_scores` and `uniform_baselines` of one run, prepared the same way wherever they are shown:
    token ids as plain ints, special and punctuation positions from `special_mask`."""
    special = special_mask(run.tokens, run.special)  # (T,)
    ids = list(run.token_ids) or None
    added = set(run.special)
    content = [i not in added for i in range(len(run.tokens))]  # (T,)  as the census's inputs (census_run)
    scores = pattern_scores(run.attentions, ids, special, causal, content)
    return scores, uniform_baselines(len(run.tokens), causal, ids, special, content)


@dataclass(frozen=True)
class ScoreWords:
    """How the page words one score: `short` for badges, `target` inside "N% of attention goes to ...",
    `unmeasurable` for why it is NaN. `entropy` is a spread, not a location, so it has no target."""
    short: str
    target: str | None
    unmeasurable: str


SCORE_WORDS = {
    "previous": ScoreWords("previous token", "the previous token", "the text has fewer than three tokens"),
    "next": ScoreWords("next token", "the next token", "the text has a single token"),
    "nearby": ScoreWords("nearby", "the tokens within 2 positions of it (itself excluded)",
                         "the text has fewer than three tokens"),
    "self": ScoreWords("itself", "the token itself", "the text has no tokens"),
    "first": ScoreWords("first token", "the first token", "the text has a single token"),
    "special": ScoreWords("special/punct.", "special and punctuation tokens",
                          "the text has no special or punctuation tokens"),
    "same_token": ScoreWords("same token earlier", "earlier occurrences of the same token",
                             "no token repeats an earlier one"),
    "entropy": ScoreWords("spread", None, "no token can attend to more than one token"),
}


def describe_score(name: str, value: float) -> str:
    """Plain words for one measured score, e.g. "62% of attention goes to the previous token on this
    input." Describes a measurement on this input, never a role of the head."""
    if name not in SCORE_NAMES:
        raise ValueError(f"{name!r} is not a score; use one of: {', '.join(SCORE_NAMES)}")
    value = float(value)
    if math.isnan(value):
        return f"Not measurable on this input: {SCORE_WORDS[name].unmeasurable}."
    if name == "entropy":
        return (f"Attention spread is {value:.2f} of its maximum on this input "
                f"(1 = even over all tokens it may attend to, 0 = all on one token).")
    text = f"{value:.0%} of attention goes to {SCORE_WORDS[name].target} on this input"
    if name == "same_token":
        text += " (averaged over tokens that repeat an earlier one)"
    return text + "."
