"""Lesson steps 1 to 3, on one layer of heads: they run in parallel (switch one off, its neighbours stay), each has
its own projections (the same token, two heads, their own queries, keys and scores), and they learn different
relations (the census's previous-token, induction and first-token heads on one input)."""
from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from mha_viz import measures
from mha_viz.app.cache import side_model
from mha_viz.app.common import head_name, visible
from mha_viz.app.lesson.frame import (
    MOVED,
    Question,
    figure_config,
    heads_row,
    look,
    named,
    off_moves,
    saw,
    show,
    try_switch,
)
from mha_viz.app.lesson.readings import (
    ROLES,
    TEXT_REPEAT,
    argmax_head,
    census_role,
    layer_previous,
    lesson_census,
    lesson_inside,
    lesson_run,
    listed,
    meaning,
    pct,
    read,
    reading_line,
    role_heads,
    role_reading,
    tok,
)
from mha_viz.app.names import marked_tokens
from mha_viz.contract import AttentionRun, Head, HeadInside
from mha_viz.plotting import lesson as lesson_figures

PARALLEL_CHOICES = ("Only the other heads of layer 0", "Only the heads of the later layers", "Both", "Neither")


def question_parallel(name: str, text: str) -> Question:
    prev, _ = layer_previous(name, read(name, lesson_run(name, text)), 0)
    same, later = off_moves(name, text, prev)
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
    same, later = off_moves(name, text, prev)
    switch = try_switch(f"switch {head_name(prev)} off", f"lesson_try_{n}",
                  "Its output becomes 0; every later layer is recomputed.",
                  expect=f"its own map stays (it is still computed, only its output is dropped); the other heads of "
                         f"layer 0 {'stay as they are' if same < MOVED else 'change'}.")
    off = {prev} if switch else set()
    shown = lesson_run(name, text, frozenset(off)) if switch else run
    # The head the step names carries its role in its title: the one to look at.
    heads_row(shown, heads, [head_name(h) + (f" · {measures.get('previous').label}" if h == prev else "")
                             for h in heads], off, key=f"lesson_fig_{n}", marked=prev)
    look(f"the {model.n_heads} heads of layer 0 read the same {len(run.tokens)} tokens at once, and each puts its "
         f"weight elsewhere. {named(prev)} (▶, outlined) carries a role in its title: {source}.", html=True)
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
    saw(lines)


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


def pick_b(inside: list[HeadInside], a: Head, query: int) -> Head:
    """The head of `a`'s layer that reads token `query` most differently from `a`: the largest total variation
    between their rows of weights."""
    rows = [h.weights[query] for h in inside]  # (K,) each
    others = [h for h in range(len(inside)) if h != a[1]]
    return a[0], max(others, key=lambda h: float((rows[h] - rows[a[1]]).abs().sum()))


def mechanism(inside: list[HeadInside], tokens: list[str], a: Head, b: Head) -> go.Figure:
    """Heads `a` (the step's named head, marked) and `b` on the same tokens: their queries and
    keys, the scaled scores with the causal mask, the softmax, read off the run's inside."""
    heads = [dict(name=head_name(h), q=inside[h[1]].q,
                  k=inside[h[1]].k, scores=inside[h[1]].scores, weights=inside[h[1]].weights, marked=h == a)
             for h in (a, b)]
    return lesson_figures.mechanism_figure(tokens, heads)


def _scale(head: HeadInside, query: int) -> float:
    """The factor this model multiplies q·k by for `query` (the scores over the raw dot products, at the key
    where the dot product is largest in size): 1/√dh, times a length factor where the model has one."""
    dots = head.k[: query + 1] @ head.q[query]  # (K,)
    key = int(dots.abs().argmax())
    return float(head.scores[query, key] / dots[key])


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
    b = pick_b(inside, a, query)
    dh = inside[a[1]].q.shape[-1]
    st.caption(f"How {head_name(a)} (▶, the {measures.get('previous').label} head) and {head_name(b)} make their "
               f"patterns from the same {len(run.tokens)} tokens. "
               f"Rows: tokens. Queries Q and keys K: each token's {dh} numbers in this head (red +, blue −). "
               "q·k, scaled: each query row against every key (grey: a later key, which the causal mask hides). "
               "Softmax: each row of scores made into weights that sum to 1, the attention pattern.")
    show(mechanism(inside, marked, a, b), f"lesson_mech_{n}")
    fig = go.Figure()
    labels = [f"{i}:{visible(t)}" for i, t in enumerate(marked)]
    for head, colour in ((a, "#08519c"), (b, "#c44e52")):
        fig.add_trace(go.Bar(x=labels, y=rows[head[1]].numpy(), name=head_name(head), marker_color=colour))
    fig.update_layout(template="none", barmode="group", height=300, margin=dict(l=50, r=10, t=40, b=80),
                      title=dict(text=f"Query {query}: row {query} of each softmax, side by side",
                                 font=dict(size=13)),
                      yaxis=dict(title="weight", range=[0, 1]), legend=dict(orientation="h", y=1.12),
                      xaxis=dict(tickmode="array", tickvals=labels, tickfont=dict(size=9)))
    st.plotly_chart(fig, width="stretch", key=f"lesson_fig_{n}", config=figure_config())
    qa, qb = inside[a[1]].q[query], inside[b[1]].q[query]  # (dh,) each
    top_a, top_b = int(rows[a[1]].argmax()), int(rows[b[1]].argmax())
    scale = _scale(inside[a[1]], query)
    look(f"token {query}, {tok(run.tokens[query])}, enters {named(a)} and {named(b)} as the same vector "
         f"({source}); each head multiplies it by its own query matrix (row {query} of its Q) and compares "
         f"it with keys made by its own key matrix (K): row {query} of q·k, then of the softmax.", html=True)
    saw([f"{head_name(a)}'s query for {tok(run.tokens[query])} scores key {top_a}, {tok(run.tokens[top_a])}, "
         f"highest: weight {rows[a[1]][top_a]:.2f}.",
         f"{head_name(b)}'s query for the same token scores key {top_b}, {tok(run.tokens[top_b])}, highest: "
         f"weight {rows[b[1]][top_b]:.2f}.",
         f"The scores are q·k times {scale:.3f} for this query (1/√{dh} = {dh ** -0.5:.3f}"
         + ("" if abs(scale - dh ** -0.5) < 1e-4 else ", times the model's factor for a query that sees "
            f"{query + 1} keys") + "); the keys after the query are masked, so each softmax row spreads its weight "
         "over the query and the tokens before it.",
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
    by_role = {m: role_heads(name, m) for m in ROLES}
    asked = by_role["induction"][0] if by_role["induction"] else None  # the head the question asks about
    heads = list(dict.fromkeys(h for m in ROLES for h in by_role[m]))
    shared = {h: [m for m in ROLES if h in by_role[m]] for h in heads}
    if heads:
        titles = [" · ".join([head_name(h)] + [measures.get(m).label for m in shared[h]]) for h in heads]
        heads_row(run, heads, titles, key=f"lesson_fig_{n}", marked=asked)
    look((f"{named(asked)} (▶, outlined) is the head the question asked about. " if asked else "")
         + f"{len(heads)} heads of one model on one input, each named by the model's census, which measured every "
         "head on many inputs made for the question: "
         + "; ".join(f"{census_role(name, m)} ({meaning(m)})" for m in ROLES) + ".", html=True)
    st.caption("Try: type a sentence in the box above where no word comes back: induction then has no query to "
               "average over. Then one where a name comes back twice, and see whether this input agrees with the "
               "census.")
    lines = [role_reading(name, m, r) for m in ROLES]
    lines += [census.naming_words(m) for m in ROLES if len(by_role[m]) > 1]  # a tie, in the census's own words
    for h, roles in shared.items():
        if len(roles) > 1:  # the evidence for each name, so neither reads as the head's one role
            both = listed([measures.get(m).label for m in roles])
            lines.append(f"{head_name(h)} is named for both {both}: the census reads each on its own inputs, and "
                         f"{head_name(h)} beats its control on each ("
                         + "; ".join(f"{measures.get(m).label} on {_census_inputs(m)}: {census.evidence(m, h)}"
                                     for m in roles) + ").")
    if text != TEXT_REPEAT:
        p = read(name, lesson_run(name, TEXT_REPEAT))
        lines.append("On the prepared sentence: " + " ".join(role_reading(name, m, p) for m in ROLES))
    saw(lines)


def _census_inputs(measure: str) -> str:
    """Which of the census's inputs a measure is read on, in words ("repeated random sequences")."""
    return " and ".join(measures.INPUTS[kind] for kind in measures.get(measure).census)

