"""Exact activation patching for a model with cross-attention (encoder-decoder): every head of every kind patched
alone from a second source, one patched run per head (`Model.run` with `patch` / `patch_cross`), the decoder
reading the same target in every run. No streamlit, no plotting.

The map numbers its layers as the app's one set of heads (web/kinds.py): the encoder's layers 0 .. L_enc - 1, the
decoder's self-attention layers after them (as `Model.run`'s `ablate` and `patch`), then each decoder layer's
cross-attention at L_enc + L_dec + l (`patch_cross`'s layer l).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from mha_viz.analysis.patching import Metric, PatchingMap
from mha_viz.contract import Model


def every_kind_patching_map(model: Model, text: str, source: str, target: str, metric: Metric,
                            progress: Callable[[float], None] | None = None) -> PatchingMap:
    """Patch each head alone from the second source `source` into `text`, both read on `target`, and measure
    `metric` -> PatchingMap with `patched` (L_enc + 2 L_dec, H) in the one-set numbering (module docstring).

    An encoder head takes its output position by position from the second source's encoder, so where the two
    sources differ in token count the encoder's rows are NaN (not measured); decoder and cross-attention heads line
    up on the one target and are always measured."""
    n_enc, n_dec, H = model.n_layers, model.decoder_layers(), model.n_heads
    text_value = float(metric(*_read(model.run(text, target=target))))
    source_value = float(metric(*_read(model.run(source, target=target))))
    encoder = model.token_count(text) == model.token_count(source)
    patched = torch.full((n_enc + 2 * n_dec, H), math.nan)  # (L_enc + 2 L_dec, H)
    rows = [layer for layer in range(n_enc + 2 * n_dec) if encoder or layer >= n_enc]
    total = len(rows) * H
    for done, (layer, head) in enumerate(((layer, head) for layer in rows for head in range(H)), 1):
        cross = layer >= n_enc + n_dec
        heads = {(layer - n_enc - n_dec if cross else layer, head)}
        run = model.run(text, target=target, source=source, **{"patch_cross" if cross else "patch": heads})
        patched[layer, head] = float(metric(*_read(run)))
        if progress is not None:
            progress(done / total)
    return PatchingMap(text_value, source_value, patched)


def _read(run) -> tuple[torch.Tensor, torch.Tensor]:
    return run.output, run.logits  # (T, D), (T, V): the decoder's, along the target
