"""How much switching heads off changed the output: embedding cosine, per-token change, KL of predictions.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from mha_viz.analysis._checks import position_mask as _position_mask
from mha_viz.analysis._checks import same_shape as _same_shape
from mha_viz.analysis._checks import tensor as _tensor


def _mean_pool(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean over the kept token positions of x (..., T, D)."""
    if not keep.any():
        raise ValueError("mask selects no positions: keep at least one token in the sentence embedding")
    w = keep.float() / keep.sum()  # (T,)
    return torch.einsum("...td,t->...d", x, w)  # (..., D)


def cosine_change(out_a: torch.Tensor, out_b: torch.Tensor, mask=None) -> float:
    """Cosine similarity of the sentence embeddings of two runs (1.0 = unchanged direction).

    The sentence embedding is the mean of the final hidden states over the positions in `mask` (all if
    None), as sentence-transformers pools all-MiniLM-L6-v2 (Reimers & Gurevych 2019, "Sentence-BERT").
    Its later L2 normalisation does not change a cosine. Head ablation as a probe follows Michel, Levy &
    Neubig 2019, "Are Sixteen Heads Really Better than One?".

    out_a, out_b: (T, D) final hidden states, e.g. baseline `run.output` and ablated `run.output`.
    mask: optional (T,) bool, True for positions to include in the mean.
    """
    a = _tensor(out_a, "out_a", (2,), "(T, D)")
    b = _tensor(out_b, "out_b", (2,), "(T, D)")
    _same_shape(a, b, "out_a", "out_b")
    keep = _position_mask(mask, a.shape[0], "mask")  # (T,)
    return float(F.cosine_similarity(_mean_pool(a, keep), _mean_pool(b, keep), dim=0))


def one_minus_cos_batch(out_base: torch.Tensor, outs: torch.Tensor, mask=None) -> torch.Tensor:
    """1 - `cosine_change(out_base, outs[i], mask)` for every run i of a batch, in one go -> (B,).

    Used for the head-importance map: one batched forward ablates one head per batch row.
    out_base: (T, D) baseline hidden states; outs: (B, T, D), e.g. from `Model.run_batch_keep`.
    """
    base = _tensor(out_base, "out_base", (2,), "(T, D)")
    batch = _tensor(outs, "outs", (3,), "(B, T, D)")
    _same_shape(base, batch[0], "out_base", "each outs[i]")
    keep = _position_mask(mask, base.shape[0], "mask")  # (T,)
    e_base = _mean_pool(base, keep)  # (D,)
    e_batch = _mean_pool(batch, keep)  # (B, D)
    return 1.0 - F.cosine_similarity(e_batch, e_base[None, :], dim=-1)  # (B,)


def token_change(out_a: torch.Tensor, out_b: torch.Tensor, relative: bool = False) -> torch.Tensor:
    """Per-token L2 norm of the change in final hidden state, ||out_b[t] - out_a[t]|| -> (T,).

    With relative=True each norm is divided by ||out_a[t]||, so out_a must be the baseline run.
    Heads are switched off as in Michel, Levy & Neubig 2019; this per-token view of the effect is the app's
    own, not theirs.
    """
    a = _tensor(out_a, "out_a", (2,), "(T, D)")
    b = _tensor(out_b, "out_b", (2,), "(T, D)")
    _same_shape(a, b, "out_a", "out_b")
    change = (b - a).norm(dim=-1)  # (T,)
    if relative:
        change = change / a.norm(dim=-1).clamp_min(1e-12)  # (T,)
    return change


def _kl_from_logits(base: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """KL(softmax(base) || softmax(other)) in nats over the last axis; (..., V) -> (...)."""
    log_p = F.log_softmax(base, dim=-1)  # (..., V)
    log_q = F.log_softmax(other, dim=-1)  # (..., V)
    return (log_p.exp() * (log_p - log_q)).sum(-1).clamp_min(0.0)  # (...)


def _at_position(logits: torch.Tensor, position: int, name: str) -> torch.Tensor:
    """Pick one position from (..., T, V) logits."""
    t = logits.shape[-2]
    if not -t <= position < t:
        raise ValueError(f"position {position} is out of range for {name} with {t} positions; "
                         f"use -1 for the last token")
    return logits[..., position, :]  # (..., V)


def next_token_kl(logits_a: torch.Tensor, logits_b: torch.Tensor, position: int = -1) -> float:
    """KL(p_base || p_ablated) in nats between next-token distributions at one position.

    p = softmax(logits). logits_a is the baseline, logits_b the ablated run; both (V,) or both (T, V),
    in which case `position` picks the row (default: the last token, whose prediction is the next token).
    KL divergence: Kullback & Leibler 1951. Michel, Levy & Neubig 2019 measure an ablation by the change in a
    task score; KL of the prediction needs no label.
    """
    a = _tensor(logits_a, "logits_a", (1, 2), "(V,) or (T, V)")
    b = _tensor(logits_b, "logits_b", (1, 2), "(V,) or (T, V)")
    _same_shape(a, b, "logits_a", "logits_b")
    if a.ndim == 2:
        a, b = _at_position(a, position, "logits_a"), _at_position(b, position, "logits_b")  # (V,)
    return float(_kl_from_logits(a, b))


def kl_batch(logits_base: torch.Tensor, logits_batch: torch.Tensor, position: int = -1) -> torch.Tensor:
    """`next_token_kl(logits_base, logits_batch[i], position)` for every run i of a batch -> (B,).

    logits_base: (V,) or (T, V); logits_batch: (B, V) or (B, T, V), e.g. from `Model.run_batch_keep`.
    """
    base = _tensor(logits_base, "logits_base", (1, 2), "(V,) or (T, V)")
    batch = _tensor(logits_batch, "logits_batch", (2, 3), "(B, V) or (B, T, V)")
    if batch.ndim != base.ndim + 1:
        raise ValueError(f"logits_batch must be logits_base's shape with a leading batch axis; got "
                         f"{tuple(base.shape)} and {tuple(batch.shape)}")
    _same_shape(base, batch[0], "logits_base", "each logits_batch[i]")
    if base.ndim == 2:
        base = _at_position(base, position, "logits_base")  # (V,)
        batch = _at_position(batch, position, "logits_batch")  # (B, V)
    return _kl_from_logits(base[None, :].expand_as(batch), batch)  # (B,)


def topk_predictions(logits: torch.Tensor, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """The k most probable tokens under softmax(logits): (probs (k,), ids (k,)), most probable first.

    logits: (V,), e.g. `run.logits[-1]` for a causal LM's next token.
    """
    x = _tensor(logits, "logits", (1,), "(V,); pick a position first, e.g. run.logits[-1]")
    if not 1 <= k <= x.shape[0]:
        raise ValueError(f"k must be between 1 and the vocabulary size {x.shape[0]}; got {k}")
    probs, ids = torch.softmax(x, dim=-1).topk(k)  # (k,), (k,)
    return probs, ids
