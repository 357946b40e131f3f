"""The Lesson's steps: one claim of multi-head attention each, shown on a live model and told from numbers measured
on that run. Every head a step names is found by a measurement, never typed, so a step follows when the student's
input or the lesson's model changes.

A step is a `Step` (title, claim, default input, which model, the question it asks first) and one function that
draws it under the lesson's frame (views/lesson.py): the figure, what to look at, one thing to try with what
changed, and "what you just saw". The learned model is `learned` (the tiny recipe or one of its seeds,
`?lesson_model=`); the written step uses a model a program wrote (Tracr), where a head's label is true by
construction.

The steps live in app/lesson/ by what they hold: `readings` (measurements, roles and their words, the glossary),
`frame` (a step's record, its question, the pieces it draws with), `heads` (steps 1-3), `combining` (step 4),
`pathways` (steps 5-6) and `closing` (step 7). This module lists them, and re-exports what the page and the tests
read."""
from __future__ import annotations

import streamlit as st

from mha_viz.app.cache import side_model
from mha_viz.app.common import md_safe
from mha_viz.app.lesson.closing import draw_closing
from mha_viz.app.lesson.combining import draw_combining, question_combining
from mha_viz.app.lesson.frame import (  # noqa: F401  (read by the page)
    ALL_STEPS,
    ANSWERS,
    SHARED,
    TYPED,
    Question,
    Step,
    ask,
    column_px,
    hover_hook,
    step_text,
    watch_column,
)
from mha_viz.app.lesson.heads import (
    attention_intro,
    draw_parallel,
    draw_patterns,
    draw_projections,
    question_parallel,
    question_patterns,
    question_projections,
)
from mha_viz.app.lesson.pathways import draw_learned, draw_written, question_learned, question_written, written_input
from mha_viz.app.lesson.readings import (  # noqa: F401
    GLOSSARY,
    PATTERNED,
    ROLES,
    TEXT_PARALLEL,
    TEXT_PREDICT,
    TEXT_REPEAT,
    TEXT_WRITTEN,
    WRITTEN,
    plain,
    unknown_words,
)
from mha_viz.contract import InputError, Model

STEPS: list[Step] = [
    Step("Heads run in parallel", "A layer's heads all read the same tokens at the same time; none waits for "
         "another's result.", TEXT_PARALLEL, draw_parallel, question=question_parallel,
         intro=attention_intro),
    Step("Each head has its own projections", "Each head turns the same token into its own query, key and value "
         "with its own learned matrices, so the same input gives different scores.", TEXT_PARALLEL, draw_projections,
         question=question_projections),
    Step("Heads learn different relations", "Trained heads come to attend by different relations: nearby context, "
         "a term seen before, a fixed place, and a relation of grammar such as a verb's subject.", TEXT_REPEAT,
         draw_patterns, question=question_patterns),
    Step("The outputs are combined", "Each head's output goes through its slice of the output projection, and the "
         "layer's output is their sum.", TEXT_PARALLEL, draw_combining, question=question_combining),
    Step("Written heads are labeled modules", "In a model compiled from a program each head does what one line "
         "wrote: the one case where a head's label is true.", TEXT_WRITTEN, draw_written, written=True,
         question=question_written),
    Step("Learned heads are pathways, not labels", "The same recipe puts the roles on different heads, and a head "
         "with a strong pattern can matter little: attention is not importance.", TEXT_PREDICT, draw_learned,
         question=question_learned),
    Step("What to take away", "Multi-head attention is several learned pathways side by side; measure what a head "
         "does before naming it.", "", draw_closing),
]
ALL_STEPS[:] = STEPS


def run_step(step: Step, learned: str, text: str, n: int) -> None:
    """Draw one step, or say why its input cannot be run (a word the written program does not know, too long)."""
    hover_hook()
    try:
        if step.written and step.text:
            text = written_input(text, n, step.text)
        if step.intro is not None:
            step.intro(learned, text)
        if step.question is not None and not ask(str(n), step.question(learned, text)):
            return
        step.draw(learned, text, n)
    except InputError as err:
        st.warning(md_safe(str(err)))


def model_of(step: Step, learned: str) -> Model:
    return side_model(WRITTEN if step.written else learned)

