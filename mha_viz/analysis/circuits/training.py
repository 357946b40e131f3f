"""Circuits over training: the previous-token head -> induction head path measured at each saved step
(`Formation`, made by `formation` from each step's `Circuits` and pattern scores, or by `measured_formation` from
the steps themselves; `induction_path` finds the two heads by measurement) and `describe_formation`, what that
measurement says in words.

Axis letters: L layer, H head; S saved steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from mha_viz.analysis.circuits.model import Circuits, circuits, induction_and_previous, repeated_texts
from mha_viz.analysis.circuits.weights import MODES, Baseline
from mha_viz.contract import Model
from mha_viz.names import head_name


@dataclass(frozen=True)
class Formation:
    """One model's saved training steps, measured: which heads form the induction path at the last step, and
    how their composition (from the weights) and their patterns (from runs) grew step by step. S = saved steps.

        induction_head   the head of a layer after the first with the highest induction score at the last step
        previous_head    the head of an earlier layer with the highest previous-token attention at the last step
        composition      {"q", "k", "v"}: (S,) composition score previous_head -> induction_head at each step
        induction        (S,) induction_head's induction score; previous (S,) previous_head's previous-token score
        copying          (S,) induction_head's OV copying score (NaN without embeddings)
        top_pair         the highest K-composition pair at the last step (earlier, later, score), found in the
                         weights alone: the same pair as (previous_head, induction_head), or not
    The patterns are measured on `texts` (random words said twice, `repeated_texts`), the same texts at every
    step."""
    name: str
    steps: tuple[int, ...]
    previous_head: tuple[int, int]
    induction_head: tuple[int, int]
    composition: dict[str, torch.Tensor]
    induction: torch.Tensor
    previous: torch.Tensor
    copying: torch.Tensor
    baseline: dict[str, Baseline]
    top_pair: tuple[tuple[int, int], tuple[int, int], float] | None
    texts: tuple[str, ...]

    def first_step_at(self, values: torch.Tensor, fraction: float = 0.5) -> int | None:
        """The first saved step where `values` (S,) has covered `fraction` of its way from its value at the first
        step to its value at the last step; None when it does not rise."""
        v = values.double()
        low = float(v[0])
        rise = float(v[-1]) - low
        if not math.isfinite(rise) or rise <= 0:
            return None
        for step, x in zip(self.steps, v.tolist()):
            if x - low >= fraction * rise:
                return step
        return None


def induction_path(induction: torch.Tensor, previous: torch.Tensor) -> tuple[tuple[int, int], tuple[int, int]]:
    """(previous-token head, induction head) found by measurement, induction and previous (L, H) from
    `induction_and_previous`: the induction head is the highest induction score outside layer 0 (a head of layer 0
    has no earlier head to compose with), the previous-token head the highest previous-token score in a layer before
    it."""
    n_layers, n_heads = induction.shape
    if n_layers < 2:
        raise ValueError("one layer: no earlier head to compose with")
    flat = int(induction[1:].nan_to_num(-1.0).flatten().argmax())
    ind = (1 + flat // n_heads, flat % n_heads)
    flat = int(previous[:ind[0]].nan_to_num(-1.0).flatten().argmax())
    return (flat // n_heads, flat % n_heads), ind


def formation(name: str, steps: list[int], per_step: list[Circuits],
              patterns: list[tuple[torch.Tensor, torch.Tensor]], texts: tuple[str, ...]) -> Formation:
    """`Formation` from each saved step's `circuits` and `induction_and_previous` ((L, H) induction, (L, H)
    previous), in step order. The two heads are found by measurement at the last step (`induction_path`), not named."""
    if not steps or len(per_step) != len(steps) or len(patterns) != len(steps):
        raise ValueError(f"need one Circuits and one pattern measurement per step; got {len(steps)} steps, "
                         f"{len(per_step)} circuits, {len(patterns)} measurements")
    last = per_step[-1]
    prev, ind = induction_path(*patterns[-1])
    pair = prev + ind
    nan = torch.tensor(float("nan"))
    top = last.top_pairs("k", 1)
    return Formation(
        name=name, steps=tuple(steps), previous_head=prev, induction_head=ind,
        composition={m: torch.stack([c.composition[m][pair] for c in per_step]) for m in MODES},  # (S,)
        induction=torch.stack([p[0][ind] for p in patterns]), previous=torch.stack([p[1][prev] for p in patterns]),
        copying=torch.stack([nan if c.copying is None else c.copying[ind] for c in per_step]),
        baseline=last.baseline, top_pair=top[0] if top else None, texts=tuple(texts))


def measured_formation(name: str, steps: list[int], load: Callable[[str], Model]) -> Formation:
    """`formation` over the saved `steps` of `name`, each loaded with `load(f"{name}@{step}")` (kept only while it
    is measured): its circuits, and its heads' induction and previous-token scores on the same repeated random
    texts at every step. What the Circuits and Training views show and the notes' circuits section writes."""
    per_step, patterns, texts = [], [], None
    for step in steps:
        model = load(f"{name}@{step}")
        texts = texts or repeated_texts(model)
        per_step.append(circuits(model))
        patterns.append(induction_and_previous(model, texts))
    return formation(name, steps, per_step, patterns, texts)


RISE_STARTS = 0.1  # the induction score "has started to rise" once it has covered this share of its rise


def describe_formation(f: Formation) -> str:
    """What the measurement says, in words (markdown), every number read from `f`: the two heads, where the
    K-composition and the induction score stand at the first and last step, the first step where each has covered
    half of its rise, which comes first, and how far the K-composition has risen by the last saved step before
    the induction score starts to (has covered RISE_STARTS of its rise)."""
    prev, ind = head_name(f.previous_head), head_name(f.induction_head)
    k, base = f.composition["k"], f.baseline["k"]
    k_half = f.first_step_at(k)
    i_half = f.first_step_at(f.induction)
    first, last = f.steps[0], f.steps[-1]
    text = (f"**{f.name}**: {prev} attends most to the previous token at step {last} "
            f"({float(f.previous[-1]):.0%}), and {ind} has the highest induction score ({float(f.induction[-1]):.0%}). "
            f"The K-composition {prev} → {ind} is {float(k[0]):.3f} at step {first} and {float(k[-1]):.3f} at step "
            f"{last} (random matrices: {base.mean:.3f}, 99th percentile {base.p99:.3f}); {ind}'s induction score "
            f"goes from {float(f.induction[0]):.0%} to {float(f.induction[-1]):.0%}.")
    if k_half is None or i_half is None:
        what = "the K-composition" if k_half is None else "the induction score"
        return text + f" {what[0].upper() + what[1:]} does not rise over these steps."
    text += (f" The K-composition has covered half of its rise by step {k_half}, the induction score by step "
             f"{i_half}: ")
    if k_half < i_half:
        text += "in these saved steps the K-composition rises first, the induction score after it."
    elif k_half > i_half:
        text += "in these saved steps the induction score rises first, the K-composition after it."
    else:
        text += "both by the same saved step, so these steps cannot tell which comes first."
    starts = f.first_step_at(f.induction, RISE_STARTS)
    at = f.steps.index(starts) if starts is not None else 0
    if at > 0:  # the last saved step before the induction score has covered RISE_STARTS of its rise

        def share(v: torch.Tensor) -> float:
            return (float(v[at - 1]) - float(v[0])) / (float(v[-1]) - float(v[0]))

        k_share = share(k)
        # Past 100%: the K-composition stood above its final value then, and came back down by the last step.
        k_said = (f"covered {k_share:.0%} of its" if k_share <= 1 else
                  f"already passed its final value ({k_share:.0%} of its rise, falling back by step {last})")
        text += (f" At step {f.steps[at - 1]}, the last saved step before the induction score has covered "
                 f"{RISE_STARTS:.0%} of its rise (it has covered {share(f.induction):.0%}), the K-composition has "
                 f"{k_said}.")
    if f.top_pair is not None:
        (a, b, score) = f.top_pair
        same = (a, b) == (f.previous_head, f.induction_head)
        text += (f" In the weights alone, the highest K-composition pair at step {last} is "
                 f"{head_name(a)} → {head_name(b)} ({score:.3f}){': the same two heads' if same else ''}.")
    return text
