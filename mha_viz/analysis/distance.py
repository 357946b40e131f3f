"""Distances between attention patterns: Jensen-Shannon per row, per head pair, and an order that groups
similar heads.
"""
from __future__ import annotations

import math

import torch

from mha_viz.analysis._checks import attention as _attention
from mha_viz.analysis._checks import same_shape as _same_shape
from mha_viz.analysis._checks import tensor as _tensor


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence in bits (base 2) over the last axis: (..., K) -> (...), in [0, 1].

    JS(p, q) = (KL(p || m) + KL(q || m)) / 2 with m = (p + q) / 2 (Lin 1991, "Divergence measures based
    on the Shannon entropy"). Clark et al. 2019, "What Does BERT Look At?", section 6, measure the distance
    between two heads with it.
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
    (i = layer * H + head). Clark et al. 2019, "What Does BERT Look At?", section 6, use this distance
    (summed over tokens, not averaged) to embed BERT's heads in two dimensions. Symmetric, zero diagonal, in [0, 1].
    Cost is N^2/2 * Q * K operations (half that for causal patterns; a few seconds for 270 heads at 128 tokens),
    so cache the result per run.
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
    agglomerative clustering with optimal leaf ordering (scipy; Bar-Joseph et al. 2001). Clark et al. 2019
    show the same distances as a two-dimensional map (multidimensional scaling) instead of an order.
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
    # Imported here, on first use, to keep scipy.cluster out of the page's start-up; scipy is a requirement.
    from scipy.cluster.hierarchy import leaves_list, linkage
    from scipy.spatial.distance import squareform

    condensed = squareform(d.double().numpy(), checks=False)  # (N*(N-1)/2,)
    tree = linkage(condensed, method="average", optimal_ordering=True)
    return torch.as_tensor(leaves_list(tree), dtype=torch.long)  # (N,)
