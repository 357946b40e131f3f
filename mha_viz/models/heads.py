"""Per-head slices of a layer's projections, shared by every adapter and the analysis functions.

Heads are laid side by side along the projection's width: head h owns columns h*dh:(h+1)*dh.
"""
from __future__ import annotations

import torch


def values_per_head(v: torch.Tensor, n_heads: int, n_kv_heads: int | None = None) -> torch.Tensor:
    """Split the value projection's output v (K, H_kv * dh) (`v_proj(x)`, bias included) into heads
    -> (H, K, dh). With grouped-query attention (n_kv_heads < n_heads) each key/value head serves
    n_heads // n_kv_heads consecutive query heads, as transformers' `repeat_kv` does."""
    if v.ndim != 2:
        raise ValueError(f"v must have shape (K, H_kv * dh); got {tuple(v.shape)}")
    v = v.float()
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
    if weight.ndim != 2:
        raise ValueError(f"weight must have shape (D, H * dh), as stored by nn.Linear; got {tuple(weight.shape)}")
    w = weight.float()
    d_model, width = w.shape
    if width % n_heads:
        raise ValueError(f"weight has {width} input columns, not a multiple of n_heads={n_heads}; pass "
                         f"o_proj.weight as stored by nn.Linear (D, H * dh), not its transpose")
    return w.T.reshape(n_heads, width // n_heads, d_model)  # (H, dh, D)
