"""Weights per head of an encoder-decoder model (BART, Marian, T5), for circuits read from the weights: each of its
three kinds of attention (encoder self-attention, decoder self-attention, cross-attention) split per head from the
attention module's own q/k/v and output projections, as its forward splits them (head h: rows
[h * dh, (h + 1) * dh) of q, k and v, columns of the output projection).

The scale of q·kᵀ is left out of w_q, as for every one-stack model (HeadWeights is the projection itself, and the
maps are "before the 1/sqrt(dh) scale"): BART and Marian multiply the scores by the module's `scaling`
(head_dim ** -0.5) inside their attention, T5 does not scale. Cross-attention's w_q reads the decoder's residual
stream (its sublayer's normalised input), w_k and w_v the encoder's output (after the encoder's final norm).
"""
from __future__ import annotations

import torch

from mha_viz.contract import Embeddings, HeadWeights, check_index
from mha_viz.contract.kinds import CROSS, DECODER, ENCODER, kind_named
from mha_viz.models.hf.seq2seq_inside import sublayers

T5_BIAS = ("T5's relative position bias: a learned score per head for each query-key offset bucket, added to q·kᵀ "
           "(computed by the stack's first layer and reused by the others)")


def n_layers(model, kind: str) -> int:
    """How many layers `kind` has: the encoder's for Encoder, the decoder's for Decoder and Cross."""
    return model.n_enc if kind_named(kind) == ENCODER else model.n_dec


def head_weights(model, layer: int, kind: str = ENCODER) -> HeadWeights:
    """Layer `layer` (numbered within `kind`) of `kind`'s attention split per head (see the module docstring)."""
    layer = check_index(layer, n_layers(model, kind), f"{kind} layer")
    sub = sublayers(model, kind)[layer]
    H = model.n_heads

    def per_head(linear) -> torch.Tensor:  # nn.Linear (H * dh, D) -> (H, D, dh)
        w = linear.weight.detach().float().cpu()  # (H * dh, D)
        return w.reshape(H, -1, w.shape[1]).transpose(1, 2).contiguous()  # (H, D, dh)

    def bias(linear, shape) -> torch.Tensor | None:
        b = getattr(linear, "bias", None)
        return None if b is None else b.detach().float().cpu().reshape(shape)

    out = sub.o.weight.detach().float().cpu()  # (D, H * dh)
    w_o = out.T.reshape(H, -1, out.shape[0]).contiguous()  # (H, dh, D)
    return HeadWeights(layer=layer, w_q=per_head(sub.q), w_k=per_head(sub.k), w_v=per_head(sub.v), w_o=w_o,
                       b_q=bias(sub.q, (H, -1)), b_k=bias(sub.k, (H, -1)), b_v=bias(sub.v, (H, -1)),
                       b_o=bias(sub.o, (-1,)), kv_head=tuple(range(H)), rotary=False)


def weights_leave_out(model, kind: str = ENCODER) -> tuple[str, ...]:
    """T5's relative position bias where `kind`'s stack has one (its self-attention; its cross-attention has none)."""
    has_bias = any(getattr(s.attention, "has_relative_attention_bias", False) for s in sublayers(model, kind))
    return (T5_BIAS,) if has_bias else ()


def embeddings(model, kind: str = ENCODER) -> Embeddings:
    """The shared token embedding; the unembedding is the LM head for Decoder and Cross (they write into the stream
    the LM head reads), None for Encoder (its stream reaches the LM head only through cross-attention, so its maps
    read the token embedding in the unembedding's place, as an encoder's do). Positions: the stack's own table
    (BART's learned, Marian's sinusoidal, past BART's offset of 2) for Encoder and Decoder; None for T5 (relative
    bias) and for Cross, whose queries and keys take positions from two different tables."""
    kind = kind_named(kind)
    net = model._model
    tokens = net.get_input_embeddings().weight.detach().float().cpu()  # (V, D)
    head = net.get_output_embeddings()
    unembed = None
    if kind != ENCODER and head is not None and head.weight.shape == tokens.shape:
        unembed = head.weight.detach().float().cpu()  # (V, D)
    positions = None
    if kind in (ENCODER, DECODER):
        table = getattr(net.get_encoder() if kind == ENCODER else net.get_decoder(), "embed_positions", None)
        if isinstance(table, torch.nn.Embedding):
            positions = table.weight.detach().float().cpu()[int(getattr(table, "offset", 0)):]  # (P, D)
    return Embeddings(tokens=tokens, positions=positions, unembed=unembed,
                      labels=model._labels(list(range(tokens.shape[0]))))


# Why a kind's composition is partly left out, for the page (Circuits.composition_note).
CROSS_COMPOSITION = ("Cross-attention heads read their keys and values from the encoder's output, never from the "
                     "decoder's stream they write into, so only Q-composition between them is measured (an earlier "
                     "cross head's output reaching a later one's queries); K- and V-composition would pair maps "
                     "that never meet.")


def composition_modes(kind: str) -> tuple[tuple[str, ...], str]:
    """(the composition modes that hold between `kind`'s heads, why the others are left out). Encoder and Decoder
    are one stack each over one text: all three hold (the cross-attention sublayers between the decoder's layers
    are left out, as MLPs are)."""
    return (("q",), CROSS_COMPOSITION) if kind_named(kind) == CROSS else (("q", "k", "v"), "")
