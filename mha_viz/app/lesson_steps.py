"""The Lesson's steps: one claim of multi-head attention each, shown on a live model and told from numbers measured
on that run. Every head a step names is found by a measurement, never typed, so a step follows when the student's
input or the lesson's model changes.

A head's role (previous token, induction, first token) comes from the model's census (`head_census`: every head
measured on many inputs made for each question; `HeadCensus.named`, ties named together), the same in every step, so
within a model one role has one head, or a stated tie. A step's own input is one input: its readings say how many
queries they averaged over, show no number below `measures.SUPPORT_FLOOR`, and say in words when this input puts
another head above the census's. Words the model does not know (`run.unknown`) are counted next to the input and
marked on the figures' axes.

A step is a `Step` (title, claim, default input, which model) and one function that draws it under the lesson's
frame (views/lesson.py): the figure, what to look at, one thing to try with what changed, and "what you just saw".
The learned model is `learned` (the tiny recipe or one of its seeds, `?lesson_model=`); the written step uses a
model a program wrote (Tracr), where a head's label is true by construction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import plotly.graph_objects as go
import streamlit as st
import torch

from mha_viz import measures, plotting
from mha_viz.analysis import combine_heads, next_token_kl
from mha_viz.analysis.agreement import agreement, census_heads
from mha_viz.analysis.census_run import HeadCensus, head_census
from mha_viz.analysis.importance import head_importance
from mha_viz.analysis.scores import run_scores, run_support, top_badges
from mha_viz.app import state
from mha_viz.app.cache import census_control, census_made, runs, side_model, side_result
from mha_viz.app.common import chart_config, head_name, md_safe, top_predictions, visible
from mha_viz.app.names import UNKNOWN_MARK, marked_tokens
from mha_viz.app.names import unknown_words as unknown_count
from mha_viz.contract import AttentionRun, Head, HeadInside, InputError, Model
from mha_viz.models import seeds
from mha_viz.models.examples import census_texts

WRITTEN = "written-three-heads"  # three heads side by side in one layer, each written by one line of a program
TEXT_PARALLEL = "the keys to the old cabinet are on the table , so anna gave the keys to ben ."
TEXT_REPEAT = "anna berg went to the market . tom lind saw anna berg at the park ."
TEXT_PREDICT = "anna berg went to the market . tom lind saw anna"  # the next word can be copied from earlier
TEXT_WRITTEN = "b b a b b a"
PATTERNED = 0.5  # a head whose strongest pattern is this far above uniform attention counts as strongly patterned
ROLES = ("previous", "induction", "first")  # the roles the lesson names heads for: nearby context, a repeat, a place
FLOOR = measures.SUPPORT_FLOOR


# -- measurements, shared by the sessions through the run cache -------------------------------------------------

def _meaning(measure: str) -> str:
    """A measure's meaning inside a sentence: lower-case first letter, no closing full stop."""
    meaning = measures.get(measure).meaning
    return meaning[0].lower() + meaning[1:].rstrip(".")

def lesson_run(name: str, text: str, off: frozenset[Head] = frozenset()) -> AttentionRun:
    """`name` (a lesson model, loaded beside the page's own) on `text` with `off` zeroed."""
    key = ("lesson-run", text, tuple(sorted(off)))
    return side_result(key, name, lambda: side_model(name).run(text, ablate=off))


def lesson_inside(name: str, text: str, layer: int, off: frozenset[Head] = frozenset()) -> list[HeadInside]:
    key = ("lesson-inside", text, layer, tuple(sorted(off)))
    return side_result(key, name, lambda: side_model(name).inside_layer(text, layer, off))


def lesson_importance(name: str, text: str) -> torch.Tensor:
    """(L, H): each head switched off alone, the change of the last position's prediction (KL) or, for an encoder,
    1 - cosine of the sentence's mean output (`head_importance`)."""
    return side_result(("lesson-importance", text), name, lambda: head_importance(side_model(name), text))


def lesson_census(name: str) -> HeadCensus:
    """The census of lesson model `name`, as the Census view makes it by default (its example texts, input seed 0,
    the untrained twin as control): where every role a step names comes from. The Census view's own when it made
    one; else made here and kept in the run cache beside the model, not in the Census view's few slots (step 6
    reads every seed's, and would push out a census a visitor waited minutes for)."""
    made = census_made(name)
    if made is not None:
        return made

    def make() -> HeadCensus:
        model = side_model(name)
        return head_census(model, texts=census_texts(model), control=census_control(model))
    if runs().peek(("lesson-census", name)) is not None:
        return side_result("lesson-census", name, make)
    # The first in a server process also builds the census's inputs: seconds, where a step is otherwise instant.
    with st.spinner(f"Measuring every head of {name} on the census's inputs (once per model)..."):
        return side_result("lesson-census", name, make)


@dataclass(frozen=True)
class Reading:
    """Every registered one-input measure of one run: scores (L, H) each, what uniform attention scores, and how
    many queries each averaged over (the same for every head)."""
    scores: dict[str, torch.Tensor]
    base: dict[str, float]
    support: dict[str, int]


def read(name: str, run: AttentionRun) -> Reading:
    causal = side_model(name).info.causal
    scores, base = run_scores(run, causal)
    return Reading(scores, base, run_support(run, causal))


def argmax_head(scores: torch.Tensor) -> Head:
    """The head with the highest score of an (L, H) map (NaN never wins)."""
    flat = scores.nan_to_num(float("-inf")).flatten()
    layer, head = divmod(int(flat.argmax()), scores.shape[1])
    return layer, head


def strongest_pattern(r: Reading, head: Head) -> tuple[str, float] | None:
    """A head's measure furthest above uniform attention (a registered badge read over `FLOOR` queries or more), or
    None when none is 0.1 above."""
    found = top_badges(r.scores, r.base, head[0], head[1], n=1, support=r.support)
    return found[0] if found else None


def pattern_excess(r: Reading) -> torch.Tensor:
    """(L, H): how far each head's strongest badge measure lies above its uniform baseline, of the measures read
    over `FLOOR` queries or more (-inf where none is)."""
    kept = [m for m in measures.BADGES if r.support[m] >= FLOOR]
    if not kept:
        return torch.full_like(r.scores[measures.BADGES[0]], float("-inf"))
    excess = torch.stack([r.scores[m] - r.base[m] for m in kept])  # (M, L, H)
    return excess.nan_to_num(float("-inf")).amax(0)  # (L, H)


def pct(value: float) -> str:
    return f"{value:.0%}"


def tok(token: str) -> str:
    """A token inside the step's Markdown, as typed."""
    return f"“{md_safe(visible(token))}”"


def listed(items: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def heads_words(heads: list[Head]) -> str:
    return listed([head_name(h) for h in heads])


# -- roles: the census names them, a step's input is checked against it ------------------------------------------
def role_heads(name: str, role: str) -> list[Head]:
    """The heads the census of `name` names for `role`, in (layer, head) order: one, a tie, or none."""
    return census_heads(lesson_census(name), role)


def census_role(name: str, role: str, verb: bool = False) -> str:
    """"the census's induction head L1 H3"; a tie, "the census's induction heads L1 H0 and L1 H2, tied"; with
    `verb`, "... head is L1 H3" / "... heads are ..."; none named, "no head: the census names none for induction"."""
    heads, label = role_heads(name, role), measures.get(role).label
    if not heads:
        return f"no head: the census names none for {label}"
    if len(heads) == 1:
        return f"the census's {label} head {'is ' if verb else ''}{head_name(heads[0])}"
    return f"the census's {label} heads {'are ' if verb else ''}{heads_words(heads)}, tied"


def queries(n: int) -> str:
    return measures.queries_words(n)


def too_few(role: str, n: int) -> str:
    return f"{measures.get(role).label}: {measures.TOO_FEW} ({queries(n)}; a reading needs at least {FLOOR})"


def role_reading(name: str, role: str, r: Reading) -> str:
    """One sentence: the census's heads for `role` and what this input says of them (`analysis.agreement`, as
    Inside a head says it): it agrees, another head scores higher, or too few queries to check. Where the census
    names no head, the input's best head, read over `FLOOR` queries or more."""
    if role_heads(name, role):
        return agreement(lesson_census(name), role, r.scores, r.support)
    label, n = measures.get(role).label, r.support[role]
    if n < FLOOR:
        return f"The census names no {label} head; {too_few(role, n)}."
    best = argmax_head(r.scores[role])
    return (f"The census names no {label} head; on this input {head_name(best)} scores highest "
            f"({float(r.scores[role][best]):.2f} over {queries(n)}; uniform attention {r.base[role]:.2f}).")


def reading_line(name: str, r: Reading, head: Head) -> str:
    """One head's strongest pattern on this input with its support; for a role, whose it is in the census."""
    top = strongest_pattern(r, head)
    if top is None:
        few = [m for m, _ in top_badges(r.scores, r.base, head[0], head[1], n=2) if r.support[m] < FLOOR]
        return (f"{head_name(head)}: no measured pattern 10 points above uniform attention over {FLOOR} queries or "
                "more" + "".join(f"; {too_few(m, r.support[m])}" for m in few))
    m, value = top
    line = (f"{head_name(head)}: {measures.get(m).label} {pct(value)} over {queries(r.support[m])} (uniform attention: "
            f"{pct(r.base[m])})")
    if m in ROLES:
        line += f"; {census_role(name, m, verb=True)}" + ("" if head in role_heads(name, m) else
                                                           ": this head reads it on this input only")
    return line


def layer_previous(name: str, r: Reading, layer: int) -> tuple[Head, str]:
    """The previous-token head of `layer` steps 1 and 2 name, and a clause saying where it comes from: the census's
    (the first in (layer, head) order of a tie), or the layer's highest reading over `FLOOR` queries or more."""
    named = [h for h in role_heads(name, "previous") if h[0] == layer]
    if named:
        return named[0], census_role(name, "previous", verb=True)
    label, n = measures.get("previous").label, r.support["previous"]
    head = (layer, argmax_head(r.scores["previous"][layer:layer + 1])[1])
    if n < FLOOR:
        return head, (f"the census names no {label} head in layer {layer}; {too_few('previous', n)}: the step "
                      f"takes {head_name(head)}")
    return head, (f"the census names no {label} head in layer {layer}; on this input {head_name(head)} scores "
                  f"highest of the layer ({float(r.scores['previous'][head]):.2f} over {queries(n)})")


def unknown_words(name: str, text: str) -> str:
    """"9 of 14 words are unknown to tiny ..." for a step's input (the positions the tokenizer added left out), or
    "" when the model knows every word."""
    run = lesson_run(name, text)
    added, unknown = set(run.special), set(run.unknown)
    content = [i for i in range(len(run.tokens)) if i not in added]
    missing = [i for i in content if i in unknown]
    if not missing:
        return ""
    words = list(dict.fromkeys(run.tokens[i] for i in missing))  # each word once, in order
    shown = ", ".join(tok(w) for w in words[:8]) + (", …" if len(words) > 8 else "")
    return (f"{unknown_count(len(missing), len(content), side_model(name).info.title)}: {shown}. The model reads "
            f"each as its one unknown token, so the figures mark them “{UNKNOWN_MARK.strip()}”, and no measure "
            "counts one as a repeat of another.")


# -- plain words: each technical word gets one sentence where a step first uses it -----------------------------
GLOSSARY = {
    "uniform attention": "Uniform attention spreads a query's weight evenly over every key it may read: the score a "
                         "head with no preference at all would get, the baseline every score is read against.",
    "KL": "KL (Kullback–Leibler divergence, in nats) says how far the model's next-word probabilities moved: 0 means "
          "unchanged; about 0.1 is a small shift; 1 or more means the prediction changed a lot.",
    "total variation": "Total variation between two rows of attention weights is the share of weight that sits in "
                       "different places: 0 means the same row, 1 means no key in common.",
    "contribution": "A head's contribution is what it adds to the layer's output for one token: its output vector "
                    "after its slice of the output projection.",
    "along the total": "A share along the total is how much of a head's contribution points the same way as the "
                       "layer's whole output (negative: it points against it); the shares plus the bias's add up to "
                       "the total's length.",
}


def plain(text: str) -> str | None:
    """The one-sentence explanations of the technical words `text` uses, for a help icon beside it; None if none."""
    used = [GLOSSARY[w] for w in GLOSSARY if w in text]
    return "\n\n".join(used) or None


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


def step_text(n: int) -> str:
    """The input step `n` (1-based) runs: what the student typed into its box, else its prepared sentence."""
    typed = st.session_state.get(TYPED, {}).get(n, "")
    return typed.rstrip() or STEPS[n - 1].text


MOVED = 0.01  # a pattern weight that moved less than this did not change (numerical noise is ~1e-7)


# -- the steps ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    title: str
    claim: str
    text: str  # the prepared input; the student may replace it
    draw: Callable[[str, str, int], None]  # (learned model, input, step number) -> draws the step
    written: bool = False  # runs on the written model, not the lesson's learned one
    # (learned model, input) -> what the step asks before it draws, answered by the run; None: it asks nothing
    question: Callable[[str, str], Question] | None = None


def _heads_row(run: AttentionRun, heads: list[Head], titles: list[str], off: set[Head] = frozenset(),
               key: str = "") -> None:
    patterns = torch.stack([run.attentions[h] for h in heads])  # (N, Q, K)
    fig = plotting.heads_row_figure(patterns, marked_tokens(run.tokens, run.unknown), titles,
                                    [h in off for h in heads], height=int(720 / max(len(heads), 3)), contrast="sqrt")
    st.plotly_chart(fig, width="stretch", key=key, config=_config())


def _config() -> dict:
    """The Lesson's figures' config: no plotly toolbar, which covered the heads' titles on hover (the Lesson's
    figures are to look at; the other views keep their Save button)."""
    return {**chart_config(), "displayModeBar": False}


def _look(text: str) -> None:
    st.markdown(f"**Look at:** {text}", help=plain(text))


def _saw(lines: list[str]) -> None:
    """The step's measured lines, with a help icon that explains, in one sentence each, the technical words used."""
    body = "\n".join(f"- {line}" for line in lines)
    st.markdown("**What you just saw** (measured on this run)\n\n" + body, help=plain(body))


def _try(label: str, key: str, help: str = "", expect: str = "") -> bool:
    """A try-switch, with what to expect said under it before it is flipped (the step says what happened after)."""
    on = st.toggle(f"Try: {label}", key=key, help=help or None)
    if expect and not on:
        st.caption(f"What to expect: {expect}")
    return on


def _off_moves(name: str, text: str, head: Head) -> tuple[float, float]:
    """With `head` off: the largest change of any attention weight among the other heads of its layer, and among
    the heads of the later layers."""
    run, off = lesson_run(name, text), lesson_run(name, text, frozenset({head}))
    layer, n_layers = head[0], run.attentions.shape[0]
    others = [h for h in range(run.attentions.shape[1]) if h != head[1]]
    same = float((off.attentions[layer, others] - run.attentions[layer, others]).abs().max())
    later = float((off.attentions[layer + 1:] - run.attentions[layer + 1:]).abs().max()) \
        if layer + 1 < n_layers else 0.0
    return same, later


PARALLEL_CHOICES = ("Only the other heads of layer 0", "Only the heads of the later layers", "Both", "Neither")


def question_parallel(name: str, text: str) -> Question:
    prev, _ = layer_previous(name, read(name, lesson_run(name, text)), 0)
    same, later = _off_moves(name, text, prev)
    answer = PARALLEL_CHOICES[{(True, False): 0, (False, True): 1, (True, True): 2, (False, False): 3}[
        (same >= MOVED, later >= MOVED)]]
    why = (f"With {head_name(prev)} off, the other heads of layer 0 moved by at most {same:.3f} in any weight and "
           f"the heads of the later layers by up to {later:.3f}. ")
    why += ("The heads of one layer read the same input side by side: none waits for another's result. " if
            same < MOVED else "A head of layer 0 moved: on this model the heads of one layer do not run apart. ")
    why += ("The later layers read layer 0's output, so they change." if later >= MOVED else
            "The later layers barely use its output on this input.")
    return Question(f"Which attention patterns will change if you switch off {head_name(prev)}, the previous "
                    "token head of layer 0?", PARALLEL_CHOICES, answer, why)


def draw_parallel(name: str, text: str, n: int) -> None:
    model, run = side_model(name), lesson_run(name, text)
    r = read(name, run)
    layer = 0
    heads = [(layer, h) for h in range(model.n_heads)]
    prev, source = layer_previous(name, r, layer)
    same, later = _off_moves(name, text, prev)
    switch = _try(f"switch {head_name(prev)} off", f"lesson_try_{n}",
                  "Its output becomes 0; every later layer is recomputed.",
                  expect=f"its own map stays (it is still computed, only its output is dropped); the other heads of "
                         f"layer 0 {'stay as they are' if same < MOVED else 'change'}.")
    off = {prev} if switch else set()
    shown = lesson_run(name, text, frozenset(off)) if switch else run
    # The head the step names carries its role in its title: the one to look at.
    _heads_row(shown, heads, [head_name(h) + (f" · {measures.get('previous').label}" if h == prev else "")
                              for h in heads], off, key=f"lesson_fig_{n}")
    _look(f"the {model.n_heads} heads of layer 0 read the same {len(run.tokens)} tokens at once, and each puts its "
          f"weight elsewhere. {head_name(prev)} carries a role in its title: {source}.")
    lines = [reading_line(name, r, h) for h in heads]
    lines.append(role_reading(name, "previous", r))
    if switch:
        same = [h for h in heads if h != prev]
        moved_same = max(float((shown.attentions[h] - run.attentions[h]).abs().max()) for h in same)
        moved_later = float((shown.attentions[layer + 1:] - run.attentions[layer + 1:]).abs().max()) \
            if model.n_layers > 1 else 0.0
        lines.append(f"With {head_name(prev)} off, the other heads of layer 0 changed by at most {moved_same:.3f} in "
                     f"any weight: they run beside it on the same input, not after it. The later layers, which read "
                     f"its output, changed by up to {moved_later:.3f}.")
    _saw(lines)


KEY_CHOICES = ("The token just before it", "The token itself", "The first token", "Another token")


def _key_choice(key: int, query: int, first: int) -> str:
    """Which of `KEY_CHOICES` key position `key` is, for query position `query` (`first`: the first token)."""
    if key == query - 1:
        return KEY_CHOICES[0]
    if key == query:
        return KEY_CHOICES[1]
    return KEY_CHOICES[2] if key == first else KEY_CHOICES[3]


def question_projections(name: str, text: str) -> Question:
    run = lesson_run(name, text)
    inside = lesson_inside(name, text, 0)
    a, _ = layer_previous(name, read(name, run), 0)
    content = [i for i in range(len(run.tokens)) if i not in set(run.special)]
    query = content[-1]
    tops = [int(inside[h].weights[query].argmax()) for h in range(len(inside))]  # each head's top key
    answer = _key_choice(tops[a[1]], query, 0)
    others = "; ".join(f"{head_name((0, h))}: key {k}, {tok(run.tokens[k])}" for h, k in enumerate(tops)
                       if h != a[1])
    why = (f"{head_name(a)}'s query for token {query}, {tok(run.tokens[query])}, weights key {tops[a[1]]}, "
           f"{tok(run.tokens[tops[a[1]]])}, most ({float(inside[a[1]].weights[query, tops[a[1]]]):.2f}). The other "
           f"heads of layer 0, given the same vector, weight most: {others}. Each head makes its own query and keys "
           "from the same input with its own matrices.")
    return Question(f"Token {query}, {tok(run.tokens[query])}, enters every head of layer 0 as the same vector. "
                    f"Which key will {head_name(a)}, the census's previous token head, weight most for it?",
                    KEY_CHOICES, answer, why)


def draw_projections(name: str, text: str, n: int) -> None:
    run = lesson_run(name, text)
    layer = 0
    inside = lesson_inside(name, text, layer)
    a, source = layer_previous(name, read(name, run), layer)
    content = [i for i in range(len(run.tokens)) if i not in set(run.special)]
    marked = marked_tokens(run.tokens, run.unknown)  # an unknown word's label says so, as on every axis
    query = st.selectbox("Try: pick another query token", content, index=len(content) - 1,
                         format_func=lambda i: f"{i}: {visible(marked[i])}", key=f"lesson_try_{n}")
    rows = {h: inside[h].weights[query] for h in range(len(inside))}  # (K,) each
    # The head that reads this token most differently from A: the largest total variation between the two rows.
    others = [h for h in rows if h != a[1]]
    b = (layer, max(others, key=lambda h: float((rows[h] - rows[a[1]]).abs().sum())))
    fig = go.Figure()
    labels = [f"{i}:{visible(t)}" for i, t in enumerate(marked)]
    for head, colour in ((a, "#08519c"), (b, "#c44e52")):
        fig.add_trace(go.Bar(x=labels, y=rows[head[1]].numpy(), name=head_name(head), marker_color=colour))
    fig.update_layout(template="none", barmode="group", height=300, margin=dict(l=50, r=10, t=40, b=80),
                      title=dict(text=f"Query {query}: attention weight on each key, two heads", font=dict(size=13)),
                      yaxis=dict(title="weight", range=[0, 1]), legend=dict(orientation="h", y=1.12))
    st.plotly_chart(fig, width="stretch", key=f"lesson_fig_{n}", config=_config())
    qa, qb = inside[a[1]].q[query], inside[b[1]].q[query]  # (dh,) each
    top_a, top_b = int(rows[a[1]].argmax()), int(rows[b[1]].argmax())
    _look(f"token {query}, {tok(run.tokens[query])}, enters {head_name(a)} and {head_name(b)} as the same vector "
          f"({source}); each head multiplies it by its own query matrix and compares it with keys made by its own "
          "key matrix.")
    _saw([f"{head_name(a)}'s query for {tok(run.tokens[query])} scores key {top_a}, {tok(run.tokens[top_a])}, "
          f"highest: weight {rows[a[1]][top_a]:.2f}.",
          f"{head_name(b)}'s query for the same token scores key {top_b}, {tok(run.tokens[top_b])}, highest: "
          f"weight {rows[b[1]][top_b]:.2f}.",
          f"Made from the same input vector by two matrices, the two queries ({qa.shape[-1]} numbers each) have "
          f"lengths {float(qa.norm()):.2f} and {float(qb.norm()):.2f}; the two rows of weights differ by "
          f"{float((rows[a[1]] - rows[b[1]]).abs().sum()) / 2:.2f} "
          "(total variation: 0 = the same, 1 = no overlap)."])


INDUCTION_CHOICES = ("The word that came after it the first time", "Its first appearance", "The token just before it",
                     "The first token", "Somewhere else")


def _repeat(run: AttentionRun) -> tuple[int, int] | None:
    """(earlier, later): the first word of `run` that comes back, at two positions, with a word after the earlier
    one; a word the model does not know is never a repeat (it is one unknown token for every word). None if none."""
    skip = set(run.special) | set(run.unknown)
    seen: dict[str, int] = {}
    for i, t in enumerate(run.tokens):
        if i in skip:
            continue
        if t in seen and seen[t] + 1 < i:
            return seen[t], i
        seen.setdefault(t, i)
    return None


def question_patterns(name: str, text: str) -> Question:
    run = lesson_run(name, text)
    found, note = _repeat(run), ""
    if found is None:
        text, note = TEXT_REPEAT, "No word comes back in your input, so this question is about the prepared sentence. "
        run = lesson_run(name, text)
        found = _repeat(run)
    first, again = found
    heads = role_heads(name, "induction")
    head = heads[0] if heads else argmax_head(read(name, run).scores["induction"])
    row = run.attentions[head][again]  # (K,)
    top = int(row.argmax())
    answer = (INDUCTION_CHOICES[0] if top == first + 1 else INDUCTION_CHOICES[1] if top == first else
              INDUCTION_CHOICES[2] if top == again - 1 else INDUCTION_CHOICES[3] if top == 0 else INDUCTION_CHOICES[4])
    who = (census_role(name, "induction") if len(heads) == 1 else
           f"{head_name(head)} (of {census_role(name, 'induction')})" if heads else
           f"{head_name(head)} (the highest induction score on this input; the census names no induction head)")
    why = (f"From position {again}, {head_name(head)} put {pct(float(row[top]))} of its weight on key {top}, "
           f"{tok(run.tokens[top])}. An induction head looks for the earlier copy of the current word and attends "
           f"to the word that followed it ({first + 1}, {tok(run.tokens[first + 1])}), which is a good guess for "
           "what comes next.")
    return Question(f"{note}{tok(run.tokens[again])} comes back at position {again} (first at {first}). From there, "
                    f"where will {who} put the most weight?", INDUCTION_CHOICES, answer, why)


def draw_patterns(name: str, text: str, n: int) -> None:
    run = lesson_run(name, text)
    r = read(name, run)
    census = lesson_census(name)
    named = {m: role_heads(name, m) for m in ROLES}
    heads = list(dict.fromkeys(h for m in ROLES for h in named[m]))
    shared = {h: [m for m in ROLES if h in named[m]] for h in heads}
    if heads:
        titles = [" · ".join([head_name(h)] + [measures.get(m).label for m in shared[h]]) for h in heads]
        _heads_row(run, heads, titles, key=f"lesson_fig_{n}")
    _look(f"{len(heads)} heads of one model on one input, each named by the model's census, which measured every "
          "head on many inputs made for the question: "
          + "; ".join(f"{census_role(name, m)} ({_meaning(m)})" for m in ROLES) + ".")
    st.caption("Try: type a sentence in the box above where no word comes back: induction then has no query to "
               "average over. Then one where a name comes back twice, and see whether this input agrees with the "
               "census.")
    lines = [role_reading(name, m, r) for m in ROLES]
    lines += [census.naming_words(m) for m in ROLES if len(named[m]) > 1]  # a tie, in the census's own words
    for h, roles in shared.items():
        if len(roles) > 1:
            both = listed([measures.get(m).label for m in roles])
            lines.append(f"{head_name(h)} is named for both {both}: the census reads each on its own inputs ("
                         + "; ".join(f"{measures.get(m).label} on {_census_inputs(m)}" for m in roles)
                         + f"), and {head_name(h)} scores high on each.")
    if text != TEXT_REPEAT:
        p = read(name, lesson_run(name, TEXT_REPEAT))
        lines.append("On the prepared sentence: " + " ".join(role_reading(name, m, p) for m in ROLES))
    _saw(lines)


def _census_inputs(measure: str) -> str:
    """Which of the census's inputs a measure is read on, in words ("repeated random sequences")."""
    return " and ".join(measures.INPUTS[kind] for kind in measures.get(measure).census)


LENGTH_CHOICES = ("It gets shorter", "It stays about the same", "It gets longer")


def _combined(name: str, text: str, off: frozenset[Head] = frozenset()):
    """(layer, position, the heads' combination for the last token) in the middle layer, with `off` zeroed."""
    model, run = side_model(name), lesson_run(name, text)
    layer = model.n_layers // 2  # a middle layer: it reads the first layer's output and feeds the last
    position = len(run.tokens) - 1
    inside = lesson_inside(name, text, layer, off)
    contributions = torch.stack([h.contribution[position] for h in inside])  # (H, D)
    return layer, position, combine_heads(contributions, inside[0].bias)


def _biggest(name: str, text: str) -> Head:
    layer, _, combo = _combined(name, text)
    return layer, int(combo.along.argmax())


def question_combining(name: str, text: str) -> Question:
    layer, position, combo = _combined(name, text)
    biggest = _biggest(name, text)
    _, _, after = _combined(name, text, frozenset({biggest}))
    ratio = after.total_norm / combo.total_norm if combo.total_norm > 0 else 1.0
    answer = LENGTH_CHOICES[0] if ratio < 0.9 else LENGTH_CHOICES[2] if ratio > 1.1 else LENGTH_CHOICES[1]
    why = (f"The layer's output for this token had length {combo.total_norm:.2f}; with {head_name(biggest)} off it "
           f"is {after.total_norm:.2f}. The output is the sum of the heads' contributions and a bias: take one away "
           f"and the sum is what is left ({head_name(biggest)} had added {float(combo.along[biggest[1]]):.2f} along "
           "the total; other heads may point partly against it).")
    return Question(f"{head_name(biggest)} adds the most to what layer {layer} writes for the last token, "
                    f"{tok(lesson_run(name, text).tokens[position])}. Switch it off: what happens to the length of "
                    "the layer's output for that token?", LENGTH_CHOICES, answer, why)


def draw_combining(name: str, text: str, n: int) -> None:
    model, run = side_model(name), lesson_run(name, text)
    layer, position, combo = _combined(name, text)
    biggest = _biggest(name, text)
    _, _, without = _combined(name, text, frozenset({biggest}))
    switch = _try(f"switch {head_name(biggest)} off", f"lesson_try_{n}",
                  "Its contribution becomes 0; the layer's output is the sum of what is left.",
                  expect=f"its bars drop to 0 and the total bar changes from {combo.total_norm:.2f} to "
                         f"{without.total_norm:.2f}, on the same axis.")
    names = [head_name((layer, h)) for h in range(model.n_heads)]
    off = frozenset({biggest}) if switch else frozenset()
    shown = without if switch else combo
    fig = plotting.heads_combine_figure(names, shown.norms, shown.along, [(layer, h) in off for h in
                                                                         range(model.n_heads)],
                                        shown.bias_along, shown.total_norm,
                                        f"Layer {layer}, token {position}: the heads add up"
                                        + (f", {head_name(biggest)} off" if switch else ""))
    # One y axis for both states, so a switched-off head shows as a shorter total, not as a rescaled axis.
    values = [float(v) for c in (combo, without) for v in (*c.norms, *c.along, c.bias_along, c.total_norm)]
    pad = 0.08 * (max(values) - min(0.0, min(values)))
    fig.update_yaxes(range=[min(0.0, min(values)) - pad, max(values) + pad], title="length")
    fig.data[0].name, fig.data[1].name = "size of each contribution", "its share along the total"
    st.plotly_chart(fig, width="stretch", key=f"lesson_fig_{n}", config=_config())
    _look(f"the dark bars: each head's share of what layer {layer} writes for the last token, "
          f"{tok(run.tokens[position])}. They add up, with the bias, to the total.")
    summed = float(shown.along.sum()) + shown.bias_along
    lines = [f"The heads' shares along the total, plus the bias, sum to {summed:.3f}; the total's length is "
             f"{shown.total_norm:.3f}: the layer's output is the heads' outputs added."
             + (f" ({head_name(biggest)} is off.)" if switch else ""),
             f"{head_name(biggest)} adds the most along the total with every head on: "
             f"{float(combo.along[biggest[1]]):.3f}."]
    if switch:
        cos = float(torch.nn.functional.cosine_similarity(shown.total, combo.total, dim=0))
        lines.append(f"With {head_name(biggest)} off, the layer's output for this token has length "
                     f"{shown.total_norm:.3f} (it was {combo.total_norm:.3f}) and cosine {cos:.2f} with the output "
                     "before.")
        if run.logits is not None:
            kl = next_token_kl(run.logits, lesson_run(name, text, off).logits)
            lines.append(f"The model's next-token prediction moved by KL {kl:.3f} nats.")
    _saw(lines)


OUTPUT_CHOICES = ("Not one of them", "Some, not all", "All of them")


def _written_prev() -> Head:
    written = side_model(WRITTEN).written_heads()
    heads = sorted(written)
    return next((h for h in heads if written[h].pattern == "previous"), heads[0])


def _written_changes(text: str) -> tuple[int, int]:
    """(positions whose program output changes with the written previous-token head off, positions)."""
    model, prev = side_model(WRITTEN), _written_prev()
    before = model.program_output(lesson_run(WRITTEN, text))
    after = model.program_output(lesson_run(WRITTEN, text, frozenset({prev})))
    return sum(x != y for x, y in zip(before, after)), len(before)


def question_written(name: str, text: str) -> Question:
    prev = _written_prev()
    changed, total = _written_changes(text)
    answer = OUTPUT_CHOICES[0] if changed == 0 else OUTPUT_CHOICES[2] if changed == total else OUTPUT_CHOICES[1]
    why = (f"With {head_name(prev)} off, the program's output changed at {changed} of {total} positions: where the "
           "line that reads the previous token decides the output. A position whose answer does not depend on the "
           "token before it (the first one, for a start) keeps its output.")
    return Question(f"A program wrote {head_name(prev)} to read the previous token. Switch it off: how many of the "
                    f"program's {total} outputs on this input will change?", OUTPUT_CHOICES, answer, why)


def draw_written(name: str, text: str, n: int) -> None:
    model, run = side_model(WRITTEN), lesson_run(WRITTEN, text)
    written = model.written_heads()
    r = read(WRITTEN, run)
    heads = sorted(written)
    prev = next((h for h in heads if written[h].pattern == "previous"), heads[0])
    changed, total = _written_changes(text)
    switch = _try(f"switch {head_name(prev)} off", f"lesson_try_{n}",
                  "Its output becomes 0: the program's line that reads it gets nothing.",
                  expect=f"a table of the program's output before and after; {changed} of {total} positions differ.")
    off = {prev} if switch else set()
    shown = lesson_run(WRITTEN, text, frozenset(off)) if switch else run
    _heads_row(shown, heads, [f"{head_name(h)} · " + (measures.get(written[h].pattern).label if written[h].pattern
                                                       else "no measured pattern") for h in heads], off,
               key=f"lesson_fig_{n}")
    _look(f"{len(heads)} heads that a program wrote; each selects what its line of the program says.")
    st.table({"head": [head_name(h) for h in heads], "the program wrote": [written[h].source_line for h in heads],
              "it selects": [written[h].selects for h in heads]})
    lines = []
    for h in heads:
        m = written[h].pattern
        if m and r.support[m] < FLOOR:
            lines.append(f"{head_name(h)}: the program wrote that {written[h].selects}; on this input "
                         f"{too_few(m, r.support[m])}. The label is true by construction all the same.")
        elif m:
            lines.append(f"{head_name(h)}: the program wrote that {written[h].selects}; its "
                         f"{measures.get(m).label} score on this input is {float(r.scores[m][h]):.2f} over "
                         f"{queries(r.support[m])} (uniform attention: {r.base[m]:.2f}). Here the label is true.")
        else:
            lines.append(f"{head_name(h)}: the program wrote that {written[h].selects}. A true role need not be "
                         "one a measure names.")
    before = model.program_output(run)
    if switch:
        after = model.program_output(shown)
        changed = [i for i, (x, y) in enumerate(zip(before, after)) if x != y]
        st.table({"position": list(range(len(run.tokens))), "token": [visible(t) for t in run.tokens],
                  "output, all heads on": [str(x) for x in before], f"{head_name(prev)} off": [str(x) for x in after]})
        lines.append(f"With {head_name(prev)} off the program's output changed at {len(changed)} of "
                     f"{len(before)} positions.")
    _saw(lines)


def _tie(name: str, role: str) -> str:
    """" L1 H0 and L1 H2 tie on induction in the census." where it names several heads for `role`, else ""."""
    heads = role_heads(name, role)
    return f" {heads_words(heads)} tie on {measures.get(role).label} in the census." if len(heads) > 1 else ""


SEED_CHOICES = ("Yes, the same head in every seed", "No, another head in at least one seed")


def question_learned(name: str, text: str) -> Question:
    family = seeds(name) or [name]
    named = {seed: tuple(role_heads(seed, "previous")) for seed in family}
    answer = SEED_CHOICES[0] if len(set(named.values())) == 1 else SEED_CHOICES[1]
    why = ("The census of each model names its previous token head: "
           + "; ".join(f"{seed}: {heads_words(list(h)) if h else 'none'}" for seed, h in named.items())
           + ". Nothing in the recipe says which head takes the role: where it lands depends on the seed.")
    return Question(f"The same recipe trained {len(family)} models from different random seeds. Will their "
                    "previous token head be the same head (the same layer and number) in every one?",
                    SEED_CHOICES, answer, why)


def quiet_and_loud(name: str, text: str) -> tuple[Head, Head]:
    """(the strongly patterned head whose removal changes the prediction least, the head whose removal changes it
    most). With no strongly patterned head, the most patterned one stands in."""
    importance = lesson_importance(name, text)  # (L, H)
    excess = pattern_excess(read(name, lesson_run(name, text)))  # (L, H)
    patterned = excess >= PATTERNED
    pool = importance.masked_fill(~patterned, float("inf")) if bool(patterned.any()) else -excess
    return argmax_head(-pool), argmax_head(importance)


def draw_learned(name: str, text: str, n: int) -> None:
    model, run = side_model(name), lesson_run(name, text)
    r = read(name, run)
    family = seeds(name) or [name]
    readings = {seed: read(seed, lesson_run(seed, text)) for seed in family}
    maps, titles = [readings[seed].scores["previous"] for seed in family], list(family)
    label, support = measures.get("previous").label, r.support["previous"]
    st.caption(f"The {label} score of every head (rows: layers, columns: heads) in each model the recipe trained, "
               + (f"on this input, over {queries(support)}." if support >= FLOOR else
                  f"on this input: {too_few('previous', support)}, so the maps say little."))
    st.plotly_chart(plotting.census_maps_side_by_side(maps, titles), width="stretch", key=f"lesson_fig_{n}",
                    config=_config())
    importance = lesson_importance(name, text)  # (L, H)
    quiet, loudest = quiet_and_loud(name, text)
    top = strongest_pattern(r, quiet)
    _look(f"the {label} score of every head in {len(family)} models trained by the same recipe from different seeds, "
          f"and {head_name(quiet)} of {name}, a strongly patterned head.")
    switch = _try(f"switch {head_name(quiet)} of {name} off", f"lesson_try_{n}",
                  expect=f"the next-word prediction after {tok(run.tokens[-1])} moves by KL "
                         f"{float(importance[quiet]):.3f} (0: not at all); a chart shows it before and after.")
    # Each seed's roles from its own census: the heads step 3 names, checked against this input.
    lines = [f"{seed}: " + " ".join(role_reading(seed, m, readings[seed]) + _tie(seed, m)
                                    for m in ("previous", "induction")) for seed in family]
    what = "its strongest measured pattern"
    if top:
        what = f"{measures.get(top[0]).label} {pct(top[1])} over {queries(r.support[top[0]])} on this input"
        if top[0] in ROLES:
            what += f"; {census_role(name, top[0], verb=True)}"
    lines.append(f"{head_name(quiet)} of {name} has a strong pattern ({what}); switching it off alone changes the "
                 f"prediction after {tok(run.tokens[-1])} by KL {float(importance[quiet]):.3f}, against "
                 f"{float(importance[loudest]):.3f} for {head_name(loudest)}, the head whose removal matters most. "
                 "Attention is not importance.")
    if switch and run.logits is not None:
        off_run = lesson_run(name, text, frozenset({quiet}))
        before = top_predictions(model, run.logits[-1])
        after = top_predictions(model, off_run.logits[-1])
        st.plotly_chart(plotting.predictions_figure(before, after, "Next token, before and after",
                                                    f"{head_name(quiet)} off"),
                        width="stretch", key=f"lesson_pred_{n}", config=_config())
        lines.append(f"Switched off here: the top prediction was {tok(before[0][0])} at {pct(before[0][1])} and is "
                     f"{tok(after[0][0])} at {pct(after[0][1])} (KL {next_token_kl(run.logits, off_run.logits):.3f}).")
    _saw(lines)


YES_NO_SAME = ("Yes: they read the result of the head that was switched off", "No: they run side by side")
YES_NO_KEY = ("Yes: the same input gives the same key", "No: each head picks its own")
YES_NO_LOUD = ("Yes: a strong pattern means the head matters", "No: attention is not importance")
NEXT_VIEWS = {"Layer": "every head of a layer on your sentence",
              "Inside a head": "queries, keys, values and the sum of the heads",
              "Census": "what each head does across many inputs",
              "Ablation effects": "which heads matter"}


def check_questions(name: str) -> list[Question]:
    """Three short questions drawn from steps 1, 2 and 6, answered by measurements on the inputs the student gave
    those steps (their typed sentences, else the prepared ones)."""
    one, two, six = step_text(1), step_text(2), step_text(6)
    prev, _ = layer_previous(name, read(name, lesson_run(name, one)), 0)
    same, _ = _off_moves(name, one, prev)
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
                 f"{len(set(tops))} different keys most: "
                 + ", ".join(f"{head_name((0, h))} key {k}" for h, k in enumerate(tops)) + "."),
        Question("Is the head with a strong, clear pattern always the one whose removal changes the prediction "
                 "most?", YES_NO_LOUD, YES_NO_LOUD[0] if quiet == loudest else YES_NO_LOUD[1],
                 f"On your step 6 input, switching off {head_name(quiet)} (a strongly patterned head) moves the "
                 f"prediction by KL {float(importance[quiet]):.3f}; {head_name(loudest)}, by "
                 f"{float(importance[loudest]):.3f}, the most."),
    ]


def draw_closing(name: str, text: str, n: int) -> None:
    st.markdown("\n".join(f"{i}. **{s.title}.** {s.claim}" for i, s in enumerate(STEPS[:-1], 1)))
    st.markdown("##### Check yourself")
    st.caption("Three questions from the steps. Each answer is measured on the inputs you gave those steps; "
               "nothing is kept beyond this session and its link.")
    for i, q in enumerate(check_questions(name), 1):
        ask(f"check_{i}", q, label=f"Question {i}")
    st.markdown("Every number in these steps was measured on the run in front of you; change the lesson's model "
                "above to another seed and the heads named follow it. Go on with the views:")
    for view, what in NEXT_VIEWS.items():
        left, right = st.columns([2, 3], vertical_alignment="center")
        left.button(view, key=f"lesson_open_{view}", type="tertiary", on_click=state.set_view, args=(view,),
                    icon=":material/arrow_forward:")
        right.caption(what)


STEPS: list[Step] = [
    Step("Heads run in parallel", "A layer's heads all read the same tokens at the same time; none waits for "
         "another's result.", TEXT_PARALLEL, draw_parallel, question=question_parallel),
    Step("Each head has its own projections", "Each head turns the same token into its own query, key and value "
         "with its own learned matrices, so the same input gives different scores.", TEXT_PARALLEL, draw_projections,
         question=question_projections),
    Step("Heads learn different relations", "Trained heads come to attend by different relations: nearby context, "
         "a term seen before, a fixed place.", TEXT_REPEAT, draw_patterns, question=question_patterns),
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


def run_step(step: Step, learned: str, text: str, n: int) -> None:
    """Draw one step, or say why its input cannot be run (a word the written program does not know, too long)."""
    try:
        if step.question is not None and not ask(str(n), step.question(learned, text)):
            return
        step.draw(learned, text, n)
    except InputError as err:
        st.warning(md_safe(str(err)))


def model_of(step: Step, learned: str) -> Model:
    return side_model(WRITTEN if step.written else learned)
