"""The Lesson's steps: one claim of multi-head attention each, shown on a live model and told from numbers measured
on that run. Every head a step names is found by a measurement, never typed, so a step follows when the student's
input or the lesson's model changes.

A step is a `Step` (title, claim, default input, which model, the question it asks first) and one function that
draws it under the lesson's frame (views/lesson.py): the figure, what to look at, one thing to try with what
changed, and "what you just saw". The learned model is `learned` (the tiny recipe or one of its seeds,
`?lesson_model=`); the written step uses a model a program wrote (Tracr), where a head's label is true by
construction.

The steps live in app/lesson/ by what they hold: `readings` (measurements, roles and their words, the glossary),
`syllabus` (each step's title, claim and prepared input), `frame` (a step's record, its question, the pieces it
draws with), `heads` (steps 1-3), `combining` (step 4), `pathways` (steps 5-6) and `closing` (step 7). This module
pairs the outline with the drawings and is imported by none of them; it re-exports what the page and the tests
read."""
from __future__ import annotations

import streamlit as st

from mha_viz.app.cache import side_model
from mha_viz.app.common import md_safe
from mha_viz.app.lesson.closing import draw_closing
from mha_viz.app.lesson.combining import draw_combining, question_combining
from mha_viz.app.lesson.frame import (  # noqa: F401  (read by the page)
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
from mha_viz.app.lesson.syllabus import OUTLINE
from mha_viz.contract import InputError, Model

# How each step of the outline draws: (draw, question, intro), in the outline's order.
_DRAWN = (
    (draw_parallel, question_parallel, attention_intro),
    (draw_projections, question_projections, None),
    (draw_patterns, question_patterns, None),
    (draw_combining, question_combining, None),
    (draw_written, question_written, None),
    (draw_learned, question_learned, None),
    (draw_closing, None, None),
)
STEPS: list[Step] = [Step(o.title, o.claim, o.text, draw, written=o.written, question=question, intro=intro)
                     for o, (draw, question, intro) in zip(OUTLINE, _DRAWN, strict=True)]


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

