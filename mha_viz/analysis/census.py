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


# -- the one naming rule ---------------------------------------------------------------------------------------------
# A head must beat its control by this share of the way from the control to the score's notable end (1 for a share
# of attention or confidence, 0 for spread and distance), at the low end of the paired interval: a head whose
# control puts 10% of attention on BOS must put more than 55% there. A fixed share (0.1) named heads that only spread
# a third of their attention on a pattern (a compiled histogram head: 33% on BOS, 33% on the same token earlier);
# half the way asks that the pattern hold most of what the control leaves. A head that reads a fixed offset scores
# the same on repeated inputs and their unrepeated twins (the same positions): its paired difference is 0.
CONTROL_SHARE = 0.5
# A head ties with the leader while the paired interval of (leader - head) reaches below this: two points of
# attention share, under what the page shows as a difference (two decimals), above float error between two heads a
# program wrote alike (1e-7).
TIE_TOLERANCE = 0.02


@dataclass(frozen=True)
class Naming:
    """Which heads the census names for one score, and the paired intervals that decided it (`name_heads`).

    against_low/high: the bootstrap interval of (head - its control), paired over the same inputs, in the score's
    notable direction (L, H), and margin what its low end must pass (L, H); gap_low/high: of (leader - head),
    likewise (L, H; NaN without a leader); named: the heads named, best first; leader: the best head that beats its
    control, or None; n: the inputs both were read on.
    """
    named: tuple[tuple[int, int], ...]
    leader: tuple[int, int] | None
    against_low: torch.Tensor
    against_high: torch.Tensor
    gap_low: torch.Tensor
    gap_high: torch.Tensor
    n: int
    margin: torch.Tensor  # (L, H): what against_low must exceed (`CONTROL_SHARE` of the way to the notable end)

    @property
    def beats(self) -> torch.Tensor:
        """(L, H) bool: the heads whose paired difference from the control lies above their margin."""
        return self.against_low > self.margin

    @property
    def tie(self) -> bool:
        return len(self.named) > 1


def name_heads(values: torch.Tensor, control: torch.Tensor, lower_is_notable: bool = False, seed: int = 0,
               n_boot: int = 200, level: float = 0.95) -> Naming:
    """The one naming rule. values, control: (N, L, H) per input, the control paired with the input it was read
    beside (the same input on the untrained twin, the input with its relation destroyed, or what uniform attention
    scores on it); an input where either is NaN is left out. A head is named when, and only when:

    1. it beats its control: the low end of the paired bootstrap interval of (head - control) lies above
       `CONTROL_SHARE` of the way from the head's mean control to the score's notable end (1, or 0 for a score whose
       low end is notable, read as control - head);
    2. it is not clearly below the leader (the best head that beats its control): the low end of the paired bootstrap
       interval of (leader - head), resampled over the same inputs, lies at or below `TIE_TOLERANCE`;
    3. no head that beats its control and scores higher is left out (monotone: every such head at or above the lowest
       head named by 1 and 2 is named too).

    The resamples are the same inputs for every head (paired), seeded, so the same census names the same heads; the
    set does not depend on the order heads are listed in (the leader's own gap is 0, and a head tied with it
    exactly has gap 0 too)."""
    if values.shape != control.shape or values.dim() != 3:
        raise ValueError(f"values and control must both be (N, L, H) per input; got {tuple(values.shape)} and "
                         f"{tuple(control.shape)}")
    flat = lambda t: t.flatten(1)  # noqa: E731  (N, L*H)
    keep = ~(torch.isnan(flat(values)).all(1) | torch.isnan(flat(control)).all(1))  # (N,)
    v, c = values[keep].double(), control[keep].double()  # (n, L, H) each
    sign = -1.0 if lower_is_notable else 1.0
    shape = values.shape[1:]
    nan = torch.full(shape, float("nan"))
    n = v.shape[0]
    if n == 0:
        return Naming((), None, nan, nan.clone(), nan.clone(), nan.clone(), 0, nan.clone())
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, n, (n_boot, n), generator=gen)  # (B, n): the same resamples for every head
    alpha = (1 - level) / 2

    def interval(d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        boot = d.nan_to_num(0.0)[idx].mean(1)  # (B, L, H); a head NaN on an input counts it as no difference
        return torch.quantile(boot, alpha, dim=0).float(), torch.quantile(boot, 1 - alpha, dim=0).float()

    against_low, against_high = interval(sign * (v - c))  # (L, H) each
    end = 0.0 if lower_is_notable else 1.0
    margin = (CONTROL_SHARE * (end - c.nanmean(0)).abs()).float()  # (L, H)
    score = sign * v.mean(0)  # (L, H): higher is more notable
    beats = (against_low > margin) & ~torch.isnan(score)  # (L, H)
    if not beats.any():
        return Naming((), None, against_low, against_high, nan, nan.clone(), n, margin)
    ranked = sorted((tuple(lh) for lh in beats.nonzero().tolist()), key=lambda lh: (-float(score[lh]), lh))
    leader = ranked[0]
    gap_low, gap_high = interval(sign * (v[:, leader[0], leader[1]][:, None, None] - v))  # (L, H) each
    tied = [lh for lh in ranked if float(gap_low[lh]) <= TIE_TOLERANCE]
    floor = min(float(score[lh]) for lh in tied)
    named = tuple((int(l), int(h)) for l, h in ranked if float(score[l, h]) >= floor)
    return Naming(named, (int(leader[0]), int(leader[1])), against_low, against_high, gap_low, gap_high, n, margin)


def drop_lost(drop: float, ablated_drop: float) -> float:
    """The share of the in-context loss drop (the first copy's loss minus the second copy's; Olsson et al. 2022
    compare the loss late and early in the context, we compare the two copies of a repeated random sequence) that
    is gone when heads are switched off: 1 = all of it, 0 = none, NaN when there was no drop to lose."""
    if not drop > 0:
        return float("nan")
    return (drop - ablated_drop) / drop
