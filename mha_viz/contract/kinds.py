"""The kinds of attention of a model with cross-attention (an encoder-decoder model), named once for every layer:
the encoder's self-attention over the source, the decoder's self-attention over the target, and cross-attention
(target tokens as rows reading source tokens as columns). The models, the analysis, both hosts' grids and the
notebook read these names from here, and `Seq2SeqRun`, the run that carries every kind.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mha_viz.contract.records import AttentionRun, InputError

ENCODER, DECODER, CROSS = "Encoder", "Decoder", "Cross"
KINDS = (ENCODER, DECODER, CROSS)
ABOUT = {
    ENCODER: "the encoder's self-attention: source tokens reading source tokens",
    DECODER: "the decoder's self-attention: target tokens reading earlier target tokens",
    CROSS: "cross-attention: target tokens (rows) reading source tokens (columns)",
}


def canonical(kind) -> str | None:
    """`kind` as the page spells it, in any case ("cross" -> "Cross"); None when it names no kind."""
    return {k.lower(): k for k in KINDS}.get(str(kind).strip().lower())


def kind_named(kind) -> str:
    """`kind` as the page spells it, in any case, or an InputError naming the kinds there are."""
    found = canonical(kind)
    if found is None:
        raise InputError(f"kind must be one of {', '.join(KINDS)} (in any case); got {kind!r}.")
    return found


@dataclass(frozen=True)
class Seq2SeqRun(AttentionRun):
    """An encoder-decoder run. The inherited fields describe the encoder over the source (`tokens`, `token_ids`,
    `attentions` (L_enc, H, S, S)); `output` is the decoder's last hidden state (T, D) and `logits` its next-token
    logits (T, V). The decoder's own:

        target_tokens       list[str]  len T   the decoder's input: its start token, then the target's ids
        target_ids          list[int]  len T
        decoder_attentions  (L_dec, H, T, T)   decoder self-attention (causal)
        cross_attentions    (L_dec, H, T, S)   target positions (rows) reading source positions (columns)
        ablated_cross       cross-attention heads switched off, (decoder layer, head)
        patched_cross       cross-attention heads patched from a second source, (decoder layer, head)
        target_special      positions of the tokenizer's special tokens among target_ids (its start token)
    """
    decoder_attentions: torch.Tensor | None = None
    cross_attentions: torch.Tensor | None = None
    target_tokens: list[str] = field(default_factory=list)
    target_ids: list[int] = field(default_factory=list)
    ablated_cross: frozenset = frozenset()
    patched_cross: frozenset = frozenset()
    target_special: tuple[int, ...] = ()  # positions of special tokens in the target (the decoder's start token)
