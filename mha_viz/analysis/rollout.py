"""Attention rollout (Abnar & Zuidema 2020).
"""
from __future__ import annotations

import torch

from mha_viz.analysis._checks import attention as _attention
from mha_viz.analysis._checks import tensor as _tensor


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
