"""Lesson: multi-head attention taught claim by claim on live models (the steps are in app/lesson/steps.py).

The step and the lesson's learned model are plain session keys carried in the URL (`?lesson=N`, 1-based, and
`?lesson_model=`), read once with the rest of the link and written by state.write_url, so a reload keeps the
student's place. The widgets keep their own keys and copy into those: a widget's state is dropped on a run that
does not draw it, and the student may visit another view and come back."""
from __future__ import annotations

import html
import re

import streamlit as st

from mha_viz.app import reconnect, state
from mha_viz.app.common import LEARNED_NOTE, WRITTEN_NOTE, md_safe
from mha_viz.app.context import ViewContext
from mha_viz.app.lesson import steps as lesson_steps
from mha_viz.app.text import read_text
from mha_viz.contract import InputError
from mha_viz.models import seeds

LEARNED_DEFAULT = "tiny"
# On the Lesson the sidebar's note follows the step, not the page's model: the page's own note (an alert, about the
# model picked for the other views) is hidden, and the step's is drawn in its place, so the written step is never told
# beside "Heads are not labeled modules" that its heads are.
_NOTE_CSS = ('<style>[data-testid="stSidebar"] [data-testid="stElementContainer"]:has([data-testid="stAlert"])'
             "{display:none}</style>")


# The Lesson's sentence box: one the learned model's steps share, one per step on a written model.
SHARED_INPUT, OWN_INPUT = "Input, shared by the steps (replace it with your own)", "Your own input for this step"


def _note(text: str) -> str:
    """One of the app's own notes as HTML: escaped, its **bold** kept."""
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(text, quote=False))


def sidebar_note(text: str) -> None:
    """The step's own note in the sidebar, in place of the page's (hidden on the Lesson by `_NOTE_CSS`): one of the
    app's constant notes, escaped by `_note`, so no text a visitor typed reaches this HTML."""
    st.html(_NOTE_CSS)
    st.sidebar.markdown(f'<div class="lesson-note" style="background:#eef4fb;border-radius:6px;padding:10px 12px;'
                        f'font-size:0.9em">{_note(text)}</div>', unsafe_allow_html=True)


def learned_choices() -> list[str]:
    """The learned models the lesson can run on: the tiny recipe and its seeds (small, so every step is instant)."""
    return seeds(LEARNED_DEFAULT) or [LEARNED_DEFAULT]


def _step_number(n_steps: int) -> int:
    step = st.session_state.get(state.LESSON_KEY, 1)
    if not isinstance(step, int) or not 1 <= step <= n_steps:
        if step != 1:
            st.warning(f"Link: lesson step {md_safe(str(step))} does not exist (1–{n_steps}); showing step 1.")
        step = 1
    st.session_state[state.LESSON_KEY] = step
    return step


def _learned_model() -> str:
    choices = learned_choices()
    name = st.session_state.get(state.LESSON_MODEL_KEY, LEARNED_DEFAULT)
    if name not in choices:
        st.warning(f"Link: lesson_model={md_safe(repr(str(name)[:30]))} is not one of {', '.join(choices)}; the "
                   f"lesson runs on {LEARNED_DEFAULT}.")
        name = LEARNED_DEFAULT
    st.session_state[state.LESSON_MODEL_KEY] = name
    st.session_state["lesson_model_pick"] = name
    return name


def _picked_model() -> None:
    st.session_state[state.LESSON_MODEL_KEY] = st.session_state["lesson_model_pick"]


_MOVED = "_lesson_moved"  # a Back or Next callback moved the step on this run (see _moved)
LIMIT = 400  # characters of a step's input: longer pastes are cut, and the step says so
_CUT = "_lesson_cut"  # {step: the length of the paste that was cut}
# Back and Next bring the new step's heading to the top of the window: a rerun keeps the scroll position, so from the
# bottom of a long step the next one opened mid-page. Runs in the page (a v2 component, no iframe), once per step.
_TOP = st.components.v2.component("mha_viz.lesson_top", html="", js="""
export default function ({ data, parentElement }) {
  if (parentElement.dataset.step === String(data.step)) return;
  const first = parentElement.dataset.step === undefined;
  parentElement.dataset.step = String(data.step);
  if (first && !data.moved) return;
  for (const el of [document.querySelector('[data-testid="stMain"]'),
                    document.querySelector('[data-testid="stAppViewContainer"]'),
                    document.scrollingElement]) {
    if (el) el.scrollTop = 0;
  }
  window.scrollTo(0, 0);
}""", isolate_styles=False)


def _go(step: int) -> None:
    st.session_state[state.LESSON_KEY] = step
    st.session_state[_MOVED] = True


def _bar(n: int, n_steps: int, where: str) -> tuple[bool, bool]:
    """One row of Back, the progress and Next; the same at the top and the foot of a step (keys by `where`), so
    at 1000x800 the student reaches Next without scrolling past the figure. Returns (back clicked, next clicked)."""
    back, middle, forward = st.columns([1, 3, 1], vertical_alignment="center")
    suffix = "" if where == "foot" else f"_{where}"
    went_back = back.button("← Back", key=f"lesson_back{suffix}", disabled=n == 1, on_click=_go, args=(n - 1,),
                            width="stretch")
    went_on = forward.button("Next →", key=f"lesson_next{suffix}", disabled=n == n_steps, on_click=_go,
                             args=(n + 1,), type="primary", width="stretch")
    if where == "top":
        middle.progress(n / n_steps)
    return went_back, went_on


def _moved(n: int, n_steps: int, went_back: bool, went_on: bool) -> None:
    """Back and Next's callbacks move the step before the run draws it. A click that reaches a session which has
    not drawn the buttons yet (one rebuilt after its server process died, reconnect.py) has no callback to call:
    Streamlit knows a button's callback only once the button is drawn, and the click arrives before. The button
    still returns True on that run, so the step moves here, once, and the page is drawn again at the new step (the
    URL follows, page.py writes it in its `finally`). After a callback the button returns True too: `_MOVED` says
    the step has moved already."""
    moved = st.session_state.pop(_MOVED, False)
    step = n - 1 if went_back else n + 1
    if (went_back or went_on) and not moved and 1 <= step <= n_steps:
        _go(step)  # its mark stays for the rerun, which pops it: a click the rerun still carries moves nothing
        st.rerun()


def _step_input(n: int, step: lesson_steps.Step) -> str:
    """The box of the steps on the learned model: one sentence they all share (`lesson_steps.SHARED` in
    `lesson_steps.TYPED`; the written step, whose program knows six symbols, keeps its own), kept across Next/Back,
    other views and, through the link, a reload; beside it, the step's own prepared input, offered with a button
    where the box holds another. Returns the input the step runs. A paste over `LIMIT` characters is cut there with
    a notice; an empty box runs the prepared sentence and says so."""
    typed = st.session_state.setdefault(lesson_steps.TYPED, {})
    slot = n if step.written else lesson_steps.SHARED
    key = f"lesson_text_{n}"
    # The box's first draw in a session rebuilt after its server process died takes the browser's resent value
    # (reconnect.resends), typed as the process died, never run; the link's value is then only its default.
    resent = reconnect.resends(key)
    if not resent:  # the shared sentence, typed on another step, reaches this one's box
        st.session_state[key] = typed.get(slot, step.text)
    default = typed.get(slot, step.text) if resent and key not in st.session_state else ""

    def keep() -> None:
        value, cut = st.session_state[key], st.session_state.setdefault(_CUT, {})
        cut.pop(n, None)
        if len(value) > LIMIT:
            cut[n] = len(value)
            value = st.session_state[key] = value[:LIMIT]
        if value == step.text:
            typed.pop(slot, None)
        else:
            typed[slot] = value

    def prepared() -> None:
        typed.pop(slot, None)
        st.session_state[key] = step.text

    box, offer = st.columns([3, 1.4], vertical_alignment="bottom")
    label = OWN_INPUT if step.written else SHARED_INPUT
    box.text_input(label, value=default, key=key, on_change=keep,
                   help=f"Up to {LIMIT} characters; it stays while you move between steps and views, and in the "
                        "link." + ("" if step.written else " Every step on the learned model reads this sentence."))
    if reconnect.drawn(key):  # its first draw: a resent value reached no callback (the box was not drawn yet)
        keep()
    if read_text(st.session_state[key]) != step.text:
        offer.button("Use this step's prepared input", key=f"lesson_prepared_{n}", on_click=prepared,
                     icon=":material/undo:", help=f"“{step.text}”", width="stretch")
    else:
        offer.caption("This step's prepared input.")
    if n in st.session_state.get(_CUT, {}):
        st.info(f"Your input had {st.session_state[_CUT][n]:,} characters; the lesson keeps the first {LIMIT}, "
                "shown in the box.", icon=":material/content_cut:")
    text = read_text(st.session_state[key])
    if not text.strip():
        st.caption(f"The box is empty, so the step shows its prepared sentence: “{md_safe(step.text)}”.")
    return text or step.text


def _unknown_words(name: str, text: str) -> None:
    """Under the step's input: how many of its words `name` does not know ("9 of 14 words are unknown to tiny").
    An input the model cannot run at all is said by the step itself (`run_step`)."""
    try:
        note = lesson_steps.unknown_words(name, text)
    except InputError:
        return
    if note:
        st.caption(note)


def render(ctx: ViewContext) -> None:
    steps = lesson_steps.STEPS
    n = _step_number(len(steps))
    learned = _learned_model()
    step = steps[n - 1]
    head, pick = st.columns([3, 1.2])
    head.markdown(f"#### Step {n} of {len(steps)}: {step.title}")
    pick.selectbox("Learned model of the lesson", learned_choices(), key="lesson_model_pick",
                   on_change=_picked_model,
                   help="The tiny recipe trained from different seeds: every head a step names is measured on the "
                        "model picked here, so the names follow it.")
    _TOP(data={"step": n, "moved": bool(st.session_state.get(_MOVED))}, key="lesson_top")
    lesson_steps.watch_column()
    sidebar_note(WRITTEN_NOTE if step.written else LEARNED_NOTE)
    top = _bar(n, len(steps), "top")
    st.markdown(f"**{step.claim}**")
    text = step.text
    if step.text:
        model = lesson_steps.model_of(step, learned)
        what = "compiled from a RASP program" if step.written else "the tiny recipe, trained here"
        st.caption(f"Model: {lesson_steps.WRITTEN if step.written else learned} ({what}), {model.n_layers} layers x "
                   f"{model.n_heads} heads.")
        text = _step_input(n, step)
        _unknown_words(lesson_steps.WRITTEN if step.written else learned, text)
    lesson_steps.run_step(step, learned, text, n)
    foot = _bar(n, len(steps), "foot")
    _moved(n, len(steps), top[0] or foot[0], top[1] or foot[1])
