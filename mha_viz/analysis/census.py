"""Pure scorers of the head census: what each head does over many inputs made for the question, against chance.

Each scorer takes one input's attention (L, H, T, T) and the positions the question is about, and returns one
value per head (L, H) together with what uniform attention over the allowed keys would score on the same
positions, so a head counts only as far as it beats that. `summarise` pools the per-input values of many inputs
into a mean and a bootstrap interval over inputs (Efron 1979: resample the inputs with replacement).

Every score is a registered measure (`mha_viz.measures`: its function, baseline, words and source, one entry
each), read on the input set the census makes for it; this module only pools them and adds what the census alone
needs: Clark et al. 2019's fixed-offset baselines of the dependency relations, the bootstrap, and the share of the
in-context loss drop that switching heads off loses.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from mha_viz import measures as M
from mha_viz.analysis._checks import attention as _attention

Pair = tuple[int, int]  # (query position, key position)
OFFSETS = tuple(k for k in range(-5, 6) if k != 0)  # Clark et al.'s fixed-offset baselines: the word k away


def _att(att: torch.Tensor) -> torch.Tensor:
    return _attention(att, "att", (4,), "(L, H, Q, K)")


def input_scores(att: torch.Tensor, positions: M.Positions, inputs: str) -> dict[str, tuple[torch.Tensor, float]]:
    """Every registered measure the census reads on the input set `inputs` ("random", "texts", "repeated",
    "templates"), on one input -> {census score name: ((L, H), uniform baseline)}. A relation of the templates is
    scored only where the input has gold pairs of it (`positions.gold`, set per relation by the caller)."""
    att = _att(att)
    return {M.score_name(m.name, inputs): m.measure(att, positions) for _, m, on in M.census_scores()
            if on == inputs and m.needs == "tokens"}


def offset_accuracy(pairs: Sequence[Pair]) -> dict[int, float]:
    """Clark et al.'s fixed-offset baselines on one input's pairs: for each offset k in OFFSETS, the share of pairs
    whose gold key is the query's position + k."""
    if not pairs:
        return {k: float("nan") for k in OFFSETS}
    return {k: sum(1.0 for q, g in pairs if g - q == k) / len(pairs) for k in OFFSETS}


def best_offset(per_input: Sequence[dict[int, float]]) -> tuple[int, float]:
    """The one offset that is right most often, averaged over inputs as the head scores are, and its accuracy."""
    totals = {k: [d[k] for d in per_input if not math.isnan(d[k])] for k in OFFSETS}
    means = {k: sum(v) / len(v) for k, v in totals.items() if v}
    if not means:
        return 0, float("nan")
    k = max(means, key=lambda o: (means[o], -abs(o)))
    return k, means[k]


# -- pooling over inputs ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pooled:
    """One score over many inputs: the mean (L, H) over inputs where it is measurable, a bootstrap interval over
    inputs, the uniform baseline averaged the same way, and how many inputs counted."""
    mean: torch.Tensor  # (L, H)
    low: torch.Tensor  # (L, H)
    high: torch.Tensor  # (L, H)
    uniform: float
    n: int


def summarise(values: Sequence[torch.Tensor], uniforms: Sequence[float], seed: int = 0, n_boot: int = 200,
              level: float = 0.95) -> Pooled:
    """Pool per-input values (each (L, H)) and their uniform baselines: NaN inputs (the score not measurable
    there) are left out. The interval is the percentile bootstrap over inputs (`n_boot` resamples, seeded)."""
    keep = [i for i, v in enumerate(values) if not bool(torch.isnan(v).all())]
    if not keep:
        shape = values[0].shape if len(values) else (0, 0)
        nan = torch.full(shape, float("nan"))
        return Pooled(nan, nan.clone(), nan.clone(), float("nan"), 0)
    stack = torch.stack([values[i] for i in keep])  # (N, L, H)
    n = stack.shape[0]
    mean = stack.mean(0)  # (L, H)
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (n_boot, n), generator=gen)  # (B, N)
    boot = stack[idx].mean(1)  # (B, L, H)
    alpha = (1 - level) / 2
    low, high = torch.quantile(boot, alpha, dim=0), torch.quantile(boot, 1 - alpha, dim=0)  # (L, H) each
    uniform = sum(uniforms[i] for i in keep) / len(keep)
    return Pooled(mean, low, high, float(uniform), n)


def drop_lost(drop: float, ablated_drop: float) -> float:
    """The share of the in-context loss drop (the first copy's loss minus the second copy's; Olsson et al. 2022
    compare the loss late and early in the context, we compare the two copies of a repeated random sequence) that
    is gone when heads are switched off: 1 = all of it, 0 = none, NaN when there was no drop to lose."""
    if not drop > 0:
        return float("nan")
    return (drop - ablated_drop) / drop
