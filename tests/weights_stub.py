"""Test-only: the contract's `head_weights` / `embeddings` capabilities for the tiny model, built from `model.lm`
as the spec for `HeadWeights` and `Embeddings` says, until the adapters provide them. `with_weights(model)` returns
a shallow copy that answers both; the shared model is not touched."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from mha_viz.models.heads import out_proj_per_head


@dataclass(frozen=True)
class HeadWeights:
    layer: int
    w_q: torch.Tensor  # (H, D, dh)
    w_k: torch.Tensor
    w_v: torch.Tensor
    w_o: torch.Tensor  # (H, dh, D)
    b_q: torch.Tensor | None
    b_k: torch.Tensor | None
    b_v: torch.Tensor | None
    b_o: torch.Tensor | None
    kv_head: tuple[int, ...]
    rotary: bool


@dataclass(frozen=True)
class Embeddings:
    tokens: torch.Tensor
    positions: torch.Tensor | None
    unembed: torch.Tensor | None
    vocab: list[str]


def tiny_head_weights(model, layer: int) -> HeadWeights:
    lm = model.lm
    H, D = model.n_heads, model.config.d_model
    dh = D // H
    attn = lm.blocks[layer].attn
    w = attn.qkv.weight.detach().float()  # (3D, D): q = x @ w[:D].T
    b = attn.qkv.bias.detach().float() if attn.qkv.bias is not None else None  # (3D,)
    per_head = [w[i * D:(i + 1) * D].T.reshape(D, H, dh).permute(1, 0, 2).contiguous() for i in range(3)]  # (H, D, dh)
    biases = [None if b is None else b[i * D:(i + 1) * D].reshape(H, dh) for i in range(3)]  # (H, dh)
    return HeadWeights(layer=layer, w_q=per_head[0], w_k=per_head[1], w_v=per_head[2],
                       w_o=out_proj_per_head(attn.out.weight.detach(), H), b_q=biases[0], b_k=biases[1], b_v=biases[2],
                       b_o=None if attn.out.bias is None else attn.out.bias.detach().float(),
                       kv_head=tuple(range(H)), rotary=False)


def tiny_embeddings(model) -> Embeddings:
    lm = model.lm
    return Embeddings(tokens=lm.tok.weight.detach().float(), positions=lm.pos.weight.detach().float(),
                      unembed=lm.head.weight.detach().float(), vocab=[model.decode(i) for i in range(len(model.vocab))])


def with_weights(model):
    """The real capabilities when the adapter has them; otherwise a copy of the tiny model answering them."""
    if "head_weights" in type(model).__dict__ or not hasattr(model, "lm"):
        return model
    twin = copy.copy(model)
    twin.__dict__.pop("_circuits", None)
    twin.head_weights = lambda layer: tiny_head_weights(model, layer)
    twin.embeddings = lambda: tiny_embeddings(model)
    return twin
