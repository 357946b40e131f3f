"""Where a transformers attention module keeps its query, key, value and output weights, read from the module's own
attributes and config (how many heads, key/value heads and shards its forward splits into), never guessed from
shapes alone: separate projections under any of their names, and the fused ones of GPT-2, GPT-NeoX, Phi-3,
CodeGen, GPTBigCode and ModernBERT, each split the way its forward splits it.

Weights come back in nn.Linear layout, float32 on the CPU: w_q (H * dh, D), w_k and w_v (H_kv * dh, D), biases
(H * dh,) / (H_kv * dh,) or None, head h at rows h * dh .. (h + 1) * dh."""
from __future__ import annotations

from dataclasses import dataclass

import torch

# (query, key, value) names of separate projections: Llama-style, BERT-style, DistilBERT, MPNet, DeBERTa-v2.
SEPARATE = (("q_proj", "k_proj", "v_proj"), ("query", "key", "value"), ("q_lin", "k_lin", "v_lin"), ("q", "k", "v"),
            ("query_proj", "key_proj", "value_proj"))
# The output projection's names on the attention module itself (BERT's sibling output.dense is found by the adapter).
OUTPUT = ("o_proj", "out_proj", "c_proj", "dense", "out_lin", "Wo", "o")
# (query, key) names of a norm applied to the projected queries and keys (qk-norm): Qwen3, OLMo 2, Gemma 3, Cohere
# (q_norm, k_norm, when use_qk_norm); Phi, StableLM, Persimmon (q_layernorm, k_layernorm, when qk_layernorm); Hunyuan.
QK_NORMS = (("q_norm", "k_norm"), ("q_layernorm", "k_layernorm"), ("query_layernorm", "key_layernorm"))


@dataclass(frozen=True)
class QKV:
    """One attention module's projections in nn.Linear layout (see the module docstring)."""
    w_q: torch.Tensor  # (H * dh, D)
    w_k: torch.Tensor  # (H_kv * dh, D)
    w_v: torch.Tensor  # (H_kv * dh, D)
    b_q: torch.Tensor | None  # (H * dh,)
    b_k: torch.Tensor | None  # (H_kv * dh,)
    b_v: torch.Tensor | None  # (H_kv * dh,)


def is_linear(layer) -> bool:
    # GPT-2's Conv1D is a linear layer with its weight stored transposed (in, out).
    return isinstance(layer, torch.nn.Linear) or type(layer).__name__ == "Conv1D"


def linear_weight(layer: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight (out, in) as nn.Linear stores it, bias (out,) or None), float32 on the CPU."""
    weight = layer.weight.detach().float().cpu()
    if not isinstance(layer, torch.nn.Linear):  # Conv1D: (in, out)
        weight = weight.T  # (out, in)
    bias = None if getattr(layer, "bias", None) is None else layer.bias.detach().float().cpu()  # (out,)
    return weight, bias


def output_layer(attention: torch.nn.Module) -> torch.nn.Module | None:
    """The linear layer on the attention module that combines its heads, or None."""
    for name in OUTPUT:
        layer = getattr(attention, name, None)
        if is_linear(layer):
            return layer
    return None


def _sizes(module: torch.nn.Module, n_heads: int) -> tuple[int, int]:
    """(dh, H_kv) of this module, from its own attributes or config."""
    config = getattr(module, "config", None)
    dh = getattr(module, "head_dim", None) or getattr(module, "head_size", None) or getattr(config, "head_dim", None)
    if not dh:
        width = getattr(config, "hidden_size", None) or getattr(module, "embed_dim", None)
        dh = width // n_heads
    kv = getattr(module, "num_key_value_heads", None) or getattr(module, "kv_heads", None) \
        or getattr(config, "num_key_value_heads", None) or n_heads
    return int(dh), int(kv)


def _rows(w: torch.Tensor, b: torch.Tensor | None, index: torch.Tensor):
    return w[index], None if b is None else b[index]


def split(module: torch.nn.Module, n_heads: int) -> QKV | None:
    """This attention module's projections, or None where they are not found under any known layout."""
    for trio in SEPARATE:
        parts = [getattr(module, n, None) for n in trio]
        if all(is_linear(p) for p in parts):
            (w_q, b_q), (w_k, b_k), (w_v, b_v) = (linear_weight(p) for p in parts)
            return QKV(w_q, w_k, w_v, b_q, b_k, b_v)
    if getattr(module, "is_cross_attention", False):
        return None
    dh, kv = _sizes(module, n_heads)
    for name in ("c_attn", "query_key_value", "qkv_proj", "Wqkv"):
        fused = getattr(module, name, None)
        if is_linear(fused):
            weight, bias = linear_weight(fused)  # (H * dh + 2 * H_kv * dh, D), (same,) or None
            index = _fused_rows(module, name, n_heads, kv, dh)
            if index is None or sum(len(i) for i in index) != weight.shape[0]:
                return None
            (w_q, b_q), (w_k, b_k), (w_v, b_v) = (_rows(weight, bias, i) for i in index)
            return QKV(w_q, w_k, w_v, b_q, b_k, b_v)
    return None


def left_out(module: torch.nn.Module) -> tuple[str, ...]:
    """What this attention module's forward does to its projected queries, keys or values that weights per head
    (`split`) cannot carry, one phrase each for the Circuits page; () where the weights are the whole linear map.
    Read from the module's own attributes and config, as its forward reads them:
      qk-norm   a norm module on the queries and keys (`QK_NORMS`; present only where the config turns it on)
      clip_qkv  OLMo (config.clip_qkv), MPT and DBRX (the module's clip_qkv, from attn_config) clamp the
                projections' outputs to [-clip, clip]
      relative  DeBERTa-v2 (relative_attention, with c2p or p2c in pos_att_type) adds scores of each query and
                key against learned relative-position vectors; MPNet adds a learned bias per head and distance"""
    notes = []
    if getattr(module, "relative_attention", False) and {"c2p", "p2c"} & set(getattr(module, "pos_att_type", ())):
        notes.append("relative positions: DeBERTa adds to q·k scores of each query against the relative-position key "
                     "of its distance to the key (c2p) and of each key against the relative-position query (p2c), "
                     "which the QK map (token against token) leaves out")
    if type(module).__name__ == "MPNetSelfAttention":
        notes.append("relative positions: MPNet adds a learned bias per head and bucket of distance to the scores, "
                     "which the QK map (token against token) leaves out")
    if any(isinstance(getattr(module, name, None), torch.nn.Module) for pair in QK_NORMS for name in pair):
        notes.append("qk-norm: a norm on each query and key after the projection, which the QK map leaves out (it "
                     "rescales every query and key, token by token)")
    clip = getattr(module, "clip_qkv", None) or getattr(getattr(module, "config", None), "clip_qkv", None)
    if isinstance(clip, (int, float)) and not isinstance(clip, bool) and clip > 0:
        notes.append(f"clip_qkv: queries, keys and values are clamped to ±{clip:g} after the projection, which the "
                     "QK and OV maps cannot carry, so where an activation passes the clip the maps differ from what "
                     "the model computes")
    return tuple(notes)


def _fused_rows(module, name: str, H: int, kv: int, dh: int) -> tuple[torch.Tensor, ...] | None:
    """The rows of a fused projection's output that are the queries, the keys and the values, in head order, as
    this module's forward reads them."""
    if name == "query_key_value" and getattr(module, "new_decoder_architecture", False):
        # Falcon's new architecture: viewed (H_kv, H / H_kv + 2, dh), each group's queries, then its key and value
        groups = int(module.num_kv_heads)
        rows = torch.arange((H + 2 * groups) * dh).view(groups, H // groups + 2, dh)
        return rows[:, :-2].reshape(-1), rows[:, -2].reshape(-1), rows[:, -1].reshape(-1)
    if name == "query_key_value" and getattr(module, "multi_query", False):  # Falcon multi-query: (H + 2, dh)
        rows = torch.arange((H + 2) * dh).view(H + 2, dh)
        return rows[:H].reshape(-1), rows[H], rows[H + 1]
    if name == "query_key_value":  # GPT-NeoX, Bloom, Falcon: viewed (H, 3 * dh), each head's [q | k | v]
        rows = torch.arange(3 * H * dh).view(H, 3, dh)  # (H, 3, dh)
        return tuple(rows[:, i].reshape(-1) for i in range(3))
    if name == "qkv_proj" and hasattr(module, "mp_num"):  # CodeGen: mp_num shards, each [q | v | k] side by side
        shards = int(module.mp_num)
        local = H * dh // shards
        rows = torch.arange(3 * H * dh).view(shards, 3, local)  # (shards, 3, local)
        q, v, k = (rows[:, i].reshape(-1) for i in range(3))
        return q, k, v
    if name == "c_attn" and not getattr(module, "multi_query", True) and hasattr(module, "kv_dim"):
        # GPTBigCode with multi_query off: viewed (H, 3 * dh) like GPT-NeoX
        rows = torch.arange(3 * H * dh).view(H, 3, dh)
        return tuple(rows[:, i].reshape(-1) for i in range(3))
    # [all queries | all keys | all values]: GPT-2 (kv = H), GPTBigCode multi-query (kv = 1), Phi-3, ModernBERT.
    if name == "c_attn" and getattr(module, "multi_query", False):
        kv = int(getattr(module, "kv_heads", 1))
    q, k = H * dh, kv * dh
    return torch.arange(q), torch.arange(q, q + k), torch.arange(q + k, q + 2 * k)
