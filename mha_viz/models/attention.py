"""Multi-head self-attention written out, so every head's weights exist and can be shown or switched off (the
tiny model and the in-repo BERT encoder both use it).

Axis letters used in every shape comment below:
    B = batch, T = token position (query and key: self-attention), H = heads,
    dh = size of one head (d_model / H), D = d_model.

No fused `scaled_dot_product_attention` here: its fast path never materialises the weights, and the weights are
the whole point of this app. The parity tests check this explicit path against it.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import nn

from mha_viz.models.points import HeadEdit


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
    query_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention with an explicit softmax (Vaswani et al. 2017, eq. 1).

    q, k, v: (..., T, dh). mask: bool, broadcastable to (..., T, T), True where a query may look at a key.
    query_scale: (T,) or None, a further factor on each query's scores (`length_scale`).
    Returns (out (..., T, dh), weights (..., T, T)); each row of weights sums to 1. Both are float32 whatever q,
    k and v are (MHA_VIZ_DTYPE=bfloat16 or float16): the weights shown and every score read from them keep
    float32's precision, and a float32 model pays nothing (.float() of a float32 tensor is the tensor itself).
    """
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"query and key head sizes differ: {q.shape[-1]} vs {k.shape[-1]}; project both to dh")
    q, k, v = q.float(), k.float(), v.float()  # (..., T, dh) each, float32
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T, T)
    if query_scale is not None:
        scores = scores * query_scale.float()[:, None]  # (..., T, T)
    if mask is not None:
        # -inf (not a large negative number) so masked keys get exactly 0 weight, and causal rows stay triangular.
        scores = scores.masked_fill(~mask, float("-inf"))  # (..., T, T)
    weights = torch.softmax(scores, dim=-1)  # (..., T, T)
    out = weights @ v  # (..., T, dh)
    return out, weights


def length_scale(n_positions: int) -> torch.Tensor:
    """log(number of keys a causal query sees) per query position, log(t + 1), with query 0 (one key, any factor
    gives it weight 1) at log 2: Scalable-Softmax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention"),
    softmax(s log(n) z), with its learned per-head s left to the query/key weights. Why: with plain softmax a fixed
    score margin buys less weight as keys accumulate, and the tiny model's previous-token heads faded along the
    text (one seed's from 0.97 at position 20 to 0.84-0.89 at 52-63, where 12 nearby keys shared what it lost).
    -> (T,)"""
    return torch.log(torch.arange(1, n_positions + 1, dtype=torch.float32).clamp_min(2))  # (T,)


def _check_head_keep(head_keep: torch.Tensor, B: int, H: int) -> torch.Tensor:
    """Accept (H,) or (B, H); return (B, H, 1, 1) ready to scale each head's output."""
    if head_keep.dim() == 1 and head_keep.shape[0] == H:
        head_keep = head_keep.unsqueeze(0).expand(B, H)  # (B, H)
    if head_keep.shape != (B, H):
        raise ValueError(
            f"head_keep must have shape ({H},) or ({B}, {H}) (1 = keep, 0 = ablate); got {tuple(head_keep.shape)}"
        )
    return head_keep.view(B, H, 1, 1)  # (B, H, 1, 1)


def check_stack_inputs(ids: torch.Tensor, head_keep: torch.Tensor | None, n_layers: int, n_heads: int,
                       max_len: int) -> torch.Tensor | None:
    """The checks every stack built on this attention makes of its inputs: ids (B, T) within max_len, and a keep
    mask (L, H) or (B, L, H). Returns the mask as (B, L, H), or None."""
    if ids.dim() != 2:
        raise ValueError(f"ids must be (B, T) token ids; got shape {tuple(ids.shape)}; add a batch axis")
    B, T = ids.shape
    if T > max_len:
        raise ValueError(f"{T} tokens exceed max_len={max_len}; keep the first {max_len}")
    if head_keep is None:
        return None
    if head_keep.shape == (n_layers, n_heads):
        head_keep = head_keep.unsqueeze(0).expand(B, -1, -1)  # (B, L, H)
    if head_keep.shape != (B, n_layers, n_heads):
        raise ValueError(f"head_keep must be ({n_layers}, {n_heads}) or ({B}, {n_layers}, {n_heads}) with 1 = keep "
                         f"and 0 = ablate; got {tuple(head_keep.shape)}")
    return head_keep


def run_stack(blocks: Sequence[nn.Module], ids: torch.Tensor, head_keep: torch.Tensor | None,
              edit: HeadEdit | None, embed: Callable[[], torch.Tensor], max_len: int,
              keys: torch.Tensor | None = None, patterns: bool = True,
              ) -> tuple[torch.Tensor, HeadEdit | None, torch.Tensor | None]:
    """The forward loop every in-repo stack shares (the tiny model, the BERT encoder): its blocks, in order, with
    the edit's named points called between them (models/points.py). A block is called as
    block(x (B, T, D), edit, layer, keys) -> (x (B, T, D), weights (B, H, T, T)).

    ids (B, T); head_keep (L, H) or (B, L, H), a shorthand for `edit=HeadEdit.keeping(head_keep)`; embed() makes
    the first block's input, called only when the edit does not resume after unedited layers; keys (B, T) bool or
    None: the real positions of right-padded rows. Returns (the last block's output (B, T, D), the edit in use,
    every layer's weights (B, L, H, T, T) when `patterns` asks and no layer was skipped, else None)."""
    n_layers, n_heads = len(blocks), blocks[0].attn.n_heads
    head_keep = check_stack_inputs(ids, head_keep, n_layers, n_heads, max_len)  # (B, L, H) or None
    if head_keep is not None:
        if edit is not None:
            raise ValueError("pass either head_keep or an edit (whose keep mask says which heads are off)")
        edit = HeadEdit.keeping(head_keep)
    start = edit.start if edit is not None else 0
    x = edit.resumed(ids.shape[0]) if start else embed()  # (B, T, D): layers before `start` are as if unedited
    kept = []  # every layer's weights, when `patterns` asks for them
    for layer, block in enumerate(blocks):
        if layer < start:
            continue
        if edit is not None:
            x = edit.grown(layer, x)  # (B', T, D): a growing batch's rows that begin here (HeadEdit.rows)
            edit.entering(layer, x)
        x, weights = block(x, edit, layer, keys)  # (B, T, D), (B, H, T, T)
        if edit is not None:
            edit.block_done(layer, x)
        if patterns:
            kept.append(weights)
    # Skipped layers have no pattern here; callers that skip ask for none.
    return x, edit, torch.stack(kept, dim=1) if patterns and not start else None  # (B, L, H, T, T)


class MultiHeadSelfAttention(nn.Module):
    """Causal multi-head self-attention: one fused qkv projection split into H heads, and an output projection.

    forward(x (B, T, D), head_keep (B, H) or (H,) or None, edit, layer, keys (B, T) bool or None)
        -> (out (B, T, D), weights (B, H, T, T)).
    `edit` (models/points.HeadEdit) is the one mechanism that changes heads: it maps the head outputs
    (B, H, T, dh) to what the output projection sees (switched off, mean, patched) and records what the call asks
    for; `layer` is this layer's index in its stack. `head_keep` (1 = on, 0 = off) is a shorthand that builds such
    an edit for this layer alone: an ablated head's pattern is still computed (and returned) but adds nothing
    downstream. Both are arguments, never state on `self`: one loaded model is shared by every session.
    `keys` marks the real positions of right-padded rows: no query may attend to a key it marks False.
    """

    def __init__(self, d_model: int, n_heads: int, max_len: int, causal: bool = True, length_scaled: bool = False):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}; pick sizes so dh is whole")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.max_len, self.causal = max_len, causal
        # q, k and v for all heads in one matmul; rows ordered [q; k; v] like nn.MultiheadAttention.in_proj_weight.
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        # Not persistent: it is derived from max_len, so it stays out of the saved weights.
        self.register_buffer("tril", torch.ones(max_len, max_len, dtype=torch.bool).tril(), persistent=False)
        if length_scaled and not causal:
            raise ValueError("length_scaled counts the keys a causal query sees; an encoder's queries all see T")
        # (max_len,) or None: derived, so not saved either.
        self.register_buffer("query_scale", length_scale(max_len) if length_scaled else None, persistent=False)

    def forward(
        self, x: torch.Tensor, head_keep: torch.Tensor | None = None, edit=None, layer: int = 0,
        keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, D = x.shape
        H, dh = self.n_heads, self.d_head
        if D != self.d_model:
            raise ValueError(f"input has d_model {D} but this layer was built for {self.d_model}")
        if T > self.max_len:
            raise ValueError(f"sequence of {T} tokens is longer than max_len={self.max_len}; truncate the input")
        if head_keep is not None:
            if edit is not None:
                raise ValueError("pass either head_keep or an edit (whose keep mask says which heads are off)")
            keep = _check_head_keep(head_keep, B, H).view(B, 1, H)  # (B, 1, H): this layer alone
            edit, layer = HeadEdit.keeping(keep), 0

        # 1. Project to queries, keys and values, and split each into H heads of size dh.
        q, k, v = self.qkv(x).split(D, dim=-1)  # 3 x (B, T, D)
        q = q.view(B, T, H, dh).transpose(1, 2)  # (B, H, T, dh)
        k = k.view(B, T, H, dh).transpose(1, 2)  # (B, H, T, dh)
        v = v.view(B, T, H, dh).transpose(1, 2)  # (B, H, T, dh)

        # 2. Attend, every head on its own: a query sees only itself and earlier positions.
        mask = self.tril[:T, :T] if self.causal else None  # (T, T)
        if keys is not None:  # padded rows: no query sees padding
            real = keys[:, None, None, :]  # (B, 1, 1, K)
            mask = real if mask is None else mask & real  # (B, 1, Q, K)
        qs = None if self.query_scale is None else self.query_scale[:T]  # (T,) or None
        ctx, weights = attention(q, k, v, mask, qs)  # (B, H, T, dh), (B, H, T, T)

        # 3. The intervention passed for this call only (models/points.py): keep, zero or replace each
        # head's output (0 removes that head's contribution, not its pattern), and record what was asked.
        if edit is not None:
            allowed = mask if keys is None else mask[0, 0]  # (Q, K): batch row 0's, the one an edit shows
            # dh ** -0.5 as transformers' BertSelfAttention.scaling; qs the length scale, None without one
            edit.attended(layer, q, k, v, weights, allowed, dh ** -0.5, qs)
            ctx = edit(layer, ctx)  # (B, H, T, dh)

        # 4. Concatenate: the H head outputs are laid side by side, then mixed by the output projection (in the
        # weights' dtype: the head outputs were float32 up to here, see `attention`).
        ctx = ctx.transpose(1, 2).contiguous().view(B, T, D).to(x.dtype)  # (B, T, D)
        out = self.out(ctx)  # (B, T, D)
        return out, weights
