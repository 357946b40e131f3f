"""Exact maps for a model with cross-attention (encoder-decoder): every head of every kind patched
alone from a second source, each head a row of the model's batched runs (`run_batch_keep` with `source`: a row
equals `Model.run` with that head in `patch` / `patch_cross`), the decoder reading the same target in every row;
and every head switched off alone (`every_kind_importance`). No streamlit, no plotting.

The map numbers its layers as the app's one set of heads (web/kinds.py): the encoder's layers 0 .. L_enc - 1, the
decoder's self-attention layers after them (as `Model.run`'s `ablate` and `patch`), then each decoder layer's
cross-attention at L_enc + L_dec + l (`patch_cross`'s layer l).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from mha_viz.analysis.effects import kl_batch
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
    heads = [(layer, head) for layer in range(n_enc + 2 * n_dec) if encoder or layer >= n_enc for head in range(H)]
    wave = model.wave_rows(model.token_count(text))  # rows per forward
    for start in range(0, len(heads), wave):
        chunk = heads[start:start + wave]
        keep = torch.ones(len(chunk), n_enc + 2 * n_dec, H)  # (B, L_enc + 2 L_dec, H): the one set's numbering
        for row, (layer, head) in enumerate(chunk):
            keep[row, layer, head] = 0.0
        values = metric(*model.run_batch_keep(text, keep, target=target, source=source))  # (B,)
        for row, (layer, head) in enumerate(chunk):
            patched[layer, head] = float(values[row])
        if progress is not None:
            progress((start + len(chunk)) / len(heads))
    return PatchingMap(text_value, source_value, patched)


def _read(run) -> tuple[torch.Tensor, torch.Tensor]:
    return run.output, run.logits  # (T, D), (T, V): the decoder's, along the target


def every_kind_importance(model: Model, text: str, target: str | None, heads_off, position: int,
                          ablation: str = "zero", progress: Callable[[float], None] | None = None) -> torch.Tensor:
    """Each head of every kind switched off alone, on top of `heads_off` (the one-set numbering, module docstring),
    and the change of the decoder's prediction at target position `position` measured as KL(with those heads off
    || with this one off too) -> (L_enc + 2 L_dec, H), NaN at the heads already off. Rows of `run_batch_keep`,
    `wave_rows` heads per forward; `ablation`: what "off" means, as the page's runs take it."""
    n, H = model.n_layers + 2 * model.decoder_layers(), model.n_heads
    off = frozenset((int(l), int(h)) for l, h in heads_off)
    base_keep = torch.ones(1, n, H)  # (1, L_enc + 2 L_dec, H)
    for layer, head in off:
        base_keep[0, layer, head] = 0.0
    rows = dict(positions=[position], target=target, ablation=ablation)
    _, base = model.run_batch_keep(text, base_keep, **rows)  # (1, 1, V)
    scores = torch.full((n, H), math.nan)  # (L_enc + 2 L_dec, H)
    heads = [(layer, head) for layer in range(n) for head in range(H) if (layer, head) not in off]
    wave = model.wave_rows(model.token_count(text))
    for start in range(0, len(heads), wave):
        chunk = heads[start:start + wave]
        keep = base_keep.repeat(len(chunk), 1, 1)  # (B, L_enc + 2 L_dec, H)
        for row, (layer, head) in enumerate(chunk):
            keep[row, layer, head] = 0.0
        _, logits = model.run_batch_keep(text, keep, **rows)  # (B, 1, V)
        values = kl_batch(base[0, 0], logits[:, 0])  # (B,)
        for row, (layer, head) in enumerate(chunk):
            scores[layer, head] = float(values[row])
        if progress is not None:
            progress((start + len(chunk)) / len(heads))
    return scores
