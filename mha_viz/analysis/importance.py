"""Head importance by single-head ablation: drives a Model through the contract, measures with `effects`.

No streamlit, no plotting. The reference it is tested against (one run per head) lives in the tests.
"""
from __future__ import annotations

from typing import Callable

import torch

from mha_viz.analysis.effects import kl_batch, one_minus_cos_batch
from mha_viz.contract import Ablation, Head, InputError, Model, check_ablate, head_keep_mask


def effect_measure(model: Model) -> str:
    """What the importance map measures for this model: KL of the next token for LMs, 1 - cosine otherwise."""
    return "KL" if model.info.kind != "encoder" else "1 - cos"


def head_importance(
    model: Model,
    text: str,
    base_off: frozenset[Head] = frozenset(),
    position: int = -1,
    chunk: int | None = None,
    progress: Callable[[float], None] | None = None,
    ablation: str = "zero",
) -> torch.Tensor:
    """Ablate each head alone (on top of `base_off`) and measure the output change -> (L, H).

    For models with an LM head: KL(p_before || p_after) of the prediction at `position`. Michel et al. 2019
    switch heads off one at a time and measure the change in a task score (BLEU, accuracy), and rank heads by
    the loss's sensitivity to a head mask; KL needs no label. For encoders: 1 - cosine similarity of the mean-pooled
    sentence
    embedding. Heads already in `base_off` score 0. The single-head ablations go through the model as a
    batch of keep masks, `chunk` at a time (None: `Model.wave_rows`, one growing batch per call), instead of one
    forward per head. `ablation` (an `Ablation` or its key)
    says what each switched-off head (those in `base_off` too) outputs, as in `Model.run`, with the model's example
    sentences as the reference texts.
    """
    n_layers, n_heads = model.n_layers, model.n_heads
    base_off = check_ablate(base_off, n_layers, n_heads, "base_off")
    # What a switched-off head outputs instead: (L, H, T or 1, dh), or None for 0.
    outputs = Ablation.of(ablation).replacement(model, None, text)
    replace = None if outputs is None else outputs[None]  # (1, L, H, T or 1, dh), used where keep = 0
    base_keep = head_keep_mask(frozenset(base_off), n_layers, n_heads)  # (L, H)
    heads = [(layer, head) for layer in range(n_layers) for head in range(n_heads) if (layer, head) not in base_off]
    # Only the logits at `position` are read: the model computes just those (B, 1, V), and skips the layers before
    # the first head a batch switches off (see Model.run_batch_keep); the numbers are the same.
    at = [position] if model.info.kind != "encoder" else None
    base_out, base_logits = model.run_batch_keep(text, base_keep[None], replace, at)  # (1, T, D), (1, 1, V) or None
    scores = torch.zeros(n_layers, n_heads)  # (L, H)
    chunk = chunk or model.wave_rows(model.token_count(text))
    for start in range(0, len(heads), chunk):
        part = heads[start:start + chunk]
        keep = base_keep.repeat(len(part), 1, 1)  # (B, L, H)
        for row, (layer, head) in enumerate(part):
            keep[row, layer, head] = 0.0
        outs, logits = model.run_batch_keep(text, keep, replace, at)  # (B, T, D), (B, 1, V) or None
        if base_logits is not None:
            values = kl_batch(base_logits[0, 0], logits[:, 0])  # (B,)
        else:
            values = one_minus_cos_batch(base_out[0], outs)  # (B,)
        for (layer, head), value in zip(part, values.tolist()):
            scores[layer, head] = max(value, 0.0)  # float noise can make 1 - cos a hair below 0
        if progress is not None:
            progress(min(1.0, (start + len(part)) / max(len(heads), 1)))
    return scores


def importance_estimate(model: Model, text: str, base_off: frozenset[Head] = frozenset(), position: int = -1,
                        ablation: str = "zero", samples: int = 8, seed: int = 0) -> torch.Tensor:
    """An instant estimate of `head_importance` -> (L, H), from `samples` backward passes instead of one forward
    per head.

    Michel et al. 2019 ("Are Sixteen Heads Really Better than One?") estimate a head's importance by the gradient of
    the loss with respect to a mask variable xi_h that multiplies the head's output (xi = 1: on). We differ because
    our measure is the change of the output, not a loss: KL(p || p_off) (LMs) and 1 - cosine (encoders) are
    minimal where nothing changed, so their gradient there is zero. We take the second-order term instead:
    switching h off moves the logits by dz_h ~ -dz/dxi_h, and KL ~ 1/2 dz_h^T F dz_h with F = diag(p) - p p^T
    (the softmax's Fisher matrix); for encoders 1 - cos ~ 1/2 |dp_h, orthogonal to p|^2 / |p|^2 for the pooled
    embedding p. Both quadratic forms are estimated with random projections (Hutchinson 1989): for u with
    covariance F (or the projector), E[(u . dz_h)^2] = dz_h^T F dz_h, and u . z is one scalar, so one backward
    pass per sample gives every head's term at once (dz_h . u = -sum over positions of (z_h - r_h) . d(u . z)/dz_h,
    r_h what the head outputs when off: 0, its mean, or a resampled output). An estimate, labelled as one: first
    order in the change and sampled; `samples` trades time for noise. Heads in `base_off` score 0.
    """
    n_layers, n_heads = model.n_layers, model.n_heads
    base_off = check_ablate(base_off, n_layers, n_heads, "base_off")
    ablation = Ablation.of(ablation)
    off = ablation.replacement(model, None, text)  # (L, H, T or 1, dh) or None: what a switched-off head outputs
    base = model.run(text, ablate=base_off, ablation=ablation)
    gen = torch.Generator().manual_seed(seed)
    total = torch.zeros(n_layers, n_heads)  # (L, H)
    if base.logits is not None:
        at = position % len(base.tokens)
        s = torch.softmax(base.logits[at], dim=-1).sqrt()  # (V,): F = diag(s) (I - s s^T) diag(s)

        def direction() -> torch.Tensor:
            g = torch.randn(s.shape[0], generator=gen)  # (V,)
            return s * (g - s * (s @ g))  # (V,), covariance F

        def project(u):
            return lambda output, logits: logits[at] @ u
    else:
        pooled = base.output.mean(dim=0)  # (D,): sentence-transformers' mean pooling
        norm = pooled.norm().clamp_min(1e-12)
        unit = pooled / norm

        def direction() -> torch.Tensor:
            g = torch.randn(unit.shape[0], generator=gen)  # (D,)
            return (g - unit * (unit @ g)) / norm  # (D,), covariance: the projector orthogonal to p, over |p|^2

        def project(u):
            return lambda output, logits: output.mean(dim=0) @ u
    for _ in range(samples):
        got = model.head_gradients(text, project(direction()), ablate=base_off, ablation=ablation)
        if got is None:
            raise InputError(f"{model.name} cannot report gradients of head outputs, so there is no estimate")
        outputs, grads = got  # (L, H, T, dh) each
        own = outputs - (0 if off is None else off)  # (L, H, T, dh): z_h - r_h
        total += ((own * grads).sum(dim=(2, 3))) ** 2  # (L, H): (u . dz_h)^2
    estimate = 0.5 * total / samples  # (L, H)
    for layer, head in base_off:
        estimate[layer, head] = 0.0
    return estimate
