"""Interventions for transformers models, as a registered attention function.

transformers 5.x dropped `head_mask` (it is silently ignored), so we register our own attention function,
"mha_viz". It calls the model's own eager attention (so the numbers are exactly transformers'), reports what it
computed with to the HeadEdit of this call, and hands each head's context, before the output projection, to that
edit (models/points.py: keep, zero or replace it, record it). The edit travels in one ContextVar that a
forward sets for its duration: every thread (every Streamlit session) has its own context, so nothing
per-session is ever stored on the shared model. The final norm's hook writes into the same call's edit.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import sys
import types
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from mha_viz.contract import ModelLoadError
from mha_viz.models.points import HeadEdit

ATTN_IMPL = "mha_viz"


class LayerIndex:
    """Which layer each attention call is. `LayerIndex()` discovers them: the first forward through it lists the
    attention modules in call order, which is their layer order; `LayerIndex(modules)` only looks them up, by
    identity, or by call order where one module serves several layers (ALBERT shares one across all of them)."""

    def __init__(self, modules: list[torch.nn.Module] | None = None):
        self.discovering = modules is None
        self.modules: list[torch.nn.Module] = list(modules or [])  # per layer; a shared module more than once
        self._of = {id(m): i for i, m in enumerate(self.modules)}
        self.shared = len(self._of) < len(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def of(self, module: torch.nn.Module, call: int) -> int:
        """The layer of `module`, the forward's `call`-th attention call (from 0)."""
        if self.discovering:
            self.modules.append(module)
            return call
        if self.shared:  # every layer runs, in order: a shared model's blocks are not skipped (no block list)
            if not 0 <= call < len(self.modules) or self.modules[call] is not module:
                raise ModelLoadError(f"an attention module ({type(module).__name__}) ran out of the order seen when "
                                     "the model loaded; reload the model")
            return call
        index = self._of.get(id(module))
        if index is None:
            raise ModelLoadError(f"an attention module ({type(module).__name__}) ran that was not seen when the "
                                 "model loaded; reload the model")
        return index


@dataclass
class _Call:
    """The forward running in this context: its layer index, its HeadEdit, and how many attention calls it has
    made so far. It lives for one call and is never stored on the shared model."""
    layers: LayerIndex
    edit: HeadEdit
    calls: int = 0


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("mha_viz_call", default=None)


@contextlib.contextmanager
def editing(layers: LayerIndex, edit: HeadEdit) -> Iterator[None]:
    """Apply `edit` to every attention layer of the forward run in this context."""
    token = _CALL.set(_Call(layers, edit))
    try:
        yield
    finally:
        _CALL.reset(token)


def _eager_for(module: torch.nn.Module) -> Callable:
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        raise ModelLoadError(
            f"{type(module).__name__} has no eager attention in transformers, so its attention weights cannot be "
            "read or ablated. Pick a model whose attention supports attn_implementation='eager'."
        )
    return fn


def _masked_eager_attention(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention; what it computed with reported to this call's HeadEdit, and each head's
    output then kept, zeroed or replaced by it. query (B, H, Q, dh) and key (B, H_kv, K, dh) arrive as they enter
    the dot product (rotary already applied by the model); `scaling` is what eager multiplies by. Weights kept in
    bfloat16 or float16 (MHA_VIZ_DTYPE) attend in float32: the weights and head outputs shown stay float32."""
    dtype = query.dtype
    if dtype != torch.float32:  # MHA_VIZ_DTYPE: the attention core in float32, then back to the weights' dtype
        query, key, value = query.float(), key.float(), value.float()  # (B, H, Q, dh), (B, H_kv, K, dh) twice
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.float()  # (B, 1, Q, K): 0 or the dtype's minimum, both exact in float32
    out, weights = _eager_for(module)(module, query, key, value, attention_mask, **kwargs)  # (B,T,H,dh) (B,H,Q,K)
    scale = kwargs.get("scaling", getattr(module, "scaling", None))
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    out = _edited(module, query, key, value, out.transpose(1, 2), weights,
                  lambda: allowed(attention_mask, key.shape[-2]), scale)  # (B, H, T, dh)
    return out.transpose(1, 2).to(dtype), weights  # (B, T, H, dh)


def _edited(module, query, key, value, out: torch.Tensor, weights: torch.Tensor, where: Callable, scale: float,
            score_bias: torch.Tensor | None = None):
    """Report what `module` computed with to this call's HeadEdit and return its heads' outputs out (B, H, T, dh)
    kept, zeroed or replaced by the edit; `where` gives the (Q, K) bool mask it attended under, `score_bias`
    (B or 1, H, Q or 1, K) what it added to the scaled scores (ALiBi), or None."""
    call = _CALL.get()
    if call is None:
        return out
    layers, edit = call.layers, call.edit
    layer = layers.of(module, call.calls)
    call.calls += 1
    if edit.wants(layer):
        edit.attended(layer, query, key, value, weights, where, scale, score_bias=score_bias)
    return edit(layer, out)  # (B, H, T, dh)


# Attention written inside a model's own module, outside transformers' attention interface, whose weights come
# from one method we can wrap: the module type -> where its queries may look, (Q, K) bool, from the method's
# arguments, and the factor its scores are multiplied by.
def _gpt_neo_where(module, query, key, attention_mask) -> torch.Tensor:
    q, k = query.shape[-2], key.shape[-2]
    window = module.bias[0, 0, k - q:k, :k].cpu()  # (Q, K): causal, and for a local layer its window
    mask = allowed(attention_mask, k)
    return window if mask is None else window & mask


def _in_float32(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """MHA_VIZ_DTYPE for a forward mha-viz replaces (Bloom, MPT, Falcon): its q, k, v, ALiBi bias and additive mask
    in float32, so it attends in float32 as `_masked_eager_attention` does (the mask's 0 and its dtype's minimum
    are exact in float32); a boolean mask, or None, passes as it is. The key/value cache keeps the model's dtype:
    upcast after it is updated. Bloom and Falcon build ALiBi in the weights' dtype, so its bias stays rounded as
    the model rounds it (exact while slope * position fits bfloat16: power-of-two slopes, positions under 256)."""
    return tuple(t.float() if t is not None and t.is_floating_point() else t for t in tensors)


def _bloom_forward(module, hidden_states, residual, alibi, attention_mask, layer_past=None, use_cache=False,
                   output_attentions=False, **kwargs):
    """BloomAttention's forward (transformers 5.x) with its heads' outputs routed through this call's HeadEdit.
    Its scores are q . k / sqrt(dh) plus ALiBi's per-head linear position bias (beta * alibi), reported to the
    edit beside q and k so inside() shows it as its own term. Weights in bfloat16 or float16 (MHA_VIZ_DTYPE)
    attend in float32; the heads' outputs go on in the weights' dtype."""
    from transformers.models.bloom.modeling_bloom import dropout_add

    dtype = hidden_states.dtype
    B, Q, _ = hidden_states.shape
    H, dh = module.num_heads, module.head_dim
    query, key, value = module._reshape(module.query_key_value(hidden_states))  # (B, H, T, dh) each
    if layer_past is not None:
        key, value = layer_past.update(key, value, module.layer_idx)
    query, key, value, alibi, attention_mask = _in_float32(query, key, value, alibi, attention_mask)  # alibi (B*H,1,K)
    scores = alibi.baddbmm(batch1=query.reshape(B * H, -1, dh), batch2=key.reshape(B * H, -1, dh).transpose(-1, -2),
                           beta=module.beta, alpha=module.inv_norm_factor).view(B, H, Q, -1)  # (B, H, Q, K)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = module.attention_dropout(F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype))  # (B,H,Q,K)
    out = weights @ value  # (B, H, Q, dh)
    out = _edited(module, query, key, value, out, weights, lambda: allowed(attention_mask, key.shape[-2]),
                  module.inv_norm_factor, score_bias=(module.beta * alibi).view(B, H, 1, -1))  # (B, H, 1, K)
    context = out.transpose(1, 2).reshape(B, Q, H * dh).to(dtype)  # (B, Q, H * dh): the heads side by side
    output = dropout_add(module.dense(context), residual, module.hidden_dropout, module.training)  # (B, Q, D)
    return output, weights


def _mpt_forward(module, hidden_states, position_bias, cache=None, attention_mask=None, **kwargs):
    """MptAttention's forward (transformers 5.x) with its heads' outputs routed through this call's HeadEdit. Its
    scores are q . k times softmax_scale plus ALiBi's per-head position bias (reported to the edit, so inside()
    shows it as its own term); its mask is boolean, True where a query may not look. Weights in bfloat16 or
    float16 (MHA_VIZ_DTYPE) attend in float32; the heads' outputs go on in the weights' dtype."""
    dtype = hidden_states.dtype
    B, T = hidden_states.shape[:2]
    H, dh = module.n_heads, module.head_dim
    mixed = module.Wqkv(hidden_states)  # (B, T, 3 * H * dh)
    if module.clip_qkv:
        mixed = mixed.clamp(min=-module.clip_qkv, max=module.clip_qkv)
    query, key, value = (x.reshape(B, T, H, dh).transpose(1, 2) for x in mixed.chunk(3, dim=2))  # (B, H, T, dh)
    if cache is not None:
        key, value = cache.update(key, value, module.layer_idx, kwargs=kwargs)
    query, key, value, position_bias = _in_float32(query, key, value, position_bias)  # position_bias (H, T', K')
    scores = torch.matmul(query, key.transpose(-1, -2)) * module.softmax_scale  # (B, H, Q, K)
    n_queries = T if cache is None else T + cache.get_seq_length()
    bias = None
    if position_bias is not None:
        bias = position_bias[:, max(0, position_bias.size(1) - n_queries):, max(0, position_bias.size(2) -
                                                                                  key.shape[-2]):]  # (H, Q', K)
        scores = scores + bias
    if attention_mask is not None:
        scores = scores.masked_fill(attention_mask, torch.finfo(query.dtype).min)
    weights = F.softmax(scores.float(), dim=-1).to(value.dtype)  # (B, H, Q, K)
    weights = F.dropout(weights, p=module.attn_dropout_p, training=module.training)
    out = torch.matmul(weights, value)  # (B, H, Q, dh)
    where = (lambda: None) if attention_mask is None else (lambda: ~allowed(attention_mask, key.shape[-2]))
    out = _edited(module, query, key, value, out, weights, where, module.softmax_scale,
                  score_bias=None if bias is None else bias[None])  # (1, H, Q' or 1, K)
    context = out.permute(0, 2, 1, 3).contiguous().view(B, T, -1).to(dtype)  # (B, T, H * dh): heads side by side
    return module.out_proj(context), weights


def _falcon_forward(module, hidden_states, alibi, attention_mask, position_ids=None, layer_past=None,
                    use_cache=False, output_attentions=False, position_embeddings=None, **kwargs):
    """FalconAttention's eager forward (transformers 5.x) with its heads' outputs routed through this call's
    HeadEdit: rotary q . k / sqrt(dh), or with ALiBi (q . k + bias) / sqrt(dh), the bias (times the scale)
    reported to the edit so inside() shows it as its own term. Weights in bfloat16 or float16 (MHA_VIZ_DTYPE)
    attend in float32; the heads' outputs go on in the weights' dtype."""
    from transformers.models.falcon.modeling_falcon import apply_rotary_pos_emb

    dtype = hidden_states.dtype
    H, dh = module.num_heads, module.head_dim
    n_kv = H if module.new_decoder_architecture else module.num_kv_heads
    query, key, value = module._split_heads(module.query_key_value(hidden_states))  # (B, T, heads, dh) each
    B, Q = query.shape[:2]
    query = query.transpose(1, 2).reshape(B, H, Q, dh)  # (B, H, Q, dh)
    key = key.transpose(1, 2).reshape(B, n_kv, Q, dh)  # (B, H_kv, Q, dh)
    value = value.transpose(1, 2).reshape(B, n_kv, Q, dh)  # (B, H_kv, Q, dh)
    if alibi is None:
        cos, sin = position_embeddings
        query, key = apply_rotary_pos_emb(query, key, cos, sin)
    if layer_past is not None:
        key, value = layer_past.update(key, value, module.layer_idx)
    query, key, value, alibi, attention_mask = _in_float32(query, key, value, alibi, attention_mask)
    K = key.shape[-2]
    scores = query @ key.transpose(-1, -2)  # (B, H, Q, K)
    if alibi is not None:
        scores = scores + alibi.view(B, H, 1, -1)
    scale = module.inv_norm_factor
    weights = F.softmax(scores * scale + attention_mask, dim=-1, dtype=query.dtype)  # (B, H, Q, K)
    if alibi is not None:
        weights = module.attention_dropout(weights)
    out = weights @ value  # (B, H, Q, dh)
    bias = None
    if alibi is not None:  # what the scaled scores add: ALiBi times the scale, and the mask's finite part, into
        # which FalconModel folds ALiBi once more (transformers 5.x): the model's own scores carry both
        finite = attention_mask.masked_fill(attention_mask <= torch.finfo(attention_mask.dtype).min / 2, 0.0)
        bias = alibi.view(B, H, 1, -1) * scale + finite  # (B, H, Q, K)
    out = _edited(module, query, key, value, out, weights, lambda: allowed(attention_mask, K), scale,
                  score_bias=bias)
    context = out.permute(0, 2, 1, 3).reshape(B, Q, H * dh).to(dtype)  # (B, Q, H * dh): the heads side by side
    return module.dense(context), weights


def _deberta_v2_forward(module, hidden_states, attention_mask, output_attentions=False, query_states=None,
                        relative_pos=None, rel_embeddings=None):
    """DeBERTa-v2's DisentangledSelfAttention forward (transformers 5.x) with its heads' outputs routed through this
    call's HeadEdit. Its scores are q . k / sqrt(dh * f) plus the disentangled relative-position terms (He et al.
    2021): content-to-position, each query against the relative-position key of its distance to the key, and
    position-to-content, each key against the relative-position query of that distance, each over the same
    sqrt(dh * f), f = 1 + the number of those terms. The module's own method computes them; they are reported to the
    edit as what the scaled scores add, so inside() shows them as their own term. Its mask (B, 1, Q, K) is 1 where a
    query may look. Weights in bfloat16 or float16 (MHA_VIZ_DTYPE) attend in float32 (the relative terms are
    computed in the weights' dtype, as the model computes them); the heads' outputs go on in the weights' dtype."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import scaled_size_sqrt

    dtype = hidden_states.dtype
    H = module.num_attention_heads
    if query_states is None:
        query_states = hidden_states
    query = module.transpose_for_scores(module.query_proj(query_states), H)  # (B * H, Q, dh)
    key = module.transpose_for_scores(module.key_proj(hidden_states), H)  # (B * H, K, dh)
    value = module.transpose_for_scores(module.value_proj(hidden_states), H)  # (B * H, K, dh)
    factor = 1 + ("c2p" in module.pos_att_type) + ("p2c" in module.pos_att_type)
    root = scaled_size_sqrt(query, factor)  # sqrt(dh * f), a 0-d tensor
    relative = None
    if module.relative_attention:
        relative = module.disentangled_attention_bias(query, key, relative_pos, module.pos_dropout(rel_embeddings),
                                                      factor)  # (B * H, Q, K), or 0 with no relative term
        relative = relative if torch.is_tensor(relative) else None
    query, key, value, relative = _in_float32(query, key, value, relative)
    Q, K = query.shape[-2], key.shape[-2]
    scores = torch.bmm(query, key.transpose(-1, -2) / root.to(dtype=query.dtype))  # (B * H, Q, K)
    if relative is not None:
        scores = scores + relative
    scores = scores.view(-1, H, Q, K)  # (B, H, Q, K)
    mask = attention_mask.bool()  # (B, 1, Q, K)
    scores = scores.masked_fill(~mask, torch.finfo(query.dtype).min)
    weights = module.dropout(F.softmax(scores, dim=-1))  # (B, H, Q, K)
    out = torch.bmm(weights.view(-1, Q, K), value).view(-1, H, Q, value.shape[-1])  # (B, H, Q, dh)
    out = _edited(module, query.view(-1, H, Q, query.shape[-1]), key.view(-1, H, K, key.shape[-1]),
                  value.view(-1, H, K, value.shape[-1]), out, weights, lambda: allowed(mask, K), float(1 / root),
                  score_bias=None if relative is None else relative.view(-1, H, Q, K))  # (B, H, Q, dh)
    context = out.permute(0, 2, 1, 3).reshape(out.shape[0], Q, -1).to(dtype)  # (B, Q, H * dh): heads side by side
    return context, weights if output_attentions else None


def _mpnet_forward(module, hidden_states, attention_mask=None, position_bias=None, output_attentions=False,
                   **kwargs):
    """MPNetSelfAttention's forward (transformers 5.x) with its heads' outputs routed through this call's HeadEdit.
    Its scores are q . k / sqrt(dh) plus the encoder's relative-position bias, one learned number per head and
    bucket of distance (T5-style buckets), reported to the edit so inside() shows it as its own term; its output
    projection `o` is inside the module. Weights in bfloat16 or float16 (MHA_VIZ_DTYPE) attend in float32; the
    heads' outputs go on in the weights' dtype."""
    dtype = hidden_states.dtype
    B, T = hidden_states.shape[:2]
    dh = module.attention_head_size
    shape = (B, T, -1, dh)
    query = module.q(hidden_states).view(shape).transpose(1, 2)  # (B, H, T, dh)
    key = module.k(hidden_states).view(shape).transpose(1, 2)  # (B, H, T, dh)
    value = module.v(hidden_states).view(shape).transpose(1, 2)  # (B, H, T, dh)
    query, key, value, position_bias, attention_mask = _in_float32(query, key, value, position_bias, attention_mask)
    scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(dh)  # (B, H, Q, K)
    if position_bias is not None:
        scores = scores + position_bias  # (B or 1, H, Q, K)
    if attention_mask is not None:
        scores = scores + attention_mask  # (B, 1, Q or 1, K): 0 or the dtype's minimum
    weights = module.dropout(F.softmax(scores, dim=-1))  # (B, H, Q, K)
    out = torch.matmul(weights, value)  # (B, H, Q, dh)
    out = _edited(module, query, key, value, out, weights, lambda: allowed(attention_mask, T), 1 / math.sqrt(dh),
                  score_bias=position_bias)  # (B, H, Q, dh)
    context = out.permute(0, 2, 1, 3).reshape(B, T, -1).to(dtype)  # (B, T, H * dh): the heads side by side
    output = module.o(context)  # (B, T, D)
    return (output, weights) if output_attentions else (output,)


OWN_ATTENTION: dict[str, tuple[Callable, float]] = {"GPTNeoSelfAttention": (_gpt_neo_where, 1.0)}
# Attention modules whose whole forward is replaced (the weights are computed inline): the module type -> forward.
# A class name that architectures computing differently share (DeBERTa's and DeBERTa-v2's
# DisentangledSelfAttention; SEW-D copies the latter) is keyed by its transformers package too: see `own_key`.
OWN_FORWARD: dict[str, Callable] = {"BloomAttention": _bloom_forward, "MptAttention": _mpt_forward,
                                    "FalconAttention": _falcon_forward,
                                    "deberta_v2.DisentangledSelfAttention": _deberta_v2_forward,
                                    "MPNetSelfAttention": _mpnet_forward}


def own_key(cls: type) -> str | None:
    """The key of OWN_ATTENTION or OWN_FORWARD an attention class answers to ('package.Class' first, then 'Class'),
    or None where mha-viz does not wrap it."""
    package = cls.__module__.rsplit(".", 2)[-2] if cls.__module__.count(".") >= 1 else ""
    for key in (f"{package}.{cls.__name__}", cls.__name__):
        if key in OWN_ATTENTION or key in OWN_FORWARD:
            return key
    return None


def wrap_own_attention(modules: list[torch.nn.Module]) -> bool:
    """Route the modules' own `_attn(query, key, value, attention_mask)` (-> output (B, H, T, dh), weights
    (B, H, Q, K)), or their whole forward where the weights are computed inline, through this call's HeadEdit, as
    the registered function does for the interface; wrapped once, when the model loads, bound to each module.
    The wrapper reads only the calling context (`_CALL`), so it holds no session's state: outside an edited call it
    computes what the module's own forward computes. False when some module is of no known kind (nothing is
    wrapped)."""
    if not modules or any(own_key(type(m)) is None for m in modules):
        return False
    for module in modules:
        name = own_key(type(module))
        if name in OWN_FORWARD:
            if getattr(module, "pretraining_tp", 1) > 1 and getattr(module, "slow_but_exact", False):
                raise ModelLoadError("this Bloom model splits its output projection (pretraining_tp with "
                                     "slow_but_exact), which mha-viz does not follow; set slow_but_exact to false "
                                     "in its config.json")
            module.forward = types.MethodType(OWN_FORWARD[name], module)
        else:
            module._attn = types.MethodType(_own_attn, module)
    return True


def _own_attn(module, query, key, value, attention_mask=None, *args, **kwargs):
    where, scale = OWN_ATTENTION[own_key(type(module))]
    dtype = value.dtype
    if dtype != torch.float32:  # MHA_VIZ_DTYPE: attend in float32 (as `_masked_eager_attention`), then back
        query, key, value = query.float(), key.float(), value.float()  # (B, H, T, dh) each
        if attention_mask is not None and attention_mask.is_floating_point():
            attention_mask = attention_mask.float()  # 0 or the dtype's minimum, both exact in float32
    out, weights = type(module)._attn(module, query, key, value, attention_mask, *args, **kwargs)  # (B,H,T,dh)
    out = _edited(module, query, key, value, out, weights, lambda: where(module, query, key, attention_mask), scale)
    return out.to(dtype), weights


def allowed(mask: torch.Tensor | None, n_keys: int) -> torch.Tensor | None:
    """Where a query may look, (Q, K) bool, from the mask eager attention adds (additive float: 0 allowed, the
    dtype's minimum forbidden; or boolean); None when there is no mask."""
    if mask is None:
        return None
    m = mask[0]
    while m.dim() > 2:  # (1, Q, K) or (H, Q, K) broadcast over heads: the first is every head's
        m = m[0]
    m = m[..., :n_keys].cpu()  # eager slices a mask longer than the keys the same way
    if m.dtype == torch.bool:
        return m
    return m > torch.finfo(m.dtype).min / 2


def register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTN_IMPL, _masked_eager_attention)
    # Without its own mask entry an unknown implementation gets no causal mask at all: use eager's.
    AttentionMaskInterface.register(ATTN_IMPL, eager_mask)


def _record_final_norm(module, args, output) -> None:
    call = _CALL.get()
    if call is not None:
        call.edit.finished(args[0], output)  # (B, T, D) residual stream in, (B, T, D) normalised out


def watch_final_norm(norm: torch.nn.Module) -> None:
    """Let a call's edit see this module's input and output (`HeadEdit(final=True)`). The hook writes only into
    the calling context's edit, so it holds no state of any session; it is added once, when the model loads."""
    norm.register_forward_hook(_record_final_norm)


def make_resumable(blocks: list[torch.nn.Module]) -> None:
    """Let a call's edit skip the first blocks (`HeadEdit.start`): each block's forward, wrapped once when the model
    loads, returns the unedited run's state instead of computing while its layer is before `start`, and reports
    what enters and leaves it to the edit. Outside an edited call, or at a layer that runs, the block's own forward
    runs unchanged; the wrapper reads only the calling context, so it holds no session's state. It is bound to the
    block (a method, not a closure over it), so a deep copy of the model wraps its own blocks, not these."""
    for layer, block in enumerate(blocks):
        block._mha_viz_layer = layer
        block.forward = types.MethodType(_resumable_forward, block)


def _resumable_forward(block: torch.nn.Module, *args, **kwargs):
    forward = type(block).forward
    call = _CALL.get()
    if call is None:
        return forward(block, *args, **kwargs)
    edit, layer = call.edit, block._mha_viz_layer
    hidden = args[0] if args else kwargs.get("hidden_states")
    if edit.skips(layer):
        return edit.resumed(hidden.shape[0])  # the unedited run's output of layer start - 1, over the batch
    grown = edit.grown(layer, hidden)  # (B', T, D): with the rows of a growing batch that join at this layer
    if grown is not hidden:
        # The mask and rotary tables that come with it were made for the forward's one row: they broadcast.
        hidden = grown
        if args:
            args = (grown, *args[1:])
        else:
            kwargs["hidden_states"] = grown
    edit.entering(layer, hidden)  # (B, T, D): the residual stream entering this block
    out = forward(block, *args, **kwargs)
    edit.block_done(layer, out)
    return out
