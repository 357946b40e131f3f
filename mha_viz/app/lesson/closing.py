"""Lesson step 7: what to take away, three check-yourself questions answered on the student's own inputs, and
the views to go on with."""
from __future__ import annotations

import streamlit as st

from mha_viz.app import state
from mha_viz.app.common import head_name
from mha_viz.app.lesson.frame import (
    MOVED,
    Question,
    ask,
    off_moves,
    step_text,
)
from mha_viz.app.lesson.pathways import quiet_and_loud
from mha_viz.app.lesson.readings import (
    layer_previous,
    lesson_importance,
    lesson_inside,
    lesson_run,
    read,
    tok,
)
from mha_viz.app.lesson.syllabus import OUTLINE

# Plain choices: the reason is the measured answer's to give (`why`), never the wording's.
YES_NO_SAME = ("Yes", "No")
YES_NO_KEY = ("Yes: every head weights the same key most", "No: not every head weights the same key most")
YES_NO_LOUD = ("Yes", "No")
NEXT_VIEWS = {"Layer": "every head of a layer on your sentence",
              "Inside a head": "queries, keys, values and the sum of the heads",
              "Census": "what each head does across many inputs",
              "Ablation effects": "which heads matter"}


def check_questions(name: str) -> list[Question]:
    """Three short questions drawn from steps 1, 2 and 6, answered by measurements on the inputs the student gave
    those steps (their typed sentences, else the prepared ones)."""
    one, two, six = step_text(1), step_text(2), step_text(6)
    prev, _ = layer_previous(name, read(name, lesson_run(name, one)), 0)
    same, _ = off_moves(name, one, prev)
    run2, inside = lesson_run(name, two), lesson_inside(name, two, 0)
    query = [i for i in range(len(run2.tokens)) if i not in set(run2.special)][-1]
    tops = [int(h.weights[query].argmax()) for h in inside]
    quiet, loudest = quiet_and_loud(name, six)
    importance = lesson_importance(name, six)
    return [
        Question("In one layer, if one head is switched off, do the layer's other heads change their patterns?",
                 YES_NO_SAME, YES_NO_SAME[0] if same >= MOVED else YES_NO_SAME[1],
                 f"On your step 1 input, with {head_name(prev)} off, the other heads of layer 0 moved by at most "
                 f"{same:.3f} in any weight."),
        Question("Given the same token, do all heads of a layer put their largest weight on the same key?",
                 YES_NO_KEY, YES_NO_KEY[0] if len(set(tops)) == 1 else YES_NO_KEY[1],
                 f"On your step 2 input, for token {query}, {tok(run2.tokens[query])}, the heads of layer 0 weight "
                 f"{len(set(tops))} different key{'s' if len(set(tops)) > 1 else ''} most: "
                 + ", ".join(f"{head_name((0, h))} key {k}" for h, k in enumerate(tops))
                 + (f"; {max(tops.count(k) for k in tops)} of {len(tops)} share one key." if len(set(tops)) > 1
                    else ".")),
        Question("Is the head with a strong, clear pattern always the one whose removal changes the prediction "
                 "most?", YES_NO_LOUD, YES_NO_LOUD[0] if quiet == loudest else YES_NO_LOUD[1],
                 f"On your step 6 input, switching off {head_name(quiet)} (a strongly patterned head) moves the "
                 f"prediction by KL {float(importance[quiet]):.3f}; {head_name(loudest)}, by "
                 f"{float(importance[loudest]):.3f}, the most."),
    ]


def draw_closing(name: str, text: str, n: int) -> None:
    st.markdown("\n".join(f"{i}. **{s.title}.** {s.claim}" for i, s in enumerate(OUTLINE[:-1], 1)))
    st.markdown("##### Check yourself")
    st.caption("Three questions from the steps. Each answer is measured on the inputs you gave those steps; "
               "nothing is kept beyond this session and its link.")
    for i, q in enumerate(check_questions(name), 1):
        ask(f"check_{i}", q, label=f"Question {i}", reveals="the measured answer and why")
    st.markdown("Every number in these steps was measured on the run in front of you; change the lesson's model "
                "above to another seed and the heads named follow it. Go on with the views:")
    for view, what in NEXT_VIEWS.items():
        left, right = st.columns([2, 3], vertical_alignment="center")
        left.button(view, key=f"lesson_open_{view}", type="tertiary", on_click=state.set_view, args=(view,),
                    icon=":material/arrow_forward:")
        right.caption(what)

