"""Measures on one head opened up (`HeadInside`): its value vectors, its weighted sum, and how the heads of a
layer add up to the attention output.

Axis letters as in mha_viz.contract: H = heads, Q/K = query/key positions, T = positions, D = d_model, dh = head size.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


def value_norms(v: torch.Tensor) -> torch.Tensor:
    """‖v_j‖ for every key j: v (K, dh) -> (K,). How much each key has to give before the weights pick; the
    value-weighted norm view builds on the same observation (Kobayashi et al. 2020, "Attention is Not Only a
    Weight")."""
    if v.ndim != 2:
        raise ValueError(f"v must be one head's values (K, dh); got shape {tuple(v.shape)}")
    return v.float().norm(dim=-1)  # (K,)


def weighted_values(weights: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """α_j v_j for one query: weights (K,) (a row of the pattern), v (K, dh) -> (K, dh). Their sum over j is the
    head's output z for that query (Vaswani et al. 2017, eq. 1: softmax(q kᵀ / √dh) V)."""
    if weights.ndim != 1 or v.ndim != 2 or weights.shape[0] != v.shape[0]:
        raise ValueError(f"weights must be (K,) and v (K, dh) over the same keys; got {tuple(weights.shape)} "
                         f"and {tuple(v.shape)}")
    return weights.float()[:, None] * v.float()  # (K, dh)


@dataclass(frozen=True)
class HeadCombination:
    """How the heads' contributions for one token add up to the attention output (see `combine_heads`)."""

    norms: torch.Tensor  # (H,) ‖c_h‖
    along: torch.Tensor  # (H,) c_h · u, u the unit vector of `total`: the signed length each head adds along it
    cosine: torch.Tensor  # (H,) cos(c_h, total); 0 for a head that contributes nothing
    bias_along: float  # the output bias's component along u (0 without a bias)
    total: torch.Tensor  # (D,) Σ_h c_h + bias: what the attention sublayer outputs for this token

    @property
    def total_norm(self) -> float:
        return float(self.total.norm())


def combine_heads(contributions: torch.Tensor, bias: torch.Tensor | None) -> HeadCombination:
    """Split one token's attention output into its heads. contributions (H, D), each head's output through its
    slice of the output projection; bias (D,) or None, added once per layer.

    The attention output is exactly the sum of independent per-head terms plus the bias (Elhage et al. 2021,
    "A Mathematical Framework for Transformer Circuits": attention heads are independent and additive). Projecting
    every term on the direction of the sum splits its length: Σ_h along_h + bias_along = ‖total‖, so a head with a
    negative share points against what the layer writes, even when its own norm is large."""
    if contributions.ndim != 2:
        raise ValueError(f"contributions must be (H, D) for one token; got {tuple(contributions.shape)}")
    c = contributions.float()  # (H, D)
    b = torch.zeros(c.shape[1]) if bias is None else bias.float()  # (D,)
    total = c.sum(0) + b  # (D,)
    size = total.norm()
    unit = total / size if size > 0 else torch.zeros_like(total)  # (D,)
    norms = c.norm(dim=-1)  # (H,)
    along = c @ unit  # (H,)
    cosine = torch.where(norms > 0, along / norms.clamp_min(1e-12), torch.zeros_like(norms))  # (H,)
    return HeadCombination(norms=norms, along=along, cosine=cosine, bias_along=float(b @ unit), total=total)


def update_sizes(resid: torch.Tensor, update: torch.Tensor) -> dict[str, float]:
    """How big a layer's write is next to the residual stream it is added to, for one token: resid (D,) the stream
    entering the layer, update (D,) the attention sublayer's output. Returns ‖resid‖, ‖update‖, their ratio,
    cos(update, resid) and ‖resid + update‖ (the stream after the addition in a pre-LN model; a post-LN model
    such as BERT normalises it next)."""
    r, u = resid.float(), update.float()
    rn, un = float(r.norm()), float(u.norm())
    return {
        "resid": rn,
        "update": un,
        "ratio": un / rn if rn > 0 else float("inf"),
        "cosine": float(r @ u) / (rn * un) if rn > 0 and un > 0 else 0.0,
        "after": float((r + u).norm()),
    }
