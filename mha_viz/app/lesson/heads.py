"""Lesson steps 1 to 3, on one layer of heads: they run in parallel (switch one off, its neighbours stay), each has
its own projections (the same token, two heads, their own queries, keys and scores), and they learn different
relations (the census's previous-token, induction and first-token heads on one input)."""
from __future__ import annotations

import hashlib
import math

import plotly.graph_objects as go
import streamlit as st
import torch

from mha_viz import measures
from mha_viz.analysis.census_run import census_inputs
from mha_viz.app.cache import side_model, side_result
from mha_viz.app.common import head_name, visible
from mha_viz.app.lesson.frame import (
    MOVED,
    Question,
    column_px,
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
from mha_viz.models import seeds
from mha_viz.plotting import lesson as lesson_figures
from mha_viz.plotting.colours import ATTN_SCALE

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


def attention_intro(name: str, text: str) -> None:
    """The first screen: what attention is, in one figure and three sentences, before any term is used: token,
    query, key, weight, head, layer and a head's name ("L0 H2")."""
    run = lesson_run(name, text)
    prev, _ = layer_previous(name, read(name, run), 0)
    query = len(run.tokens) - 1
    marked = marked_tokens(run.tokens, run.unknown)
    st.markdown("##### What attention is")
    st.markdown(
        f"1. The model reads the input as **tokens** (words and marks, numbered from 0), and for each token it asks "
        f"which earlier tokens matter for it: the token asking is the **query**, the tokens it reads are the "
        f"**keys**.\n"
        f"2. An attention **head** gives each key a **weight**, 0 to 1, the weights of one query summing to 1, and "
        f"passes on the keys' information in those proportions: below, the weights of query {query}, "
        f"{tok(run.tokens[query])}, in one head.\n"
        f"3. A **layer** has several heads side by side, each with its own weights; a head is named by its layer and "
        f"its number, counted from 0: {head_name(prev)} is head {prev[1]} of layer {prev[0]}.")
    fig = lesson_figures.query_row(run.attentions[prev][query], marked, query, head_name(prev), column_px())
    show(fig, "lesson_intro")


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
                         f"layer 0 {'stay as they are' if same < MOVED else 'change'}; the later-layer head that "
                         "moves most is drawn before and after.")
    off = {prev} if switch else set()
    shown = lesson_run(name, text, frozenset(off)) if switch else run
    # The head the step names carries its role in its title: the one to look at.
    heads_row(shown, heads, [head_name(h) + (f" · {measures.get('previous').label}" if h == prev else "")
                             for h in heads], off, key=f"lesson_fig_{n}", marked=prev)
    look(f"the {model.n_heads} heads of layer 0 read the same {len(run.tokens)} tokens at once, and each puts its "
         f"weight elsewhere: each map's row is a query, its column a key. {named(prev)} (▶, outlined) carries a "
         f"role in its title: {source}. The **census** is this app's measurement of every head on many inputs made "
         "for one question each (here: does a query attend to the token just before it?); it names a head for a "
         "pattern when the head beats a control, the same head with the pattern made impossible.", html=True)
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
        if model.n_layers > 1:
            moved = later_moved(run, shown, layer)
            change = float((shown.attentions[moved] - run.attentions[moved]).abs().max())
            st.caption(f"What moved: {head_name(moved)}, the later-layer head whose weights changed most "
                       f"(by up to {change:.3f}), before and with {head_name(prev)} off.")
            marked_ = marked_tokens(run.tokens, run.unknown)
            both = torch.stack([run.attentions[moved], shown.attentions[moved]])  # (2, Q, K)
            show(lesson_figures.heads_grid(both, marked_, [f"{head_name(moved)} · before",
                                                           f"{head_name(moved)} · {head_name(prev)} off"],
                                           [False, False], [False, False], [head_name(moved)] * 2,
                                           column=column_px()), f"lesson_moved_{n}")
            lines.append(f"{head_name(moved)} moved most: its largest change of one weight is {change:.3f}.")
    saw(lines)


def later_moved(run: AttentionRun, shown: AttentionRun, layer: int) -> Head:
    """The head after `layer` whose attention weights moved most between `run` and `shown`."""
    moved = (shown.attentions[layer + 1:] - run.attentions[layer + 1:]).abs().amax((-1, -2))  # (L', H)
    at, head = divmod(int(moved.flatten().argmax()), moved.shape[1])
    return layer + 1 + at, head


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
                    f"Which key will {head_name(a)} weight most for it?", KEY_CHOICES, answer, why)


def pick_b(inside: list[HeadInside], a: Head, query: int) -> Head:
    """The head of `a`'s layer that reads token `query` most differently from `a`: the largest total variation
    between their rows of weights."""
    rows = [h.weights[query] for h in inside]  # (K,) each
    others = [h for h in range(len(inside)) if h != a[1]]
    return a[0], max(others, key=lambda h: float((rows[h] - rows[a[1]]).abs().sum()))


def mechanism(inside: list[HeadInside], tokens: list[str], a: Head, b: Head, query: int) -> go.Figure:
    """Heads `a` (the step's named head, marked) and `b` on the same tokens: their queries, keys and values, the
    scaled scores with the causal mask, the softmax and the weighted sum of values, read off the run's inside, the
    row of `query` outlined."""
    heads = [dict(name=head_name(h), q=inside[h[1]].q, k=inside[h[1]].k, v=inside[h[1]].v,
                  scores=inside[h[1]].scores, weights=inside[h[1]].weights, marked=h == a) for h in (a, b)]
    return lesson_figures.mechanism_figure(tokens, heads, query, column_px())


def scale_words(head: HeadInside, query: int) -> tuple[float, str]:
    """(the factor the model multiplies q·k by for `query`, the sentence that explains it): 1/√dh, and where the
    model has a further factor per query, what that factor is."""
    dh = head.q.shape[-1]
    extra = 1.0 if head.query_scale is None else float(head.query_scale[query])
    scale = head.scale * extra
    words = f"The scores are q·k times {scale:.3f} for this query: 1/√{dh} = {dh ** -0.5:.3f}, the textbook factor"
    if abs(extra - 1.0) < 1e-4:
        return scale, words + " that keeps the scores from growing with the number of dimensions."
    seen = query + 1  # keys a causal query sees: itself and the tokens before it
    if abs(extra - math.log(seen)) < 1e-3:
        return scale, (words + f", times ln {seen} = {extra:.3f}, because this model multiplies each query's "
                       f"scores by the natural log of how many keys it sees ({seen} here; Scalable-Softmax, "
                       "Nakanishi 2025): without it a query late in a long input would spread its weight thinner.")
    return scale, words + f", times {extra:.3f}, a factor this model applies to this query's scores."


def draw_projections(name: str, text: str, n: int) -> None:
    run = lesson_run(name, text)
    layer = 0
    inside = lesson_inside(name, text, layer)
    a, source = layer_previous(name, read(name, run), layer)
    content = [i for i in range(len(run.tokens)) if i not in set(run.special)]
    marked = marked_tokens(run.tokens, run.unknown)  # an unknown word's label says so, as on every axis
    asked = content[-1]  # the token the question asked about
    # The box is keyed by the input: a new sentence starts it on the question's token, never on a position (or a
    # token) of the sentence before.
    digest = hashlib.blake2s(text.encode(), digest_size=4).hexdigest()
    query = st.selectbox("Try: follow another query token", content, index=len(content) - 1,
                         format_func=lambda i: f"{i}: {visible(marked[i])}", key=f"lesson_try_{n}_{digest}")
    if query != asked:
        st.caption(f"The figures and the lines below follow query {query}, {tok(run.tokens[query])}; the question "
                   f"above was about query {asked}, {tok(run.tokens[asked])}.")
    rows = {h: inside[h].weights[query] for h in range(len(inside))}  # (K,) each
    b = pick_b(inside, a, query)
    dh = inside[a[1]].q.shape[-1]
    st.caption(f"How {head_name(a)} (▶) and {head_name(b)} make their outputs from the same {len(run.tokens)} "
               f"tokens; the black outline follows query {query}. Rows: tokens. Q, K, V: each token's query, key and "
               f"value in this head, {dh} numbers each (columns: the head's dimensions; red +, blue −), each made by "
               "the head's own matrix from the same token vector. q·k scaled: each query row against every key "
               "column; grey is the **causal mask**, a later key the query may not read. Softmax: each row of "
               "scores made into weights that sum to 1, the attention pattern. Weights × V: each query's weighted "
               "sum of the values, the head's output for that token.")
    show(mechanism(inside, marked, a, b, query), f"lesson_mech_{n}")
    fig = go.Figure()
    labels = [f"{i}:{visible(t)}" for i, t in enumerate(marked)]
    for head, colour in ((a, "#08519c"), (b, "#c44e52")):
        fig.add_trace(go.Bar(x=labels, y=rows[head[1]].numpy(), name=head_name(head), marker_color=colour))
    fig.update_layout(template="none", barmode="group", height=300, margin=dict(l=50, r=10, t=40, b=90),
                      title=dict(text=f"Query {query}: row {query} of each softmax, side by side",
                                 font=dict(size=13)),
                      yaxis=dict(title="weight", range=[0, 1]), legend=dict(orientation="h", y=1.12, x=1,
                                                                             xanchor="right"),
                      xaxis=dict(tickmode="array", tickvals=labels, tickfont=dict(size=10), title="key"))
    st.plotly_chart(fig, width="stretch", key=f"lesson_fig_{n}", config=figure_config())
    qa, qb = inside[a[1]].q[query], inside[b[1]].q[query]  # (dh,) each
    top_a, top_b = int(rows[a[1]].argmax()), int(rows[b[1]].argmax())
    scale, why_scale = scale_words(inside[a[1]], query)
    out_a = rows[a[1]] @ inside[a[1]].v  # (dh,)
    look(f"token {query}, {tok(run.tokens[query])}, enters {named(a)} and {named(b)} as the same vector "
         f"({source}); each head multiplies it by its own query matrix (row {query} of its Q) and compares "
         f"it with keys made by its own key matrix (K): row {query} of q·k, then of the softmax; the softmax's "
         "weights then mix the rows of V into row {query} of the output.".replace("{query}", str(query)), html=True)
    saw([f"{head_name(a)}'s query for {tok(run.tokens[query])} scores key {top_a}, {tok(run.tokens[top_a])}, "
         f"highest: weight {rows[a[1]][top_a]:.2f}.",
         f"{head_name(b)}'s query for the same token scores key {top_b}, {tok(run.tokens[top_b])}, highest: "
         f"weight {rows[b[1]][top_b]:.2f}.",
         why_scale + f" (scale {scale:.3f}.) The keys after the query are masked, so each softmax row spreads its "
         "weight over the query and the tokens before it.",
         f"{head_name(a)}'s output for query {query} is its weights times V: {dh} numbers, of length "
         f"{float(out_a.norm()):.2f}, mostly the value of key {top_a}.",
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
    who = head_name(head)
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
    draw_relation(name, n)


# The relations a causal model's census measures, most telling first: pre-verb→subject is what subject-verb agreement
# across an attractor needs (at the attractor the verb comes next, and it agrees with the subject, not the nearer
# noun).
RELATION_ORDER = ("pre-verb→subject", "verb→subject", "object→verb", "noun→det", "noun→adj")
CENSUS_CAVEAT = ("The census's caveat: a high score says where a head's attention goes; it does not label what the "
                 "head is for, and most heads mix several patterns. This relation is read on the census's template "
                 "sentences only (“the [adj] noun preposition the [adj] noun verb …”, the second noun of the other "
                 "number), not on every sentence.")


def structural_head(name: str) -> tuple[str, Head] | None:
    """(relation, head): the first relation of `RELATION_ORDER` the census names a head for, that head beating the
    relation's best fixed offset; None where it names none."""
    census = lesson_census(name)
    for rel in RELATION_ORDER:
        named_ = census.named(rel) if rel in census.scores else []
        if named_ and float(census.scores[rel][named_[0][0]]) > census.baseline(rel):
            return rel, named_[0][0]
    return None


def relation_sentence(name: str, rel: str) -> tuple[str, int, int] | None:
    """(sentence, query position, key position) from the census's own template sentences: the first whose relation
    `rel` links a query to a key that is neither the word just before it nor the census's best fixed offset for
    `rel`, so the relation and the nearest word (and the fixed offset) disagree. Positions are token positions
    (a sentence the tokenizer does not read word for word is skipped). None where none is."""
    def make():
        model, census = side_model(name), lesson_census(name)
        best = int(census.offset[rel][0]) if rel in census.offset else -1
        for item in census_inputs(model)["templates"]:
            for q, k in item.pairs.get(rel, ()):
                if k == q - 1 or k - q == best:
                    continue
                run = lesson_run(name, item.text)
                words = [i for i in range(len(run.tokens)) if i not in set(run.special)]
                if len(words) != len(item.words) or set(run.unknown):
                    break
                return item.text, words[q], words[k]
        return None
    return side_result(("lesson-relation", rel), name, make)


def draw_relation(name: str, n: int) -> None:
    """A head whose attention follows a relation of grammar, on a sentence where that relation and the nearest word
    disagree, measured against the fixed-offset baseline, with the census's caveat."""
    st.markdown("##### A relation of grammar")
    found = structural_head(name)
    picked = found and relation_sentence(name, found[0])
    if not found or not picked:
        others = [m for m in seeds(name.split("#")[0]) if m != name and structural_head(m)]
        st.caption(f"The census of {name} names no head whose attention follows a grammatical relation better than "
                   "the best fixed offset, so this part has nothing to show on this model: a seed need not grow "
                   "such a head."
                   + (f" On {listed(others)} the census names one: pick one as the lesson's model above to see "
                      "it." if others else ""))
        return
    rel, head = found
    sentence, q, k = picked
    census, run = lesson_census(name), lesson_run(name, sentence)
    best = int(census.offset[rel][0])
    at = q + best  # the key the best fixed offset reads
    row = run.attentions[head][q]  # (K,)
    marked = marked_tokens(run.tokens, run.unknown)
    labels = lesson_figures.positions(marked)
    z = run.attentions[head].numpy()
    st.caption(f"{name} is trained on sentences whose verb must agree with its subject across a nearer noun of the "
               f"other number (“the keys to the cabinet are”). The census measures relations such as {rel}: "
               f"{measures.RELATIONS[rel]}. Below, {head_name(head)} on one of the census's sentences; the black "
               f"outline is query {q}, {tok(run.tokens[q])}.")
    show(lesson_figures.panel_grid([[lesson_figures.Panel(
        z, f"{head_name(head)} · {rel}", labels, labels, ATTN_SCALE, 0.0, 1.0, "weight", True, head_name(head),
        row=q)]], column=column_px()), f"lesson_relation_{n}")
    look(f"query {q}, {tok(run.tokens[q])}: the relation points to {tok(run.tokens[k])} at {k}, {q - k} back; the "
         f"nearest word is {tok(run.tokens[q - 1])}, 1 back; the best fixed offset, {-best} back, is "
         f"{tok(run.tokens[at]) if 0 <= at < len(run.tokens) else 'before the sentence'}.")
    off_weight = float(row[at]) if 0 <= at < len(run.tokens) else 0.0
    score, base = float(census.scores[rel][head]), float(census.offset[rel][1])
    saw([f"On this sentence {head_name(head)} puts {pct(float(row[k]))} of query {q}'s weight on the word the relation "
         f"names, {pct(float(row[q - 1]))} on the nearest word and {pct(off_weight)} on the word {-best} back.",
         f"Over the census's {census.n_inputs[rel]} template sentences, {head_name(head)} attends most to the "
         f"relation's word in {pct(score)} of them; the best fixed offset, always the word {-best} back, scores "
         f"{pct(base)}: the head follows the relation, not a distance. {census.naming_words(rel)}",
         CENSUS_CAVEAT])


def _census_inputs(measure: str) -> str:
    """Which of the census's inputs a measure is read on, in words ("repeated random sequences")."""
    return " and ".join(measures.INPUTS[kind] for kind in measures.get(measure).census)

