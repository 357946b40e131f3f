"""Inside a head of an encoder-decoder model (BART, Marian, T5): any head of any of its three kinds of attention
(encoder self-attention, decoder self-attention, cross-attention) opened up as a `HeadInside`, from one forward of
the model with the heads switched off as `Seq2SeqModel.run` switches them off.

Queries come from the source (Encoder) or the target (Decoder, Cross); keys and values from the source (Encoder,
Cross) or the target (Decoder). q, k and v are the outputs of the attention module's own q/k/v projections, caught
by forward hooks, so they are what its dot product reads: BART and Marian multiply q . k^T by head_dim ** -0.5
(the module's `scaling`), T5 does not scale, and adds a relative position bias that the first layer of each stack
computes and later layers reuse (read from the module's output, as the model hands it on). The decoder's
self-attention is causal; the source is one text without padding, so the encoder and cross-attention see every key.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import torch

from mha_viz.contract import Ablation, EncodedText, HeadInside, UnavailableError, check_index
from mha_viz.contract.kinds import CROSS, DECODER, ENCODER, kind_named

_ATTENTIONS = {ENCODER: "encoder_attentions", DECODER: "decoder_attentions", CROSS: "cross_attentions"}


@dataclass(frozen=True)
class Sublayer:
    """One attention sublayer's modules: the attention module, its q/k/v and output projections, and the module
    whose input is the residual stream entering the sublayer (T5's pre-LN wrapper; BART's attention module itself,
    which reads the residual stream as it is and normalises after adding to it)."""

    attention: torch.nn.Module
    q: torch.nn.Module
    k: torch.nn.Module
    v: torch.nn.Module
    o: torch.nn.Module
    residual: torch.nn.Module
    t5: bool


def sublayers(model, kind: str) -> list[Sublayer]:
    """The attention sublayers of `kind` in layer order, for T5-style (`block`) and BART-style (`layers`) stacks."""
    net = model._model
    stack = net.get_encoder() if kind == ENCODER else net.get_decoder()
    if hasattr(stack, "block"):  # T5: layer[0] self-attention, decoder layer[1] cross-attention
        wrappers = [b.layer[1] if kind == CROSS else b.layer[0] for b in stack.block]
        mods = [w.EncDecAttention if kind == CROSS else w.SelfAttention for w in wrappers]
        return [Sublayer(a, a.q, a.k, a.v, a.o, w, True) for a, w in zip(mods, wrappers)]
    mods = [layer.encoder_attn if kind == CROSS else layer.self_attn for layer in stack.layers]
    return [Sublayer(a, a.q_proj, a.k_proj, a.v_proj, a.out_proj, a, False) for a in mods]


def _replace(model, ablation: str, reference, source: str, self_heads: frozenset, cross_heads: frozenset,
             n_target: int, n_source: int) -> dict:
    """{(output projection index, head): None (zero) or its replacement}, as `Seq2SeqModel.run` builds it."""
    if not (self_heads or cross_heads):
        return {}
    values = model._replacements(ablation, reference, source, n_target, n_source)
    cross = model.n_enc + model.n_dec  # where the cross-attention projections start in `_modules()` order
    replace = {}
    for index, head in [*self_heads, *((cross + layer, head) for layer, head in cross_heads)]:
        value = values[index]
        replace[(index, head)] = None if value is None else value[head].to(model._device)
    return replace


class _Catch:
    """Forward hooks on one sublayer for one forward: its projections' outputs, T5's position bias, the residual
    stream entering it, and the output projection's input and output. The output projection is read by a forward
    (not pre-) hook, so it sees its input after the run's own pre-hooks switched heads off."""

    def __init__(self, sub: Sublayer):
        self.sub, self.seen, self.handles = sub, {}, []

    def __enter__(self):
        sub, seen = self.sub, self.seen

        def keep(name):
            return lambda mod, args, out: seen.__setitem__(name, out.detach())

        def residual(mod, args, kwargs):
            x = args[0] if args else kwargs["hidden_states"]
            seen["resid"] = x.detach()  # (1, P, D)

        def attention(mod, args, out):
            if sub.t5 and isinstance(out, tuple) and len(out) > 1 and isinstance(out[1], torch.Tensor):
                seen["position_bias"] = out[1].detach()  # (1 or B, H, Q, K)

        def output(mod, args, out):
            seen["ctx"], seen["out"] = args[0].detach(), out.detach()  # (1, Q, H * dh), (1, Q, D)

        self.handles = [sub.q.register_forward_hook(keep("q")), sub.k.register_forward_hook(keep("k")),
                        sub.v.register_forward_hook(keep("v")), sub.attention.register_forward_hook(attention),
                        sub.residual.register_forward_pre_hook(residual, with_kwargs=True),
                        sub.o.register_forward_hook(output)]
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()


def _heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(1, P, H * dh) -> (H, P, dh) float32 on the CPU."""
    return x[0].float().cpu().view(x.shape[1], n_heads, -1).transpose(0, 1)


def inside_layer(model, source: str | EncodedText, layer: int, kind: str, target: str | None = None,
                 ablate: Iterable = (), ablate_cross: Iterable = (), ablation: str = "zero",
                 reference: Iterable[str] | None = None) -> list[HeadInside]:
    """Every head of `kind`'s layer `layer` (numbered from 0 within the kind) opened up on `source` and `target`
    (None: the model's greedy continuation, as `run`), from one forward with `ablate` and `ablate_cross` switched
    off as `Seq2SeqModel.run` switches them off (`ablate` numbers encoder layers, then the decoder's).

    `tokens` are the queries' labels (the source's for Encoder, the target's for Decoder and Cross); for Cross,
    `key_tokens` are the source's. weights == the run's attentions of that kind; scores are q . k^T * scale plus
    T5's position bias (`position_bias`), -inf where the decoder's causal mask forbids, checked against those
    weights; a head's contribution is its slice of the output projection's input (weights @ v, or what switching it
    off put there) through its slice of that projection, and the contributions plus `bias` are the projection's
    output. `resid` is the residual stream entering the sublayer."""
    kind = kind_named(kind)
    n_layers = model.n_enc if kind == ENCODER else model.n_dec
    layer = check_index(layer, n_layers, f"{kind} layer")
    text = source.text if isinstance(source, EncodedText) else source
    ablation = Ablation.of(ablation)  # every meaning of "off" the contract holds (contract/ablation.py)
    src = model._source_ids(text)
    tgt = model.greedy_target(src) if target is None else model._target_ids(target)
    self_heads = model._heads(ablate, model.n_enc + model.n_dec, "ablate")
    cross_heads = model._heads(ablate_cross, model.n_dec, "ablate_cross")
    replace = _replace(model, ablation, reference, text, self_heads, cross_heads, len(tgt), len(src))
    sub = sublayers(model, kind)[layer]
    with _Catch(sub) as catch:
        out = model._forward(src, tgt, replace)
    seen, H = catch.seen, model.n_heads
    if not {"q", "k", "v", "ctx", "resid"} <= set(seen):
        raise UnavailableError(f"{model.info.title}: {kind} layer {layer}'s attention did not run its q, k, v and "
                               "output projections as BART and T5 do, so its queries and keys cannot be shown.")
    weights = getattr(out, _ATTENTIONS[kind])[layer][0].float().cpu()  # (H, Q, K)
    q, k, v = (_heads(seen[n], H) for n in ("q", "k", "v"))  # (H, Q, dh), (H, K, dh), (H, K, dh)
    scale = float(getattr(sub.attention, "scaling", None) or q.shape[-1] ** -0.5)
    scores = q @ k.transpose(-2, -1) * scale  # (H, Q, K)
    position_bias = None
    bias_seen = seen.get("position_bias")
    if bias_seen is not None and bool(bias_seen.any()):  # T5's relative bias; cross-attention's is all zeros
        position_bias = bias_seen[0].float().cpu().expand_as(scores).clone()  # (H, Q, K)
        scores = scores + position_bias  # (H, Q, K)
    if kind == DECODER:  # each target token sees itself and the earlier ones
        Q, K = scores.shape[-2:]
        allowed = torch.ones(Q, K, dtype=torch.bool).tril()  # (Q, K)
        scores = scores.masked_fill(~allowed, float("-inf"))  # (H, Q, K)
    gap = float((torch.softmax(scores, dim=-1) - weights).abs().max())
    if gap > 1e-4:
        raise UnavailableError(f"{model.info.title}: softmax(q·kᵀ·scale) differs from {kind} layer {layer}'s "
                               f"attention weights by {gap:.2g}: this model's attention changes the scores in a way "
                               "the hooks do not see, so showing these scores would be wrong.")
    weight = sub.o.weight.detach().float().cpu()  # (D, H * dh)
    w_o = weight.T.reshape(H, -1, weight.shape[0])  # (H, dh, D)
    bias = None if getattr(sub.o, "bias", None) is None else sub.o.bias.detach().float().cpu()  # (D,)
    contribution = _heads(seen["ctx"], H) @ w_o  # (H, Q, D): what the projection saw, after heads were switched off
    resid = seen["resid"][0].float().cpu()  # (Q, D)
    labels_src, labels_tgt = model._labels(src), model._labels(tgt)
    tokens = labels_src if kind == ENCODER else labels_tgt
    key_tokens = labels_src if kind == CROSS else None
    if kind == CROSS:
        off = {h for l, h in cross_heads if l == layer}
    else:
        start = 0 if kind == ENCODER else model.n_enc
        off = {h for l, h in self_heads if l == start + layer}
    return [
        HeadInside(tokens=tokens, layer=layer, head=h, q=q[h], k=k[h], v=v[h], scores=scores[h], weights=weights[h],
                   contribution=contribution[h], scale=scale, query_scale=None, bias=bias, resid=resid, kv_head=h,
                   ablated=h in off, position_bias=None if position_bias is None else position_bias[h],
                   key_tokens=key_tokens)
        for h in range(H)
    ]


def inside(model, source: str | EncodedText, layer: int, head: int, kind: str = ENCODER, **kwargs) -> HeadInside:
    """One head of `kind`'s layer `layer` opened up; `inside_layer` for the arguments."""
    return inside_layer(model, source, layer, kind, **kwargs)[check_index(head, model.n_heads, "head")]
