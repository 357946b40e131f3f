"""How a Lesson step asks and shows: a step's record, the prediction it asks before its figure (`Question`, `ask`),
the input each step runs, and the pieces every step draws with (a row of heads, "Look at", a try-switch, "What you
just saw")."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Callable

import streamlit as st
import torch

from mha_viz.app import state
from mha_viz.app.common import chart_config, head_name
from mha_viz.app.lesson.readings import lesson_run, plain
from mha_viz.app.lesson.syllabus import OUTLINE
from mha_viz.app.names import marked_tokens
from mha_viz.contract import AttentionRun, Head
from mha_viz.plotting import lesson as lesson_figures
from mha_viz.plotting.lesson import MARK

# -- predict, then see: a step asks first, and its figure answers -----------------------------------------------
# {question key: "<digest of the question>:<index of the first pick>"}: the student's first pick, kept across steps,
# views, a reload and a shared link (state.py carries it as `?lesson_pick_KEY=`). The digest ties a pick to the
# question asked: a changed sentence asks another question (other tokens, another answer), which is asked afresh.
ANSWERS = state.LESSON_PICKS_KEY
TYPED = state.LESSON_TYPED_KEY  # {step number: what the student typed into its box} (views/lesson.py keeps it)
SHARED = 0  # the key in TYPED of the sentence every step on the learned model shares (one box, `?lesson_text_0=`)


@dataclass(frozen=True)
class Question:
    """One question a step asks before it shows its figure. `answer` is one of `choices`, read off the run (never
    typed); `why` says the measurement behind it in words."""
    ask: str
    choices: tuple[str, ...]
    answer: str
    why: str


def _digest(q: Question) -> str:
    return hashlib.blake2s(q.ask.encode(), digest_size=3).hexdigest()


def first_pick(key: str, q: Question) -> str | None:
    """The student's first pick for `q` under `key`, or None while they have not picked (or picked for another
    question: the sentence changed)."""
    kept = str(st.session_state.get(ANSWERS, {}).get(key, ""))
    digest, _, index = kept.partition(":")
    if digest != _digest(q) or not index.isdigit() or int(index) >= len(q.choices):
        return None
    return q.choices[int(index)]


def ask(key: str, q: Question, label: str = "Predict first", reveals: str = "the figure and the measured answer"
        ) -> bool:
    """Draw `q` as a choice with none picked; once the student picks one, that first pick is kept (under `key`,
    with the question's digest) and shown beside the measured answer: the choice is not offered again, so a later
    pick cannot turn a miss into a match. True once answered. `reveals`: what appears once they pick."""
    saved = st.session_state.setdefault(ANSWERS, {})
    widget = f"lesson_q_{key}"
    pick = first_pick(key, q)
    if pick is None:
        if st.session_state.get(widget) not in q.choices:
            st.session_state.pop(widget, None)

        def keep() -> None:
            if st.session_state.get(widget) in q.choices and first_pick(key, q) is None:
                saved[key] = f"{_digest(q)}:{q.choices.index(st.session_state[widget])}"

        pick = st.radio(f"**{label}:** {q.ask}", q.choices, index=None, key=widget, on_change=keep)
        if pick is None:
            st.caption(f"Pick an answer: {reveals} appear once you have made your prediction.")
            return False
        if first_pick(key, q) is None:  # a value set without its callback (a test, a resent click)
            saved[key] = f"{_digest(q)}:{q.choices.index(pick)}"
    st.session_state.pop(widget, None)
    st.radio(f"**{label}:** {q.ask}", q.choices, index=q.choices.index(pick), key=f"{widget}_kept", disabled=True,
             help="Your first pick, kept: the measurement is shown beside it, and picking again changes nothing.")
    mine, measured = st.columns(2)
    mine.markdown(f"**Your prediction:** {pick}")
    measured.markdown(f"**Measured:** {q.answer}")
    if pick == q.answer:
        st.success(f"**Your prediction matches the measurement.** {q.why}", icon=":material/check_circle:")
    else:
        st.info(f"**Measured on this run, the answer is “{q.answer}”, not “{pick}”.** {q.why}",
                icon=":material/search:")
    return True


def step_text(n: int) -> str:
    """The input step `n` (1-based) runs: the sentence the student typed into the steps' shared box (their own
    box for the written step), else the step's prepared sentence."""
    step = OUTLINE[n - 1]
    typed = st.session_state.get(TYPED, {}).get(n if step.written else SHARED, "")
    return typed.rstrip() or step.text


MOVED = 0.01  # a pattern weight that moved less than this did not change (numerical noise is ~1e-7)


@dataclass(frozen=True)
class Step:
    title: str
    claim: str
    text: str  # the prepared input; the student may replace it
    draw: Callable[[str, str, int], None]  # (learned model, input, step number) -> draws the step
    written: bool = False  # runs on the written model, not the lesson's learned one
    # (learned model, input) -> what the step asks before it draws, answered by the run; None: it asks nothing
    question: Callable[[str, str], Question] | None = None
    # (learned model, input) -> what the step says before its question (the first step: what attention is)
    intro: Callable[[str, str], None] | None = None


def heads_row(run: AttentionRun, heads: list[Head], titles: list[str], off: set[Head] = frozenset(),
              key: str = "", marked: Head | None = None) -> None:
    """The heads' patterns on the run's tokens, as many a row as the column holds with every token labelled, the
    head the step names (`marked`) outlined."""
    patterns = torch.stack([run.attentions[h] for h in heads])  # (N, Q, K)
    fig = lesson_figures.heads_grid(patterns, marked_tokens(run.tokens, run.unknown), titles,
                                    [h in off for h in heads], [h == marked for h in heads],
                                    [head_name(h) for h in heads], column=column_px())
    show(fig, key)


COLUMN_KEY = "_lesson_column"  # the main column's width in px, as the page measured it (`watch_column`)
# The main column's width, sent back whenever it changes by 20 px or more (a resize, the sidebar opened or closed), so
# the figures are planned for the column the student has: square cells as large as it allows.
_WIDTH = st.components.v2.component("mha_viz.lesson_width", html="", js="""
export default function ({ parentElement, setStateValue }) {
  const measure = () => {
    const main = document.querySelector('[data-testid="stMainBlockContainer"]');
    let w = parentElement.getBoundingClientRect().width;
    if (main) {
      const cs = getComputedStyle(main);
      w = main.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    }
    w = Math.floor(w / 20) * 20;
    if (w > 0 && w !== parentElement.__lessonWidth) {
      parentElement.__lessonWidth = w;
      setStateValue('width', w);
    }
  };
  if (!parentElement.__lessonObserver) {
    let timer = null;
    parentElement.__lessonObserver = new ResizeObserver(() => {
      clearTimeout(timer);
      timer = setTimeout(measure, 120);
    });
    parentElement.__lessonObserver.observe(document.querySelector('[data-testid="stMain"]') || parentElement);
  }
  measure();
}""", isolate_styles=False)
COLUMN_MIN, COLUMN_MAX = 320, 1600  # px: a width the page reports outside these is not believed


def watch_column() -> None:
    """Mount the width probe; what it reports is kept under `COLUMN_KEY` for `column_px`."""
    def keep() -> None:
        width = getattr(st.session_state.get("lesson_width"), "width", None)
        if isinstance(width, (int, float)) and COLUMN_MIN <= width <= COLUMN_MAX:
            st.session_state[COLUMN_KEY] = int(width)
    result = _WIDTH(key="lesson_width", on_width_change=keep)
    width = getattr(result, "width", None)
    if isinstance(width, (int, float)) and COLUMN_MIN <= width <= COLUMN_MAX:
        st.session_state[COLUMN_KEY] = int(width)


def column_px() -> int:
    """The width the Lesson's figures are planned for: the main column as measured, else `COLUMN_PX`."""
    return int(st.session_state.get(COLUMN_KEY, lesson_figures.COLUMN_PX))


def show(fig, key: str) -> None:
    """A Lesson figure at the width it was planned for (its cells square at every window: a wider column leaves it
    as it is, a narrower one shrinks it), with a note under it where it leaves token labels out."""
    st.plotly_chart(fig, width="content", key=key, config=figure_config())
    note = lesson_figures.labels_note(fig)
    if note:
        st.caption(note)


# Hovering a head's name in a step's text (a `named` span) highlights that head's titles in the step's figures:
# their text turns the marked colour, bold and underlined. One listener on the document, installed once per page.
_HOVER = st.components.v2.component("mha_viz.lesson_hover", html="", js="""
export default function () {
  if (window.__lessonHover) return;
  window.__lessonHover = true;
  const mark = (head, on) => {
    for (const t of document.querySelectorAll('[data-testid="stPlotlyChart"] .annotation-text')) {
      if (!t.textContent.includes(head)) continue;
      t.style.fill = on ? '#e6550d' : '';
      t.style.fontWeight = on ? 'bold' : '';
      t.style.textDecoration = on ? 'underline' : '';
      t.classList.toggle('lesson-lit', on);
    }
  };
  document.addEventListener('mouseover', (e) => {
    const span = e.target.closest && e.target.closest('.lesson-head');
    if (span) mark(span.dataset.head, true);
  });
  document.addEventListener('mouseout', (e) => {
    const span = e.target.closest && e.target.closest('.lesson-head');
    if (span) mark(span.dataset.head, false);
  });
}""", isolate_styles=False)


def hover_hook() -> None:
    _HOVER(key="lesson_hover")


def named(head: Head) -> str:
    """A head's name in a step's text, as a span the hover hook knows (the text is drawn with HTML allowed)."""
    return f'<span class="lesson-head" data-head="{head_name(head)}" style="border-bottom:1px dotted {MARK}">' \
           f"{head_name(head)}</span>"


def figure_config() -> dict:
    """The Lesson's figures' config: no plotly toolbar, which covered the heads' titles on hover (the Lesson's
    figures are to look at; the other views keep their Save button)."""
    return {**chart_config(), "displayModeBar": False}


def look(text: str, html: bool = False) -> None:
    """ "Look at: ...": with `html`, the text holds `named` spans (everything else in it escaped by the caller)."""
    st.markdown(f"**Look at:** {text}", help=plain(re.sub(r"<[^>]+>", "", text)), unsafe_allow_html=html)


def saw(lines: list[str]) -> None:
    """The step's measured lines, with a help icon that explains, in one sentence each, the technical words used."""
    body = "\n".join(f"- {line}" for line in lines)
    st.markdown("**What you just saw** (measured on this run)\n\n" + body, help=plain(body))


def try_switch(label: str, key: str, help: str = "", expect: str = "") -> bool:
    """A try-switch, with what to expect said under it before it is flipped (the step says what happened after)."""
    on = st.toggle(f"Try: {label}", key=key, help=help or None)
    if expect and not on:
        st.caption(f"What to expect: {expect}")
    return on


def off_moves(name: str, text: str, head: Head) -> tuple[float, float]:
    """With `head` off: the largest change of any attention weight among the other heads of its layer, and among
    the heads of the later layers."""
    run, off = lesson_run(name, text), lesson_run(name, text, frozenset({head}))
    layer, n_layers = head[0], run.attentions.shape[0]
    others = [h for h in range(run.attentions.shape[1]) if h != head[1]]
    same = float((off.attentions[layer, others] - run.attentions[layer, others]).abs().max())
    later = float((off.attentions[layer + 1:] - run.attentions[layer + 1:]).abs().max()) \
        if layer + 1 < n_layers else 0.0
    return same, later
