"""Input checks shared by the analysis functions: fail at the boundary with a message that says what is
wrong and how to fix it.

Axis letters as in `mha_viz.contract`: L layer, H head, Q query, K key, T token, D d_model, V vocab, B batch.
Also: N = L*H heads flattened layer-major (index n = layer * H + head), W word, dh head size.
"""
from __future__ import annotations

from typing import Sequence

import torch


def tensor(x, name: str, ndims: Sequence[int], shape: str) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape}; got {type(x).__name__}. "
                        f"Wrap it with torch.as_tensor(...).")
    if x.ndim not in ndims:
        raise ValueError(f"{name} must have shape {shape}; got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a float tensor; got {x.dtype}. Call .float() on it.")
    # One reduction, no tensor-sized temporary: a NaN or inf anywhere makes the sum non-finite.
    if not torch.isfinite(x.float().sum()):
        raise ValueError(f"{name} contains NaN or inf values; check the model run that produced it")
    return x.float()


def attention(att, name: str, ndims: Sequence[int], shape: str) -> torch.Tensor:
    """An attention tensor whose last two axes are (Q, K) with Q == K, non-negative, rows summing to 1."""
    att = tensor(att, name, ndims, shape)
    if att.shape[-1] != att.shape[-2]:
        raise ValueError(f"{name} must be self-attention with as many queries as keys; got "
                         f"Q={att.shape[-2]}, K={att.shape[-1]}")
    if att.numel() and float(att.amin()) < 0:
        raise ValueError(f"{name} has negative weights: pass attention probabilities (after softmax), "
                         f"not scores")
    sums = att.sum(-1)  # (..., Q)
    bad = ((sums - 1).abs() > 1e-3) & (sums > 1e-6)  # rows emptied by hide_positions may sum to 0
    if bad.any():
        raise ValueError(f"{name} rows must sum to 1 (attention probabilities); a row sums to "
                         f"{float(sums[bad][0]):.4f}. Apply softmax over the key axis first.")
    return att


def same_shape(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape; got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}. Compare two runs of the same text on the same model.")


def position_mask(mask, n: int, name: str) -> torch.Tensor:
    """A (T,) bool mask; None means every position."""
    if mask is None:
        return torch.ones(n, dtype=torch.bool)  # (T,)
    mask = torch.as_tensor(mask)
    if mask.shape != (n,):
        raise ValueError(f"{name} must be a bool mask of shape ({n},), one entry per token; "
                         f"got shape {tuple(mask.shape)}")
    return mask.bool()  # (T,)
