"""How a Lesson step asks and shows: a step's record, the prediction it asks before its figure (`Question`, `ask`),
the input each step runs, and the pieces every step draws with (a row of heads, "Look at", a try-switch, "What you
just saw")."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import streamlit as st
import torch

from mha_viz.app import state
from mha_viz.app.common import chart_config, head_name
from mha_viz.app.lesson.readings import lesson_run, plain
from mha_viz.app.names import marked_tokens
from mha_viz.contract import AttentionRun, Head
from mha_viz.plotting import lesson as lesson_figures
from mha_viz.plotting.lesson import MARK

# -- predict, then see: a step asks first, and its figure answers -----------------------------------------------
ANSWERS = "_lesson_answers"  # {question key: the choice picked}, a plain session key: kept across steps and views
TYPED = state.LESSON_TYPED_KEY  # {step number: what the student typed into its box} (views/lesson.py keeps it)


@dataclass(frozen=True)
class Question:
    """One question a step asks before it shows its figure. `answer` is one of `choices`, read off the run (never
    typed); `why` says the measurement behind it in words."""
    ask: str
    choices: tuple[str, ...]
    answer: str
    why: str


def ask(key: str, q: Question, label: str = "Predict first") -> bool:
    """Draw `q` as a choice with none picked; once the student picks one, say whether the measured answer agrees
    and why. True once answered. The pick is kept under `key` across steps and views (a widget's own state is
    dropped on a run that does not draw it)."""
    saved = st.session_state.setdefault(ANSWERS, {})
    widget = f"lesson_q_{key}"
    if st.session_state.get(widget) not in q.choices:
        st.session_state.pop(widget, None)
    if widget not in st.session_state and saved.get(key) in q.choices:
        st.session_state[widget] = saved[key]

    def keep() -> None:
        saved[key] = st.session_state[widget]

    pick = st.radio(f"**{label}:** {q.ask}", q.choices, index=None, key=widget, on_change=keep)
    if pick is None:
        st.caption("Pick an answer: the figure and the measured answer appear once you have made your prediction.")
        return False
    if pick == q.answer:
        st.success(f"**Your prediction matches the measurement.** {q.why}", icon=":material/check_circle:")
    else:
        st.info(f"**Measured on this run, the answer is “{q.answer}”, not “{pick}”.** {q.why}",
                icon=":material/search:")
    return True


# The Lesson's steps in order: filled by lesson_steps as it lists them, so a step (the closing one) reads the
# others' titles and inputs without importing the list that imports it.
ALL_STEPS: list = []


def step_text(n: int) -> str:
    """The input step `n` (1-based) runs: what the student typed into its box, else its prepared sentence."""
    typed = st.session_state.get(TYPED, {}).get(n, "")
    return typed.rstrip() or ALL_STEPS[n - 1].text


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


def heads_row(run: AttentionRun, heads: list[Head], titles: list[str], off: set[Head] = frozenset(),
              key: str = "", marked: Head | None = None) -> None:
    """The heads' patterns on the run's tokens, as many a row as the column holds with every token labelled, the
    head the step names (`marked`) outlined."""
    patterns = torch.stack([run.attentions[h] for h in heads])  # (N, Q, K)
    fig = lesson_figures.heads_grid(patterns, marked_tokens(run.tokens, run.unknown), titles,
                                    [h in off for h in heads], [h == marked for h in heads],
                                    [head_name(h) for h in heads])
    show(fig, key)


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
