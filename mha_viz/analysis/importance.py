"""Head importance by single-head ablation: drives a Model through the contract, measures with `effects`.

No streamlit, no plotting. The reference it is tested against (one run per head) lives in the tests.
"""
from __future__ import annotations

from typing import Callable

import torch

from mha_viz.analysis.effects import kl_batch, one_minus_cos_batch
from mha_viz.contract import Ablation, Head, Model, check_ablate, head_keep_mask


def effect_measure(model: Model) -> str:
    """What the importance map measures for this model: KL of the next token for LMs, 1 - cosine otherwise."""
    return "KL" if model.info.kind != "encoder" else "1 - cos"


def head_importance(
    model: Model,
    text: str,
    base_off: frozenset[Head] = frozenset(),
    position: int = -1,
    chunk: int = 16,
    progress: Callable[[float], None] | None = None,
    ablation: str = "zero",
) -> torch.Tensor:
    """Ablate each head alone (on top of `base_off`) and measure the output change -> (L, H).

    For models with an LM head: KL(p_before || p_after) of the prediction at `position`. Michel et al. 2019
    switch heads off one at a time and measure the change in a task score (BLEU, accuracy), and rank heads by
    the loss's sensitivity to a head mask; KL needs no label. For encoders: 1 - cosine similarity of the mean-pooled
    sentence
    embedding. Heads already in `base_off` score 0. The single-head ablations go through the model as a
    batch of keep masks, `chunk` at a time, instead of one forward per head. `ablation` (an `Ablation` or its key)
    says what each switched-off head (those in `base_off` too) outputs, as in `Model.run`: "mean" its mean over the
    model's example sentences instead of zero.
    """
    n_layers, n_heads = model.n_layers, model.n_heads
    base_off = check_ablate(base_off, n_layers, n_heads, "base_off")
    outputs = Ablation.of(ablation).outputs(model, None)  # (L, H, dh): what a switched-off head outputs, or None: 0
    replace = None if outputs is None else outputs[None, :, :, None, :]  # (1, L, H, 1, dh), used where keep = 0
    base_keep = head_keep_mask(frozenset(base_off), n_layers, n_heads)  # (L, H)
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads) if (layer, head) not in base_off]
    base_out, base_logits = model.run_batch_keep(text, base_keep[None], replace)  # (1, T, D), (1, T, V) or None
    scores = torch.zeros(n_layers, n_heads)  # (L, H)
    for start in range(0, len(heads), chunk):
        part = heads[start:start + chunk]
        keep = base_keep.repeat(len(part), 1, 1)  # (B, L, H)
        for row, (layer, head) in enumerate(part):
            keep[row, layer, head] = 0.0
        outs, logits = model.run_batch_keep(text, keep, replace)  # (B, T, D), (B, T, V) or None
        if base_logits is not None:
            values = kl_batch(base_logits[0], logits, position)  # (B,)
        else:
            values = one_minus_cos_batch(base_out[0], outs)  # (B,)
        for (layer, head), value in zip(part, values.tolist()):
            scores[layer, head] = max(value, 0.0)  # float noise can make 1 - cos a hair below 0
        if progress is not None:
            progress(min(1.0, (start + len(part)) / max(len(heads), 1)))
    return scores
