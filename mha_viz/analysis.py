"""Pure functions on attention tensors: ablation effects, pattern distances, measured pattern scores,
attention rollout, the value-weighted norm view and token display transforms.

Torch only (scipy is used for clustering when present). No UI code: every function takes tensors and
returns tensors or plain Python values, so views and tests can call them directly.

Axis letters as in `contract.py`: L layer, H head, Q query, K key, T token, D d_model, V vocab, B batch.
Also: N = L*H heads flattened layer-major (index n = layer * H + head), W word, dh head size.

Every score here is a measurement of where attention went on one input. A head's pattern is learned;
a high score is not a label of what the head "does".
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import torch
import torch.nn.functional as F

# Keys of the dict returned by `pattern_scores`, in display order.
SCORE_NAMES = ("previous", "next", "self", "first", "special", "same_token", "entropy")

# Word-start markers of SentencePiece ("▁"), byte-level BPE ("Ġ") and labels already decoded to a space.
_START_MARKERS = ("▁", "Ġ", " ")
_CONTINUATION = "##"  # WordPiece marks the pieces that continue a word


# ----------------------------------------------------------------------------------------------------
# Input checks: fail at the boundary with a message that says what is wrong and how to fix it.


def _tensor(x, name: str, ndims: Sequence[int], shape: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape}; got {type(x).__name__}. "
                        f"Wrap it with torch.as_tensor(...).")
    if x.ndim not in ndims:
        raise ValueError(f"{name} must have shape {shape}; got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a float tensor; got {x.dtype}. Call .float() on it.")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or inf values; check the model run that produced it")
    return x.float()


def _attention(att, name: str, ndims: Sequence[int], shape: str) -> torch.Tensor:
    """An attention tensor whose last two axes are (Q, K) with Q == K, non-negative, rows summing to 1."""
    att = _tensor(att, name, ndims, shape)
    if att.shape[-1] != att.shape[-2]:
        raise ValueError(f"{name} must be self-attention with as many queries as keys; got "
                         f"Q={att.shape[-2]}, K={att.shape[-1]}")
    if (att < 0).any():
        raise ValueError(f"{name} has negative weights: pass attention probabilities (after softmax), "
                         f"not scores")
    sums = att.sum(-1)  # (..., Q)
    bad = ((sums - 1).abs() > 1e-3) & (sums > 1e-6)  # rows emptied by hide_positions may sum to 0
    if bad.any():
        raise ValueError(f"{name} rows must sum to 1 (attention probabilities); a row sums to "
                         f"{float(sums[bad][0]):.4f}. Apply softmax over the key axis first.")
    return att


def _same_shape(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape; got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}. Compare two runs of the same text on the same model.")


def _position_mask(mask, n: int, name: str) -> torch.Tensor:
    """A (T,) bool mask; None means every position."""
    if mask is None:
        return torch.ones(n, dtype=torch.bool)  # (T,)
    mask = torch.as_tensor(mask)
    if mask.shape != (n,):
        raise ValueError(f"{name} must be a bool mask of shape ({n},), one entry per token; "
                         f"got shape {tuple(mask.shape)}")
    return mask.bool()  # (T,)


# ----------------------------------------------------------------------------------------------------
# 1. Ablation effects: how much did switching heads off change the output?


def _mean_pool(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean over the kept token positions of x (..., T, D)."""
    if not keep.any():
        raise ValueError("mask selects no positions: keep at least one token in the sentence embedding")
    w = keep.float() / keep.sum()  # (T,)
    return torch.einsum("...td,t->...d", x, w)  # (..., D)


def cosine_change(out_a: torch.Tensor, out_b: torch.Tensor, mask=None) -> float:
    """Cosine similarity of the sentence embeddings of two runs (1.0 = unchanged direction).

    The sentence embedding is the mean of the final hidden states over the positions in `mask` (all if
    None), as sentence-transformers pools all-MiniLM-L6-v2 (Reimers & Gurevych 2019, "Sentence-BERT").
    Its later L2 normalisation does not change a cosine. Head ablation as a probe follows Michel, Levy &
    Neubig 2019, "Are Sixteen Heads Really Better than One?".

    out_a, out_b: (T, D) final hidden states, e.g. baseline `run.output` and ablated `run.output`.
    mask: optional (T,) bool, True for positions to include in the mean.
    """
    a = _tensor(out_a, "out_a", (2,), "(T, D)")
    b = _tensor(out_b, "out_b", (2,), "(T, D)")
    _same_shape(a, b, "out_a", "out_b")
    keep = _position_mask(mask, a.shape[0], "mask")  # (T,)
    return float(F.cosine_similarity(_mean_pool(a, keep), _mean_pool(b, keep), dim=0))


def one_minus_cos_batch(out_base: torch.Tensor, outs: torch.Tensor, mask=None) -> torch.Tensor:
    """1 - `cosine_change(out_base, outs[i], mask)` for every run i of a batch, in one go -> (B,).

    Used for the head-importance map: one batched forward ablates one head per batch row.
    out_base: (T, D) baseline hidden states; outs: (B, T, D), e.g. from `Model.run_batch_keep`.
    """
    base = _tensor(out_base, "out_base", (2,), "(T, D)")
    batch = _tensor(outs, "outs", (3,), "(B, T, D)")
    _same_shape(base, batch[0], "out_base", "each outs[i]")
    keep = _position_mask(mask, base.shape[0], "mask")  # (T,)
    e_base = _mean_pool(base, keep)  # (D,)
    e_batch = _mean_pool(batch, keep)  # (B, D)
    return 1.0 - F.cosine_similarity(e_batch, e_base[None, :], dim=-1)  # (B,)


def token_change(out_a: torch.Tensor, out_b: torch.Tensor, relative: bool = False) -> torch.Tensor:
    """Per-token L2 norm of the change in final hidden state, ||out_b[t] - out_a[t]|| -> (T,).

    With relative=True each norm is divided by ||out_a[t]||, so out_a must be the baseline run.
    A per-position view of an ablation effect (Michel, Levy & Neubig 2019).
    """
    a = _tensor(out_a, "out_a", (2,), "(T, D)")
    b = _tensor(out_b, "out_b", (2,), "(T, D)")
    _same_shape(a, b, "out_a", "out_b")
    change = (b - a).norm(dim=-1)  # (T,)
    if relative:
        change = change / a.norm(dim=-1).clamp_min(1e-12)  # (T,)
    return change


def _kl_from_logits(base: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """KL(softmax(base) || softmax(other)) in nats over the last axis; (..., V) -> (...)."""
    log_p = F.log_softmax(base, dim=-1)  # (..., V)
    log_q = F.log_softmax(other, dim=-1)  # (..., V)
    return (log_p.exp() * (log_p - log_q)).sum(-1).clamp_min(0.0)  # (...)


def _at_position(logits: torch.Tensor, position: int, name: str) -> torch.Tensor:
    """Pick one position from (..., T, V) logits."""
    t = logits.shape[-2]
    if not -t <= position < t:
        raise ValueError(f"position {position} is out of range for {name} with {t} positions; "
                         f"use -1 for the last token")
    return logits[..., position, :]  # (..., V)


def next_token_kl(logits_a: torch.Tensor, logits_b: torch.Tensor, position: int = -1) -> float:
    """KL(p_base || p_ablated) in nats between next-token distributions at one position.

    p = softmax(logits). logits_a is the baseline, logits_b the ablated run; both (V,) or both (T, V),
    in which case `position` picks the row (default: the last token, whose prediction is the next token).
    KL divergence: Kullback & Leibler 1951; as an ablation effect: Michel, Levy & Neubig 2019.
    """
    a = _tensor(logits_a, "logits_a", (1, 2), "(V,) or (T, V)")
    b = _tensor(logits_b, "logits_b", (1, 2), "(V,) or (T, V)")
    _same_shape(a, b, "logits_a", "logits_b")
    if a.ndim == 2:
        a, b = _at_position(a, position, "logits_a"), _at_position(b, position, "logits_b")  # (V,)
    return float(_kl_from_logits(a, b))


def kl_batch(logits_base: torch.Tensor, logits_batch: torch.Tensor, position: int = -1) -> torch.Tensor:
    """`next_token_kl(logits_base, logits_batch[i], position)` for every run i of a batch -> (B,).

    logits_base: (V,) or (T, V); logits_batch: (B, V) or (B, T, V), e.g. from `Model.run_batch_keep`.
    """
    base = _tensor(logits_base, "logits_base", (1, 2), "(V,) or (T, V)")
    batch = _tensor(logits_batch, "logits_batch", (2, 3), "(B, V) or (B, T, V)")
    if batch.ndim != base.ndim + 1:
        raise ValueError(f"logits_batch must be logits_base's shape with a leading batch axis; got "
                         f"{tuple(base.shape)} and {tuple(batch.shape)}")
    _same_shape(base, batch[0], "logits_base", "each logits_batch[i]")
    if base.ndim == 2:
        base = _at_position(base, position, "logits_base")  # (V,)
        batch = _at_position(batch, position, "logits_batch")  # (B, V)
    return _kl_from_logits(base[None, :].expand_as(batch), batch)  # (B,)


def topk_predictions(logits: torch.Tensor, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most probable tokens under softmax(logits): (probs (k,), ids (k,)), most probable first.

    logits: (V,), e.g. `run.logits[-1]` for a causal LM's next token.
    """
    x = _tensor(logits, "logits", (1,), "(V,); pick a position first, e.g. run.logits[-1]")
    if not 1 <= k <= x.shape[0]:
        raise ValueError(f"k must be between 1 and the vocabulary size {x.shape[0]}; got {k}")
    probs, ids = torch.softmax(x, dim=-1).topk(k)  # (k,), (k,)
    return probs, ids


# ----------------------------------------------------------------------------------------------------
# 2. Distances between attention patterns


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in bits (base 2) over the last axis: (..., K) -> (...), in [0, 1].

    JS(p, q) = (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2 (Lin 1991, "Divergence measures based
    on the Shannon entropy"); Clark et al. 2019, "What Does BERT Look At?", compare heads with it.
    Zeros are exact: 0 * log 0 counts as 0 (torch.xlogy), so no epsilon is needed. Identical rows give 0,
    rows with disjoint support give 1 bit.
    """
    p = _tensor(p, "p", range(1, 9), "(..., K)")
    q = _tensor(q, "q", range(1, 9), "(..., K)")
    _same_shape(p, q, "p", "q")
    if (p < 0).any() or (q < 0).any():
        raise ValueError("p and q must be probability distributions (non-negative); apply softmax first")
    m = (p + q) / 2  # (..., K)
    kl_pm = (torch.xlogy(p, p) - torch.xlogy(p, m)).sum(-1)  # (...)
    kl_qm = (torch.xlogy(q, q) - torch.xlogy(q, m)).sum(-1)  # (...)
    return ((kl_pm + kl_qm) / (2 * math.log(2))).clamp(0.0, 1.0)  # (...)


def pattern_shift(att_a: torch.Tensor, att_b: torch.Tensor) -> torch.Tensor:
    """How much each head's pattern moved between two runs: mean JS (bits) over query rows -> (L, H).

    att_a, att_b: (L, H, Q, K), e.g. baseline and ablated `run.attentions`. Heads before the first ablated
    layer give 0; an ablated head's own pattern is unchanged too (ablation removes its output, not its
    attention). JS as in `js_divergence` (Lin 1991; Clark et al. 2019).
    """
    a = _attention(att_a, "att_a", (4,), "(L, H, Q, K)")
    b = _attention(att_b, "att_b", (4,), "(L, H, Q, K)")
    _same_shape(a, b, "att_a", "att_b")
    return js_divergence(a, b).mean(-1)  # (L, H)


def head_distance(att: torch.Tensor) -> torch.Tensor:
    """Mean JS divergence (bits) between every pair of heads' patterns on this input -> (N, N), N = L*H.

    Entry [i, j] = mean over query rows q of JS(att_i[q], att_j[q]), heads flattened layer-major
    (i = layer * H + head). Clark et al. 2019, "What Does BERT Look At?", section 6, cluster heads by this
    distance. Symmetric, zero diagonal, in [0, 1]. Cost is N^2/2 * Q * K operations (half that for causal
    patterns; a few seconds for 270 heads at 128 tokens), so cache the result per run.
    """
    att = _attention(att, "att", (4,), "(L, H, Q, K)")
    n_layers, n_heads, n_q, n_k = att.shape
    p = att.reshape(n_layers * n_heads, n_q * n_k)  # (N, Q*K)
    p = p[:, (p > 0).any(0)]  # (N, M)  cells no head uses add nothing; drops half a causal pattern
    n = p.shape[0]
    # JS(p, q) = H(m) - (H(p) + H(q)) / 2 in nats; only H(m) needs every pair. With s = p + q = 2m,
    # sum m log m = (sum s log s - log 2 * sum s) / 2, which saves a division per cell.
    ent = -torch.xlogy(p, p).sum(-1)  # (N,)
    mass = p.sum(-1)  # (N,)  Q, unless rows were emptied
    dist = torch.zeros(n, n)  # (N, N)
    for i in range(n):
        s = p[i : i + 1] + p[i:]  # (N-i, M)
        s_log_s = (s * s.clamp_min(1e-30).log()).sum(-1)  # (N-i,)
        ent_m = -(s_log_s - math.log(2) * (mass[i] + mass[i:])) / 2  # (N-i,)
        dist[i, i:] = ent_m - (ent[i] + ent[i:]) / 2  # (N-i,)
    dist = torch.triu(dist, diagonal=1)  # (N, N)  the diagonal is exactly 0
    dist = (dist + dist.T) / (n_q * math.log(2))  # (N, N)  mean over query rows, nats -> bits, mirrored
    return dist.clamp(0.0, 1.0)


def similarity_order(dist: torch.Tensor) -> torch.Tensor:
    """A permutation of the N heads that puts heads with similar patterns next to each other -> (N,).

    dist: (N, N) symmetric distances, e.g. from `head_distance`. Uses the leaf order of average-linkage
    agglomerative clustering with optimal leaf ordering (scipy; Bar-Joseph et al. 2001), as Clark et al.
    2019 group heads by JS distance. Without scipy it falls back to a greedy nearest-neighbour chain that
    starts at one end of the farthest pair.
    """
    d = _tensor(dist, "dist", (2,), "(N, N)")
    if d.shape[0] != d.shape[1] or d.shape[0] == 0:
        raise ValueError(f"dist must be a non-empty square (N, N) matrix; got shape {tuple(d.shape)}")
    if (d < 0).any():
        raise ValueError("dist must hold non-negative distances; got a negative entry")
    if not torch.allclose(d, d.T, atol=1e-5):
        raise ValueError("dist must be symmetric; pass (dist + dist.T) / 2 if it is not")
    n = d.shape[0]
    if n <= 2:
        return torch.arange(n)  # (N,)
    d = (d + d.T) / 2  # (N, N)
    d.fill_diagonal_(0.0)
    try:
        from scipy.cluster.hierarchy import leaves_list, linkage
        from scipy.spatial.distance import squareform
    except ImportError:
        return _greedy_chain(d)
    condensed = squareform(d.double().numpy(), checks=False)  # (N*(N-1)/2,)
    tree = linkage(condensed, method="average", optimal_ordering=True)
    return torch.as_tensor(leaves_list(tree), dtype=torch.long)  # (N,)


def _greedy_chain(d: torch.Tensor) -> torch.Tensor:
    """Nearest-neighbour chain over a distance matrix (N, N), starting at one end of the farthest pair."""
    n = d.shape[0]
    start = int(torch.argmax(d).item()) // n
    order = [start]
    used = torch.zeros(n, dtype=torch.bool)  # (N,)
    used[start] = True
    for _ in range(n - 1):
        row = d[order[-1]].masked_fill(used, float("inf"))  # (N,)
        nxt = int(torch.argmin(row))
        order.append(nxt)
        used[nxt] = True
    return torch.tensor(order, dtype=torch.long)  # (N,)


# ----------------------------------------------------------------------------------------------------
# 3. Measured pattern scores per head


def pattern_scores(att: torch.Tensor, token_ids=None, special_mask=None, causal: bool = False
                   ) -> dict[str, torch.Tensor]:
    """Where each head's attention went on this input: a dict of (L, H) scores, keys `SCORE_NAMES`.

    Each score is a fraction of attention mass in [0, 1], averaged over the query rows where the target
    exists (Clark et al. 2019, "What Does BERT Look At?", measure attention to the previous/next token,
    [CLS], [SEP] and punctuation this way; Kovaleva et al. 2019 describe diagonal and vertical patterns):
      previous    att[q, q-1], mean over queries q = 1..T-1
      next        att[q, q+1], mean over queries q = 0..T-2 (always 0 in a causal model)
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
    `special_mask`); causal: True for decoder-only models (att must be lower-triangular).
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
        "previous": mean_or_nan(att.diagonal(offset=-1, dim1=-2, dim2=-1)),  # (L, H)  from (L, H, T-1)
        "next": mean_or_nan(att.diagonal(offset=1, dim1=-2, dim2=-1)),  # (L, H)  from (L, H, T-1)
        "self": mean_or_nan(att.diagonal(dim1=-2, dim2=-1)),  # (L, H)  from (L, H, T)
        "first": mean_or_nan(att[..., 1:, 0]),  # (L, H)  from (L, H, T-1)
    }

    mask = None if special_mask is None else _position_mask(special_mask, t, "special_mask")  # (T,)
    if mask is None or not mask.any():
        scores["special"] = nan.clone()
    else:
        scores["special"] = (att * mask.float()).sum(-1).mean(-1)  # (L, H)

    token_ids = [] if token_ids is None else list(token_ids)
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
        mass = (att * same.float()).sum(-1)  # (L, H, Q)
        scores["same_token"] = mean_or_nan(mass[..., rows])  # (L, H)

    n_allowed = torch.arange(1, t + 1) if causal else torch.full((t,), t)  # (Q,)
    rows = n_allowed > 1  # (Q,)  a single allowed key has no spread to measure
    ent = -torch.xlogy(att, att).sum(-1)  # (L, H, Q)  nats
    norm_ent = ent[..., rows] / n_allowed[rows].float().log()  # (L, H, R)
    scores["entropy"] = mean_or_nan(norm_ent.clamp(0.0, 1.0))  # (L, H)
    return {name: scores[name] for name in SCORE_NAMES}


def uniform_pattern(t: int, causal: bool) -> torch.Tensor:
    """Attention spread evenly over every allowed key -> (T, T): 1/T, or 1/(q+1) on and below the
    diagonal for a causal model. The reference a score is compared with."""
    if t < 1:
        raise ValueError(f"t must be a positive number of tokens; got {t}")
    allowed = torch.ones(t, t)  # (Q, K)
    if causal:
        allowed = torch.tril(allowed)  # (Q, K)
    return allowed / allowed.sum(-1, keepdim=True)  # (Q, K)


def uniform_baselines(t: int, causal: bool, token_ids=None, special_mask=None) -> dict[str, float]:
    """What `pattern_scores` gives for `uniform_pattern(t, causal)` on the same positions: a dict of
    floats with keys `SCORE_NAMES`. A measured score means something only above its baseline."""
    uniform = uniform_pattern(t, causal)[None, None]  # (1, 1, T, T)
    scores = pattern_scores(uniform, token_ids, special_mask, causal)
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


_TARGETS = {
    "previous": "the previous token",
    "next": "the next token",
    "self": "the token itself",
    "first": "the first token",
    "special": "special and punctuation tokens",
    "same_token": "earlier occurrences of the same token",
}

_NOT_MEASURABLE = {
    "previous": "the text has a single token",
    "next": "the text has a single token",
    "self": "the text has no tokens",
    "first": "the text has a single token",
    "special": "the text has no special or punctuation tokens",
    "same_token": "no token repeats an earlier one",
    "entropy": "no token can attend to more than one token",
}


def describe_score(name: str, value: float) -> str:
    """Plain words for one measured score, e.g. "62% of attention goes to the previous token on this
    input." Describes a measurement on this input, never a role of the head."""
    if name not in SCORE_NAMES:
        raise ValueError(f"{name!r} is not a score; use one of: {', '.join(SCORE_NAMES)}")
    value = float(value)
    if math.isnan(value):
        return f"Not measurable on this input: {_NOT_MEASURABLE[name]}."
    if name == "entropy":
        return (f"Attention spread is {value:.2f} of its maximum on this input "
                f"(1 = even over all tokens it may attend to, 0 = all on one token).")
    text = f"{value:.0%} of attention goes to {_TARGETS[name]} on this input"
    if name == "same_token":
        text += " (averaged over tokens that repeat an earlier one)"
    return text + "."


# ----------------------------------------------------------------------------------------------------
# 4. Attention rollout


def rollout(att: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers") -> (L, Q, K).

    Per layer: A = mean over heads of att, then A' = 0.5 * A + 0.5 * I to account for the residual
    connection, rows renormalised to 1. Rollout through layer l is R_l = A'_l @ ... @ A'_0, so row q of
    R_l says how much each input token flows into position q after layer l. Output [l] is R_l.
    The head mean and the equal residual weight are the paper's choices; they ignore value norms (see
    `norm_view`). keep: optional (L, H) 0/1 head mask; ablated heads contribute nothing to the mean, and
    a layer with every head ablated passes the residual stream through (A' = I).
    """
    att = _attention(att, "att", (4,), "(L, H, Q, K)")
    n_layers, n_heads, t, _ = att.shape
    if keep is None:
        keep = torch.ones(n_layers, n_heads)  # (L, H)
    keep = _tensor(torch.as_tensor(keep).float(), "keep", (2,), "(L, H)")
    if keep.shape != (n_layers, n_heads):
        raise ValueError(f"keep must have shape ({n_layers}, {n_heads}), one entry per head; "
                         f"got {tuple(keep.shape)}. Use contract.head_keep_mask(...).")
    eye = torch.eye(t)  # (T, T)
    total = keep.sum(-1)  # (L,)
    mean = torch.einsum("lhqk,lh->lqk", att, keep) / total.clamp_min(1)[:, None, None]  # (L, T, T)
    mixed = torch.where(total[:, None, None] > 0, 0.5 * mean + 0.5 * eye, eye)  # (L, T, T)
    mixed = mixed / mixed.sum(-1, keepdim=True)  # (L, T, T)
    out = torch.empty(n_layers, t, t)  # (L, T, T)
    flow = eye  # (T, T)
    for layer in range(n_layers):
        flow = mixed[layer] @ flow  # (T, T)
        out[layer] = flow
    return out


# ----------------------------------------------------------------------------------------------------
# 5. Value-weighted norm view


def norm_view(att: torch.Tensor, values: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """||alpha_qk f(x_k)|| for one layer (Kobayashi et al. 2020, "Attention is Not Only a Weight:
    Analyzing Transformers with Vector Norms") -> (H, Q, K).

    f(x_k) = (x_k W_V^h + b_V^h) W_O^h is key k's value vector projected through head h's slice of the
    output projection, so entry [h, q, k] is the length of what key k actually adds to query q's output.
    Since alpha >= 0 this is alpha_qk * ||f(x_k)||. The output bias b_O is added once after the sum over
    keys, so it is left out, as in the paper.

    att: (H, Q, K) attention of one layer; values: (H, K, dh) per-head values including the value bias
    (see `values_per_head`); w_o: (H, dh, D) per-head output projection (see `out_proj_per_head`).
    """
    att = _attention(att, "att", (3,), "(H, Q, K)")
    values = _tensor(values, "values", (3,), "(H, K, dh)")
    w_o = _tensor(w_o, "w_o", (3,), "(H, dh, D)")
    n_heads, _, n_k = att.shape
    if values.shape[:2] != (n_heads, n_k):
        raise ValueError(f"values must have shape ({n_heads}, {n_k}, dh) to match att {tuple(att.shape)}; "
                         f"got {tuple(values.shape)}. For grouped-query attention expand the key/value "
                         f"heads with values_per_head(v, n_heads, n_kv_heads).")
    if w_o.shape[:2] != (n_heads, values.shape[2]):
        raise ValueError(f"w_o must have shape ({n_heads}, {values.shape[2]}, D); got {tuple(w_o.shape)}. "
                         f"Build it with out_proj_per_head(o_proj.weight, n_heads).")
    f = torch.einsum("hkd,hdm->hkm", values, w_o)  # (H, K, D)
    return att * f.norm(dim=-1)[:, None, :]  # (H, Q, K)


def values_per_head(v: torch.Tensor, n_heads: int, n_kv_heads: int | None = None) -> torch.Tensor:
    """Split the value projection's output v (K, H_kv * dh) (`v_proj(x)`, bias included) into heads
    -> (H, K, dh). With grouped-query attention (n_kv_heads < n_heads) each key/value head serves
    n_heads // n_kv_heads consecutive query heads, as transformers' `repeat_kv` does."""
    v = _tensor(v, "v", (2,), "(K, H_kv * dh)")
    n_kv = n_kv_heads or n_heads
    if n_heads % n_kv or v.shape[1] % n_kv:
        raise ValueError(f"v has width {v.shape[1]}, which must split into {n_kv} key/value heads that "
                         f"divide {n_heads} query heads; check n_heads and n_kv_heads")
    n_k, width = v.shape
    heads = v.view(n_k, n_kv, width // n_kv).transpose(0, 1)  # (H_kv, K, dh)
    return heads.repeat_interleave(n_heads // n_kv, dim=0)  # (H, K, dh)


def out_proj_per_head(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Split an output projection's `nn.Linear` weight (D, H * dh) into per-head slices -> (H, dh, D).

    Head outputs are laid side by side along the input axis, head h at columns h*dh:(h+1)*dh, so
    concat_h(z_h) @ weight.T == sum_h z_h @ result[h]."""
    w = _tensor(weight, "weight", (2,), "(D, H * dh), as stored by nn.Linear")
    d_model, width = w.shape
    if width % n_heads:
        raise ValueError(f"weight has {width} input columns, not a multiple of n_heads={n_heads}; pass "
                         f"o_proj.weight as stored by nn.Linear (D, H * dh), not its transpose")
    return w.T.reshape(n_heads, width // n_heads, d_model)  # (H, dh, D)


# ----------------------------------------------------------------------------------------------------
# 6. Token display transforms


def hide_positions(att: torch.Tensor, keep_mask) -> torch.Tensor:
    """Drop hidden positions from both axes and renormalise each remaining row to sum to 1
    -> (..., T', T'), T' = keep_mask.sum().

    Shows how a query's attention divides among the visible tokens, e.g. with [CLS]/[SEP] hidden, since
    those often take most of the mass (Clark et al. 2019). A row whose kept mass is 0 stays all zeros.
    """
    att = _attention(att, "att", range(2, 9), "(..., Q, K)")
    keep = _position_mask(keep_mask, att.shape[-1], "keep_mask")  # (T,)
    if not keep.any():
        raise ValueError("keep_mask hides every position; keep at least one token")
    kept = att[..., keep, :][..., keep]  # (..., T', T')
    sums = kept.sum(-1, keepdim=True)  # (..., T', 1)
    return torch.where(sums > 0, kept / sums.clamp_min(1e-30), kept)  # (..., T', T')


def merge_word_pieces(att: torch.Tensor, groups: list[list[int]]) -> torch.Tensor:
    """Token-to-token attention -> word-to-word attention (..., W, W), as Clark et al. 2019 ("What Does
    BERT Look At?", section 4): attention *to* a word is the sum over its pieces, attention *from* a word
    is the mean over its pieces. Rows still sum to 1.

    groups: W lists of positions covering each of the T positions exactly once, in order (see
    `word_groups`).
    """
    att = _attention(att, "att", range(2, 9), "(..., Q, K)")
    t = att.shape[-1]
    flat = [int(i) for g in groups for i in g]
    if sorted(flat) != list(range(t)) or any(len(g) == 0 for g in groups):
        raise ValueError(f"groups must split positions 0-{t - 1} into non-empty words, each position "
                         f"exactly once; build them with word_groups(tokens)")
    member = torch.zeros(len(groups), t)  # (W, T)
    for w, g in enumerate(groups):
        member[w, g] = 1.0
    to_words = att @ member.T  # (..., Q, W)  sum over each word's key pieces
    mean_rows = member / member.sum(-1, keepdim=True)  # (W, T)
    return mean_rows @ to_words  # (..., W, W)  mean over each word's query pieces


def _looks_special(token: str) -> bool:
    """[CLS], [SEP], <s>, </s>, <|im_start|> and the like."""
    return len(token) > 2 and ((token[0] == "[" and token[-1] == "]") or (token[0] == "<" and token[-1] == ">"))


def word_groups(tokens: Sequence[str], starts: Sequence[bool] | None = None,
                special: Iterable[int] = ()) -> list[list[int]]:
    """Group subword tokens into words -> W lists of positions, for `merge_word_pieces`.

    starts: optional explicit word-start flags, one per token. Otherwise the scheme is detected:
    SentencePiece ("▁") and byte-level BPE ("Ġ", or a label decoded to a leading space) mark word
    *starts*; WordPiece marks *continuations* with "##"; with no markers every token is a word.
    Special tokens (positions in `special`, and [..]/<..>-shaped tokens) are always words of their own.
    """
    tokens = list(tokens)
    if not all(isinstance(tok, str) for tok in tokens):
        raise TypeError("tokens must be a list of strings, e.g. run.tokens")
    special = {int(i) for i in special}
    if starts is not None:
        starts = [bool(s) for s in starts]
        if len(starts) != len(tokens):
            raise ValueError(f"starts must have one flag per token ({len(tokens)}); got {len(starts)}")
    elif any(tok.startswith(_START_MARKERS) for tok in tokens[1:]):
        starts = [tok.startswith(_START_MARKERS) for tok in tokens]
    else:
        starts = [not tok.startswith(_CONTINUATION) for tok in tokens]
    alone = [i in special or _looks_special(tok) for i, tok in enumerate(tokens)]
    groups: list[list[int]] = []
    for i in range(len(tokens)):
        if i == 0 or starts[i] or alone[i] or alone[i - 1]:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def _strip_marker(token: str) -> str:
    if token.startswith(_CONTINUATION):
        return token[len(_CONTINUATION):]
    return token.lstrip("".join(_START_MARKERS))


def word_labels(tokens: Sequence[str], groups: list[list[int]]) -> list[str]:
    """Display labels for merged words: each word's pieces joined, subword markers removed."""
    return ["".join(_strip_marker(tokens[i]) for i in g) for g in groups]


def special_mask(tokens: Sequence[str], special: Iterable[int] = ()) -> torch.Tensor:
    """(T,) bool: True at tokenizer-added special positions (e.g. `run.special`), [..]/<..>-shaped
    tokens, and tokens made only of punctuation or symbols (".", ",", "##!"). For `pattern_scores`."""
    special = {int(i) for i in special}
    flags = []
    for i, tok in enumerate(tokens):
        text = _strip_marker(tok).strip()
        punct = bool(text) and not any(ch.isalnum() for ch in text)
        flags.append(i in special or _looks_special(tok) or punct)
    return torch.tensor(flags, dtype=torch.bool)  # (T,)
