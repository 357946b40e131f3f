"""A Tracr-compiled transformer in torch: what Tracr's haiku model computes, step by step, on the weights it wrote.

No layer norm (Tracr compiles none), one-hot token and position embeddings added, then per layer an attention
half-layer and a ReLU MLP half-layer, each added to the residual stream; the output is the residual stream read
through the unembedding (argmax for a categorical program). Attention is softmax(Q Kᵀ / sqrt(key_size)) with masked
scores at -1e30, as Tracr's `MultiHeadAttention`, so the weights match `softmax(attn_logits)` of Tracr itself.

Shapes: T tokens (BOS first), D residual size, H heads, k key size, M MLP hidden size, O output size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from mha_viz.models.compiled.config import CompiledConfig

MASKED = -1e30  # Tracr's score for a key a query may not see


@dataclass(frozen=True)
class CompiledForward:
    attentions: torch.Tensor  # (L, H, T, T) weights
    logits: torch.Tensor  # (L, H, T, T) scores before softmax, masked keys at -1e30 (Tracr's attn_logits)
    head_outputs: torch.Tensor  # (L, T, H, k) each head's weighted values, before the output projection
    residual: torch.Tensor  # (T, D) the residual stream at the end
    output: torch.Tensor  # (T, O) the unembedded output (scores per output value, or (T, 1) numbers)


def attention_half(x: torch.Tensor, w: dict[str, torch.Tensor], n_heads: int, key_size: int, causal: bool,
                   edit=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One attention half-layer on the residual x (T, D) -> (its output (T, D), weights (H, T, T), scores (H, T, T),
    head outputs (T, H, k)). `edit(z)` may replace the head outputs before the output projection (switching a head
    off, patching)."""
    t = x.shape[0]
    q = (x @ w["query.w"] + w["query.b"]).view(t, n_heads, key_size)  # (T, H, k)
    k = (x @ w["key.w"] + w["key.b"]).view(t, n_heads, key_size)  # (T, H, k)
    v = (x @ w["value.w"] + w["value.b"]).view(t, n_heads, key_size)  # (T, H, k)
    scores = torch.einsum("thd,Thd->htT", q, k) / math.sqrt(key_size)  # (H, T, T)
    if causal:
        allowed = torch.ones(t, t, dtype=torch.bool).tril()  # (T, T)
        scores = scores.masked_fill(~allowed, MASKED)  # (H, T, T)
    weights = scores.softmax(-1)  # (H, T, T)
    z = torch.einsum("htT,Thd->thd", weights, v)  # (T, H, k)
    if edit is not None:
        z = edit(z)  # (T, H, k)
    out = z.reshape(t, n_heads * key_size) @ w["linear.w"] + w["linear.b"]  # (T, D): the heads side by side
    return out, weights, scores, z


def mlp_half(x: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    """(T, D) -> (T, D): Tracr's MLP, Linear -> ReLU -> Linear."""
    return torch.relu(x @ w["linear_1.w"] + w["linear_1.b"]) @ w["linear_2.w"] + w["linear_2.b"]  # (T, D)


def layer_weights(tensors: dict[str, torch.Tensor], layer: int, half: str) -> dict[str, torch.Tensor]:
    prefix = f"layers.{layer}.{half}."
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def forward(config: CompiledConfig, tensors: dict[str, torch.Tensor], ids: torch.Tensor,
            edit=None) -> CompiledForward:
    """Run the compiled model on token ids (T,) (BOS first). edit(layer, z) -> z may change the head outputs
    (T, H, k) of a layer before its output projection."""
    t = ids.shape[0]
    x = tensors["token_embed"][ids] + tensors["pos_embed"][:t]  # (T, D)
    atts, logits, zs = [], [], []
    for layer in range(config.n_layers):
        attn = layer_weights(tensors, layer, "attn")
        layer_edit = None if edit is None else (lambda z, _l=layer: edit(_l, z))
        out, weights, scores, z = attention_half(x, attn, config.n_heads, config.key_size, config.causal, layer_edit)
        x = x + out  # (T, D)
        x = x + mlp_half(x, layer_weights(tensors, layer, "mlp"))  # (T, D)
        atts.append(weights)
        logits.append(scores)
        zs.append(z)
    output = x @ tensors["unembed"]  # (T, O)
    return CompiledForward(torch.stack(atts), torch.stack(logits), torch.stack(zs), x, output)


def decode(config: CompiledConfig, output: torch.Tensor) -> list:
    """The program's output per position from the unembedded output (T, O); position 0 (BOS) reads as BOS, as Tracr's
    `apply` gives it."""
    if config.categorical:
        values = [config.decoding[int(i)] for i in output.argmax(-1).tolist()]  # argmax over output values
    else:
        values = [float(v) for v in output[:, 0].tolist()]
    return [config.bos] + values[1:]
