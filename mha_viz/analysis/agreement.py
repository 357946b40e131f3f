"""One input against the census: whether what a head does on this sentence agrees with the name the census gave it.

The census names a head for a score by the one naming rule (`HeadCensus.named`: it beats its control over many
inputs, is not clearly below the leader, and no higher head is left out). A reading on one input is weaker
evidence: it says how many queries it averaged over (`measures.Measure.support`), and below
`measures.SUPPORT_FLOOR` it says too little to check anything.
These functions put the two side by side in words, for the Layer view, Inside a head and the Lesson.
"""
from __future__ import annotations

import math

import torch

from mha_viz import measures as M
from mha_viz.names import head_name

Head = tuple[int, int]
# Two heads whose readings on one input differ by less than this are read as level on it: one input's noise, not a
# disagreement with the census.
LEVEL = 0.05


def census_roles(census, head: Head) -> list[str]:
    """The one-input measures (shares of attention, notable when high: what a badge shows) for which the census
    names `head`, read on the census's own input set or on natural text, in registry order."""
    roles = []
    for name in census.names:
        m, _ = M.of_score(name)
        if m.name in M.BADGES and m.name not in roles and any(h == head for h, _ in census.named(name)):
            roles.append(m.name)
    return roles


def census_heads(census, measure: str) -> list[Head]:
    """The heads the census names for `measure` on its own input set ([] where it does not read it)."""
    m = M.REGISTRY[measure]
    if not m.census:
        return []
    return [h for h, _ in census.named(M.score_name(measure, m.census[0]))]


def agreement(census, measure: str, scores: dict[str, torch.Tensor], support: dict[str, int]) -> str:
    """One sentence: does this input's reading of `measure` (scores (L, H) from `run_scores`, support from
    `run_support`) agree with the heads the census names for it?"""
    label = M.REGISTRY[measure].label
    named = census_heads(census, measure)
    n = support.get(measure, 0)
    if not named:
        return f"The census names no head for {label}."
    who = " and ".join(head_name(h) for h in named)
    lead = "the census's {} head{} {}".format(label, "s" if len(named) > 1 else "", who)
    if n < M.SUPPORT_FLOOR:
        return (f"This input cannot check {lead}: {M.TOO_FEW} for {label} ({M.queries_words(n)}; a reading needs "
                f"{M.SUPPORT_FLOOR}).")
    values = scores[measure]  # (L, H)
    flat = values.nan_to_num(float("-inf")).flatten()
    top = divmod(int(flat.argmax()), values.shape[1])
    best = float(flat.max())
    if math.isinf(best):
        return f"This input cannot check {lead}: {label} is not measurable on it."
    mine = max(float(values[h]) for h in named)
    if best - mine < LEVEL:
        return (f"This input agrees with {lead}: {mine:.0%} on {label} over {M.queries_words(n)}, level with the "
                "highest of any head.")
    return (f"On this input {head_name(top)} scores higher on {label} ({best:.0%}, over {M.queries_words(n)}) than "
            f"{lead} ({mine:.0%}): one sentence, against the census's many inputs.")


def head_agreement(census, head: Head, scores: dict[str, torch.Tensor], support: dict[str, int]) -> list[str]:
    """Sentences for one head: each role the census names it for, read on this input; or that it names none."""
    roles = census_roles(census, head)
    if not roles:
        return [f"The census names no role for {head_name(head)}: on no score does it beat its control while level "
                "with the leading head."]
    out = []
    for measure in roles:
        label = M.REGISTRY[measure].label
        n = support.get(measure, 0)
        if n < M.SUPPORT_FLOOR:
            out.append(f"The census names {head_name(head)} for {label}; this input has {M.TOO_FEW} to check it "
                       f"({M.queries_words(n)}).")
            continue
        v = float(scores[measure][head])
        others = [h for h in census_heads(census, measure) if h != head]
        values = scores[measure].nan_to_num(float("-inf"))  # (L, H)
        best = float(values.max())
        top = divmod(int(values.flatten().argmax()), values.shape[1])
        tie = f" (tied in the census with {', '.join(head_name(h) for h in others)})" if others else ""
        if best - v < LEVEL:
            out.append(f"The census names {head_name(head)} for {label}{tie}; this input agrees: {v:.0%} over "
                       f"{M.queries_words(n)}, level with the highest of any head.")
        else:
            out.append(f"The census names {head_name(head)} for {label}{tie}; on this input {head_name(top)} scores "
                       f"higher ({best:.0%} against {v:.0%}, over {M.queries_words(n)}).")
    return out
