"""Activation patching for encoder-decoder models (hf/seq2seq.py): a head's output (its slice of the output
projection's input) taken from a run on a second source text, read on the SAME decoder input as the run it goes
into, so decoder self-attention and cross-attention heads line up position by position on the target whatever the
two sources' lengths; an encoder head lines up on the source, so the two sources need one token count.

The second source's outputs are recorded by the model's own hooks (`Seq2SeqModel._hooks`, every projection's input)
in one forward with all heads on, and kept for a few (source, target) pairs per model: a patching map runs one
patched forward per head, all from the same second source.
"""
from __future__ import annotations

import threading
import weakref

import torch

from mha_viz.contract import InputError

KEPT = 8  # second sources kept per model: (its ids, the target's ids) -> every projection's input
_OUTPUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()  # the model is shared by every browser session


def check(ablate: frozenset, ablate_cross: frozenset, patch: frozenset, patch_cross: frozenset,
          source) -> None:
    """The one-stack engine's rules (models/interventions.py), for both sets: a head is ablated or patched, not
    both; patching needs a second source."""
    for off, on in ((ablate, patch), (ablate_cross, patch_cross)):
        if off & on:
            both = ", ".join(f"({l}, {h})" for l, h in sorted(off & on)[:5])
            what = "cross-attention heads" if on is patch_cross else "heads"
            raise InputError(f"{what} {both} are both ablated and patched; a head's output is one or the other")
    if (patch or patch_cross) and source is None:
        which = "patch" if patch else "patch_cross"
        raise InputError(f"{which} needs source=<another source text>: the patched heads' outputs come from a run "
                         "on it, reading the same target")
    if (patch or patch_cross) and not str(source).strip():
        raise InputError("The second source text is empty: type the sentence the patched heads' outputs come from.")


def recorded(model, src: list[int], tgt: list[int]) -> list[torch.Tensor]:
    """Every output projection's input (1, P, H * dh), in `model._modules()` order, in a forward of `src` reading
    `tgt` with all heads on; P is the source's length (encoder) or the target's (decoder self, cross)."""
    key = (tuple(src), tuple(tgt))
    with _LOCK:
        found = _OUTPUTS.get(model, {}).get(key)
    if found is not None:
        return found
    record: list = [None] * len(model._modules())
    model._forward(src, tgt, {}, record)
    with _LOCK:
        kept = _OUTPUTS.setdefault(model, {})
        if len(kept) >= KEPT:  # the oldest second source goes first
            kept.pop(next(iter(kept)))
        kept[key] = record
    return record


def check_lined_up(src: list[int], second: list[int], encoder_heads) -> None:
    """An InputError where encoder heads (`encoder_heads`, (layer, head) pairs) are patched from a second source
    of another token count: they take its outputs position by position."""
    if encoder_heads and len(second) != len(src):
        heads = ", ".join(f"({l}, {h})" for l, h in sorted(encoder_heads)[:5])
        raise InputError(
            f"the second source has {len(second)} tokens and the source has {len(src)}: patching encoder heads "
            f"({heads}) takes each head's output position by position, so both sources need the same number of "
            "tokens. Change the second source so it lines up (e.g. swap one name for another of the same length "
            "in tokens), or patch only decoder and cross-attention heads, which line up on the one target.")


def replacements(model, src: list[int], tgt: list[int], patch: frozenset, patch_cross: frozenset,
                 second: list[int]) -> dict:
    """{(module index, head): (P, dh)}: what `Seq2SeqModel._hooks` puts at each patched head, its output on the
    second source `second` reading the same target `tgt`. `patch` numbers self-attention heads as `ablate`
    (encoder layers, then the decoder's); `patch_cross` the decoder's cross-attention layers from 0."""
    if not patch and not patch_cross:
        return {}
    check_lined_up(src, second, [(l, h) for l, h in patch if l < model.n_enc])
    outputs = recorded(model, second, tgt)
    dh, cut = model.dh, model.n_enc + model.n_dec
    out = {}
    for index, head in [*patch, *((cut + l, h) for l, h in patch_cross)]:
        out[(index, head)] = outputs[index][0, :, head * dh:(head + 1) * dh]  # (P, dh)
    return out
