"""The Lesson's outline: each step's title, the claim it teaches, its prepared input and whether it runs on the
written model, in order. Plain data, so the parts that read other steps' words (the closing step's list of claims,
`frame.step_text`'s inputs) import it without importing the steps that draw them (`steps.py`, which imports them)."""
from __future__ import annotations

from dataclasses import dataclass

from mha_viz.app.lesson.readings import TEXT_PARALLEL, TEXT_PREDICT, TEXT_REPEAT, TEXT_WRITTEN


@dataclass(frozen=True)
class Outline:
    title: str
    claim: str
    text: str  # the prepared input; "" for a step with no input of its own
    written: bool = False  # runs on the written model, not the lesson's learned one


OUTLINE: tuple[Outline, ...] = (
    Outline("Heads run in parallel", "A layer's heads all read the same tokens at the same time; none waits for "
            "another's result.", TEXT_PARALLEL),
    Outline("Each head has its own projections", "Each head turns the same token into its own query, key and value "
            "with its own learned matrices, so the same input gives different scores.", TEXT_PARALLEL),
    Outline("Heads learn different relations", "Trained heads come to attend by different relations: nearby "
            "context, a term seen before, a fixed place, and a relation of grammar such as a verb's subject.",
            TEXT_REPEAT),
    Outline("The outputs are combined", "Each head's output goes through its slice of the output projection, and the "
            "layer's output is their sum.", TEXT_PARALLEL),
    Outline("Written heads are labeled modules", "In a model compiled from a program each head does what one line "
            "wrote: the one case where a head's label is true.", TEXT_WRITTEN, written=True),
    Outline("Learned heads are pathways, not labels", "The same recipe puts the roles on different heads, and a head "
            "with a strong pattern can matter little: attention is not importance.", TEXT_PREDICT),
    Outline("What to take away", "Multi-head attention is several learned pathways side by side; measure what a head "
            "does before naming it.", ""),
)
