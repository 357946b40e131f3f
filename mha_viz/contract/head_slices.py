"""Per-head slices of a layer's projections, shared by every adapter and the analysis functions: the contract's first
room (models/ and analysis/ import it; it imports nothing of the package).

Heads are laid side by side along the projection's width: head h owns columns h*dh:(h+1)*dh.
"""
from __future__ import annotations

import torch


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """A projection's output x (T, H * dh) as one slice per head -> (H, T, dh)."""
    if x.ndim != 2 or x.shape[1] % n_heads:
        raise ValueError(f"x must have shape (T, H * dh) with a width divisible by {n_heads} heads; "
                         f"got {tuple(x.shape)}")
    n_t, width = x.shape
    return x.view(n_t, n_heads, width // n_heads).transpose(0, 1)  # (H, T, dh)


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Key or value heads (H_kv, T, dh) repeated for the query heads that share them -> (H, T, dh). With
    grouped-query attention each key/value head serves n_heads // H_kv consecutive query heads, as
    transformers' `repeat_kv` does; without it (H_kv == H) x comes back unchanged."""
    if x.ndim != 3 or n_heads % x.shape[0]:
        raise ValueError(f"x must have shape (H_kv, T, dh) with H_kv dividing {n_heads} query heads; "
                         f"got {tuple(x.shape)}")
    return x.repeat_interleave(n_heads // x.shape[0], dim=0)  # (H, T, dh)


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
