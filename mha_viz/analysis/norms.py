"""The value-weighted norm view (Kobayashi et al. 2020) and the per-head slicing it needs.
"""
from __future__ import annotations

import torch

from mha_viz.analysis._checks import attention as _attention
from mha_viz.analysis._checks import tensor as _tensor


def norm_view(att: torch.Tensor, values: torch.Tensor, w_o: torch.Tensor) -> torch.Tensor:
    """||alpha_qk f(x_k)|| for one layer (Kobayashi et al. 2020, "Attention is Not Only a Weight:
    Analyzing Transformers with Vector Norms") -> (H, Q, K).

    f(x_k) = (x_k W_V^h + b_V^h) W_O^h is key k's value vector projected through head h's slice of the
    output projection, so entry [h, q, k] is the length of what key k actually adds to query q's output.
    Since alpha >= 0 this is alpha_qk * ||f(x_k)||. The output bias b_O is added once after the sum over
    keys, so it is left out, as in the paper.

    att: (H, Q, K) attention of one layer; values: (H, K, dh) per-head values including the value bias,
    `repeat_kv(split_heads(v_proj(x), H_kv), H)`; w_o: (H, dh, D) per-head output projection,
    `out_proj_per_head(o_proj.weight, H)` (both in mha_viz.contract.head_slices).
    """
    att = _attention(att, "att", (3,), "(H, Q, K)")
    values = _tensor(values, "values", (3,), "(H, K, dh)")
    w_o = _tensor(w_o, "w_o", (3,), "(H, dh, D)")
    n_heads, _, n_k = att.shape
    if values.shape[:2] != (n_heads, n_k):
        raise ValueError(f"values must have shape ({n_heads}, {n_k}, dh) to match att {tuple(att.shape)}; "
                         f"got {tuple(values.shape)}. For grouped-query attention expand the key/value "
                         f"heads with repeat_kv(split_heads(v, n_kv_heads), n_heads).")
    if w_o.shape[:2] != (n_heads, values.shape[2]):
        raise ValueError(f"w_o must have shape ({n_heads}, {values.shape[2]}, D); got {tuple(w_o.shape)}. "
                         f"Build it with out_proj_per_head(o_proj.weight, n_heads).")
    f = torch.einsum("hkd,hdm->hkm", values, w_o)  # (H, K, D)
    return att * f.norm(dim=-1)[:, None, :]  # (H, Q, K)
