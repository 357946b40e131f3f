"""The kinds of attention of a model with cross-attention (an encoder-decoder model), named once for every layer:
the encoder's self-attention over the source, the decoder's self-attention over the target, and cross-attention
(target tokens as rows reading source tokens as columns). The models, the analysis, both hosts' grids and the
notebook read these names from here.
"""
from __future__ import annotations

from mha_viz.contract.records import InputError

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
