"""A Tracr-compiled transformer in torch: what Tracr's haiku model computes, step by step, on the weights it wrote.

No layer norm (Tracr compiles none), one-hot token and position embeddings added, then per layer an attention
half-layer and a ReLU MLP half-layer, each added to the residual stream; the output is the residual stream read
through the unembedding (argmax for a categorical program). Attention is softmax(Q Kᵀ / sqrt(key_size)) with masked
scores at -1e30 in Tracr's `MultiHeadAttention` (exactly 0 weight here, the same to float precision), so the weights
match `softmax(attn_logits)` of Tracr itself. It runs through the forward loop the in-repo stacks share
(`models.attention.run_stack`), so every intervention of the engine applies to it unchanged.

Shapes: T tokens (BOS first), D residual size, H heads, k key size, M MLP hidden size, O output size.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mha_viz.models.attention import attention, run_stack
from mha_viz.models.compiled.config import CompiledConfig
from mha_viz.models.points import HeadEdit


class CompiledAttention(nn.Module):
    """Tracr's attention half-layer: separate query, key and value projections (D -> H * k, with biases), each head
    of size k = key_size, and a linear map (H * k -> D) combining them. forward as `MultiHeadSelfAttention`'s:
    (x (B, T, D), head_keep, edit, layer, keys) -> (out (B, T, D), weights (B, H, T, T)); the edit is passed per call,
    never kept on the module."""

    def __init__(self, d_model: int, n_heads: int, key_size: int, causal: bool):
        super().__init__()
        self.n_heads, self.d_head, self.causal = n_heads, key_size, causal
        self.query = nn.Linear(d_model, n_heads * key_size)
        self.key = nn.Linear(d_model, n_heads * key_size)
        self.value = nn.Linear(d_model, n_heads * key_size)
        self.out = nn.Linear(n_heads * key_size, d_model)

    def forward(self, x: torch.Tensor, head_keep=None, edit: HeadEdit | None = None, layer: int = 0,
                keys: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        B, T, _ = x.shape
        H, k = self.n_heads, self.d_head
        if head_keep is not None:
            if edit is not None:
                raise ValueError("pass either head_keep or an edit (whose keep mask says which heads are off)")
            edit, layer = HeadEdit.keeping(head_keep.reshape(-1, 1, H)), 0
        # 1. Each head's own projections of the same residual stream.
        q = self.query(x).view(B, T, H, k).transpose(1, 2)  # (B, H, T, k)
        kk = self.key(x).view(B, T, H, k).transpose(1, 2)  # (B, H, T, k)
        v = self.value(x).view(B, T, H, k).transpose(1, 2)  # (B, H, T, k)
        # 2. Attend: softmax(q kᵀ / sqrt(k)), masked keys at exactly 0 (Tracr's -1e30 gives the same weights).
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() if self.causal else None  # (T, T)
        if keys is not None:
            real = keys[:, None, None, :]  # (B, 1, 1, K)
            mask = real if mask is None else mask & real  # (B, 1, Q, K)
        ctx, weights = attention(q, kk, v, mask)  # (B, H, T, k), (B, H, T, T)
        # 3. The per-call edit: keep, zero or replace each head's output, and record what the call asks for.
        if edit is not None:
            allowed = mask[0, 0] if mask is not None and keys is not None else mask  # (Q, K) or None
            edit.attended(layer, q, kk, v, weights, allowed, k ** -0.5, None)
            ctx = edit(layer, ctx)  # (B, H, T, k)
        # 4. The heads side by side, combined by the linear map.
        ctx = ctx.transpose(1, 2).reshape(B, T, H * k).to(x.dtype)  # (B, T, H * k)
        return self.out(ctx), weights


class CompiledBlock(nn.Module):
    """One Tracr layer: attention half-layer, then a ReLU MLP half-layer, each added to the residual stream (no
    layer norm: Tracr compiles none)."""

    def __init__(self, config: CompiledConfig):
        super().__init__()
        d = config.d_model
        self.attn = CompiledAttention(d, config.n_heads, config.key_size, config.causal)
        self.linear_1 = nn.Linear(d, config.mlp_hidden)
        self.linear_2 = nn.Linear(config.mlp_hidden, d)

    def forward(self, x: torch.Tensor, edit, layer: int, keys) -> tuple[torch.Tensor, torch.Tensor]:
        out, weights = self.attn(x, None, edit, layer, keys)  # (B, T, D), (B, H, T, T)
        x = x + out  # (B, T, D)
        x = x + self.linear_2(torch.relu(self.linear_1(x)))  # (B, T, D)
        return x, weights


class CompiledStack(nn.Module):
    """The whole compiled model: one-hot token and position embeddings, Tracr's layers through the shared forward
    loop (`run_stack`), and the unembedding to the program's output values."""

    def __init__(self, config: CompiledConfig):
        super().__init__()
        self.config = config
        self.tok = nn.Embedding(len(config.encoding), config.d_model)
        self.pos = nn.Embedding(config.max_seq_len + 1, config.d_model)
        self.blocks = nn.ModuleList(CompiledBlock(config) for _ in range(config.n_layers))
        self.register_buffer("unembed", torch.zeros(config.d_model, max(1, len(config.decoding))))  # (D, O)

    def forward(self, ids: torch.Tensor, edit: HeadEdit | None = None, patterns: bool = True,
                keys: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """ids (B, T) -> (residual at the end (B, T, D), output scores (B, T, O), weights (B, L, H, T, T) or None);
        keys (B, T) bool marks the real positions of right-padded rows."""
        def embed() -> torch.Tensor:
            return self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))[None]  # (B, T, D)

        x, _, att = run_stack(self.blocks, ids, None, edit, embed, self.config.max_seq_len + 1, keys=keys,
                              patterns=patterns)
        return x, x @ self.unembed, att  # (B, T, D), (B, T, O), (B, L, H, T, T)


def build(config: CompiledConfig, tensors: dict[str, torch.Tensor]) -> CompiledStack:
    """The stack with Tracr's weights (Tracr's w is (in, out); nn.Linear keeps (out, in))."""
    stack = CompiledStack(config)
    with torch.no_grad():
        stack.tok.weight.copy_(tensors["token_embed"])
        stack.pos.weight.copy_(tensors["pos_embed"])
        stack.unembed.copy_(tensors["unembed"])
        for layer, block in enumerate(stack.blocks):
            parts = {"attn.query": block.attn.query, "attn.key": block.attn.key, "attn.value": block.attn.value,
                     "attn.linear": block.attn.out, "mlp.linear_1": block.linear_1, "mlp.linear_2": block.linear_2}
            for name, linear in parts.items():
                w = tensors.get(f"layers.{layer}.{name}.w")
                b = tensors.get(f"layers.{layer}.{name}.b")
                linear.weight.copy_(w.T if w is not None else torch.zeros_like(linear.weight))
                linear.bias.copy_(b if b is not None else torch.zeros_like(linear.bias))
    return stack.eval()


@dataclass(frozen=True)
class CompiledForward:
    attentions: torch.Tensor  # (L, H, T, T) weights
    residual: torch.Tensor  # (T, D) the residual stream at the end
    output: torch.Tensor  # (T, O) the unembedded output (scores per output value, or (T, 1) numbers)


def forward(config: CompiledConfig, tensors: dict[str, torch.Tensor], ids: torch.Tensor) -> CompiledForward:
    """One text's ids (T,) (BOS first) through the stack built from `tensors`, all heads on."""
    with torch.no_grad():
        x, out, att = build(config, tensors)(ids[None])
    return CompiledForward(att[0], x[0], out[0])


def decode(config: CompiledConfig, output: torch.Tensor) -> list:
    """The program's output per position from the unembedded output (T, O); position 0 (BOS) reads as BOS, as Tracr's
    `apply` gives it, and a position where the program has no value reads None."""
    if config.categorical:
        # One-hot where the program has a value; all (near) zero where it has none (a shift before the text
        # starts): None there, where Tracr's own argmax would name the first output value.
        best, index = output.max(-1)  # (T,), (T,)
        values = [config.decoding[int(i)] if float(b) > 0.5 else None for b, i in zip(best, index)]
    else:
        values = [float(v) for v in output[:, 0].tolist()]
    return [config.bos] + values[1:]
