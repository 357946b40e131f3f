"""What a run changes: each head's output (its slice of the output projection's input, the context vector
`weights @ v` before W_O mixes the heads) is kept or replaced.

    keep        1 keeps a head's output, 0 replaces it
    replace     what a head with keep 0 outputs instead: one vector for every position, or one per position
                (None: 0, zero ablation)

Every intervention mha-viz offers is such a choice per head. A meaning of "off" (`contract.Ablation`: zero, mean,
resample, ...) computes its own replacement; patching takes the head's outputs in a run on another text
(`intervention` builds both into one keep mask and one replacement for a run).
"""
from __future__ import annotations

from typing import Iterable

import torch

from mha_viz.contract import Ablation, EncodedText, Head, InputError, Model, head_keep_mask


class Change:
    """keep (B, L, H): 1 keeps a head's output, 0 replaces it with `replace` (B or 1, L, H, T or 1, dh), or with
    0 when `replace` is None. A part of `HeadEdit`, applied at every layer's head-combine step."""

    def __init__(self, keep: torch.Tensor | None = None, replace: torch.Tensor | None = None):
        if replace is not None and keep is None:
            raise ValueError("replace needs a keep mask saying which heads take it (0 = replace)")
        if keep is not None and keep.ndim != 3:
            raise ValueError(f"keep must be (B, L, H); got {tuple(keep.shape)}")
        if replace is not None and (replace.ndim != 5 or replace.shape[1:3] != keep.shape[1:3]):
            raise ValueError(f"replace must be (B or 1, L, H, T or 1, dh) matching keep {tuple(keep.shape)}; "
                             f"got {tuple(replace.shape)}")
        self.keep, self.replace = keep, replace

    def changed(self, layer: int, z: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """z (B, H, T, dh): one layer's head outputs -> what the output projection should see. `offset`: z holds
        positions offset.. of the text (a tail, models/schedule.py), so a per-position replacement is cut alike."""
        if self.keep is None:
            return z
        b = z.shape[0]  # all of keep's rows, or those begun by this layer of a growing batch
        keep = self.keep[:b, layer].to(device=z.device, dtype=z.dtype)[:, :, None, None]  # (B, H, 1, 1)
        z = z * keep  # (B, H, T, dh)
        if self.replace is not None:
            replace = self.replace[:b, layer].to(device=z.device, dtype=z.dtype)  # (B or 1, H, T or 1, dh)
            if offset and replace.shape[2] > 1:
                replace = replace[:, :, offset:]  # (B or 1, H, T - offset, dh): the tail's positions
            z = z + (1.0 - keep) * replace  # (B, H, T, dh)
        return z


def intervention(model: Model, text: EncodedText, ablate: frozenset[Head], ablation: Ablation,
                 reference: Iterable[str] | None, patch: frozenset[Head] = frozenset(),
                 source: str | EncodedText | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(keep (1, L, H) or None when every head is on, replace (1, L, H, T or 1, dh) or None): what the heads in
    `ablate` (as `ablation` says) and `patch` (from a run on `source`) output instead of their own output in a run
    on `text` (checked and encoded at the run's entry, `Model.encode_text`; T = `text.n_tokens`). A replacement is
    per position (T) when the meaning of "off" gives one per position (`Ablation.replacement`, e.g. resample) or
    anything is patched; else one vector per head."""
    if not ablate and not patch:
        return None, None
    L, H, n_tokens = model.n_layers, model.n_heads, text.n_tokens
    keep = head_keep_mask(ablate | patch, L, H)[None]  # (1, L, H)
    off = ablation.replacement(model, reference, text) if ablate else None  # (L, H, T or 1, dh) or None: zero
    if off is not None and (off.ndim != 4 or tuple(off.shape[:2]) != (L, H) or off.shape[2] not in (1, n_tokens)):
        raise ValueError(f"{type(ablation).__name__}.replacement must give (L={L}, H={H}, {n_tokens} or 1, dh) for "
                         f"this text; got {tuple(off.shape)}: line a per-position replacement up with the run's "
                         "positions (contract.line_up)")
    src = None
    if patch:  # the caller has checked that a source was given
        source = model.encode_text(source)  # another text: checked once here, and read as encoded from here on
        n_source = source.n_tokens
        if n_source != n_tokens:
            raise InputError(
                f"the source text has {n_source} tokens and the text has {n_tokens}: patching takes each "
                "head's output position by position, so both need the same number of tokens. Change the "
                "source so it lines up (e.g. swap one name for another of the same length in tokens)."
            )
        src = model.head_outputs(source)  # (L, H, T, dh)
    if off is None and src is None:
        return keep, None  # zero: keep 0 is enough
    d_head = (src if src is not None else off).shape[-1]
    per_position = patch or off.shape[2] > 1
    replace = torch.zeros(1, L, H, n_tokens if per_position else 1, d_head)  # (1, L, H, T or 1, dh)
    for layer, head in ablate if off is not None else ():
        replace[0, layer, head] = off[layer, head]  # (T or 1, dh); one vector broadcast over T
    for layer, head in patch:
        replace[0, layer, head] = src[layer, head]  # (T, dh)
    return keep, replace
