"""The Lesson's steps: one claim of multi-head attention each, shown on a live model and told from numbers measured
on that run. Every head a step names is found by a measurement (the registry's measures, a head's contribution, a
switched-off head's effect), never typed, so a step follows when the student's input or the lesson's model changes.

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
from mha_viz.analysis.importance import head_importance
from mha_viz.analysis.scores import run_scores, top_badges
from mha_viz.app.cache import side_model, side_result
from mha_viz.app.common import chart_config, head_name, md_safe, top_predictions, visible
from mha_viz.contract import AttentionRun, Head, HeadInside, InputError, Model
from mha_viz.models import seeds

WRITTEN = "written-three-heads"  # three heads side by side in one layer, each written by one line of a program
TEXT_PARALLEL = "the keys to the old cabinet are on the table , so anna gave the keys to ben ."
TEXT_REPEAT = "anna berg went to the market . tom lind saw anna berg at the park ."
TEXT_PREDICT = "anna berg went to the market . tom lind saw anna"  # the next word can be copied from earlier
TEXT_WRITTEN = "b b a b b a"
PATTERNED = 0.5  # a head whose strongest pattern is this far above uniform attention counts as strongly patterned
PATTERNS = ("previous", "induction", "first")  # step 3's relations: nearby context, a repeated term, a fixed place


# -- measurements, shared by the sessions through the run cache -------------------------------------------------
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


def scores_of(name: str, run: AttentionRun) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Every registered one-input measure of `run`, (L, H) each, and what uniform attention would score."""
    return run_scores(run, side_model(name).info.causal)


def argmax_head(scores: torch.Tensor) -> Head:
    """The head with the highest score of an (L, H) map (NaN never wins)."""
    flat = scores.nan_to_num(float("-inf")).flatten()
    layer, head = divmod(int(flat.argmax()), scores.shape[1])
    return layer, head


def strongest_pattern(scores: dict, baselines: dict, head: Head) -> tuple[str, float] | None:
    """A head's measure furthest above uniform attention (a registered badge), or None when none is 0.1 above."""
    found = top_badges(scores, baselines, head[0], head[1], n=1)
    return found[0] if found else None


def pattern_excess(scores: dict, baselines: dict) -> torch.Tensor:
    """(L, H): how far each head's strongest badge measure lies above its uniform baseline."""
    excess = torch.stack([scores[m] - baselines[m] for m in measures.BADGES])  # (M, L, H)
    return excess.nan_to_num(float("-inf")).amax(0)  # (L, H)


def pct(value: float) -> str:
    return f"{value:.0%}"


def tok(token: str) -> str:
    """A token inside the step's Markdown, as typed."""
    return f"“{md_safe(visible(token))}”"


# -- the steps ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    title: str
    claim: str
    text: str  # the prepared input; the student may replace it
    draw: Callable[[str, str, int], None]  # (learned model, input, step number) -> draws the step
    written: bool = False  # runs on the written model, not the lesson's learned one


def _heads_row(run: AttentionRun, heads: list[Head], titles: list[str], off: set[Head] = frozenset(),
               key: str = "") -> None:
    patterns = torch.stack([run.attentions[h] for h in heads])  # (N, Q, K)
    fig = plotting.heads_row_figure(patterns, run.tokens, titles, [h in off for h in heads],
                                    height=int(720 / max(len(heads), 3)), contrast="sqrt")
    st.plotly_chart(fig, width="stretch", key=key, config=chart_config())


def _look(text: str) -> None:
    st.markdown(f"**Look at:** {text}")


def _saw(lines: list[str]) -> None:
    st.markdown("**What you just saw** (measured on this run)\n\n" + "\n".join(f"- {line}" for line in lines))


def _try(label: str, key: str, help: str = "") -> bool:
    return st.toggle(f"Try: {label}", key=key, help=help or None)


def draw_parallel(name: str, text: str, n: int) -> None:
    model, run = side_model(name), lesson_run(name, text)
    scores, base = scores_of(name, run)
    layer = 0
    heads = [(layer, h) for h in range(model.n_heads)]
    prev = argmax_head(scores["previous"][layer:layer + 1])  # the layer's previous-token head, by measurement
    prev = (layer, prev[1])
    switch = _try(f"switch {head_name(prev)} off", f"lesson_try_{n}",
                  "Its output becomes 0; every later layer is recomputed.")
    off = {prev} if switch else set()
    shown = lesson_run(name, text, frozenset(off)) if switch else run
    # The head the step names carries its measure in its title: the one to look at.
    _heads_row(shown, heads, [head_name(h) + (f" · {measures['previous'].label}" if h == prev else "")
                              for h in heads], off, key=f"lesson_fig_{n}")
    _look(f"the {model.n_heads} heads of layer 0 read the same {len(run.tokens)} tokens at once, and each puts its "
          f"weight elsewhere. {head_name(prev)} has the highest {measures['previous'].label} score of the layer.")
    lines = []
    for h in heads:
        top = strongest_pattern(scores, base, h)
        lines.append(f"{head_name(h)}: " + (f"{measures[top[0]].label} {pct(top[1])} (uniform attention: "
                                            f"{pct(base[top[0]])})" if top else
                                            "no measured pattern 10 points above uniform attention"))
    if switch:
        same = [h for h in heads if h != prev]
        moved_same = max(float((shown.attentions[h] - run.attentions[h]).abs().max()) for h in same)
        moved_later = float((shown.attentions[layer + 1:] - run.attentions[layer + 1:]).abs().max()) \
            if model.n_layers > 1 else 0.0
        lines.append(f"With {head_name(prev)} off, the other heads of layer 0 changed by at most {moved_same:.3f} in "
                     f"any weight: they run beside it on the same input, not after it. The later layers, which read "
                     f"its output, changed by up to {moved_later:.3f}.")
    _saw(lines)


def draw_projections(name: str, text: str, n: int) -> None:
    run = lesson_run(name, text)
    scores, _ = scores_of(name, run)
    layer = 0
    inside = lesson_inside(name, text, layer)
    a = (layer, argmax_head(scores["previous"][layer:layer + 1])[1])
    content = [i for i in range(len(run.tokens)) if i not in set(run.special)]
    query = st.selectbox("Try: pick another query token", content, index=len(content) - 1,
                         format_func=lambda i: f"{i}: {visible(run.tokens[i])}", key=f"lesson_try_{n}")
    rows = {h: inside[h].weights[query] for h in range(len(inside))}  # (K,) each
    # The head that reads this token most differently from A: the largest total variation between the two rows.
    others = [h for h in rows if h != a[1]]
    b = (layer, max(others, key=lambda h: float((rows[h] - rows[a[1]]).abs().sum())))
    fig = go.Figure()
    labels = [f"{i}:{visible(t)}" for i, t in enumerate(run.tokens)]
    for head, colour in ((a, "#08519c"), (b, "#c44e52")):
        fig.add_trace(go.Bar(x=labels, y=rows[head[1]].numpy(), name=head_name(head), marker_color=colour))
    fig.update_layout(template="none", barmode="group", height=300, margin=dict(l=50, r=10, t=40, b=80),
                      title=dict(text=f"Query {query}: attention weight on each key, two heads", font=dict(size=13)),
                      yaxis=dict(title="weight", range=[0, 1]), legend=dict(orientation="h", y=1.12))
    st.plotly_chart(fig, width="stretch", key=f"lesson_fig_{n}", config=chart_config())
    qa, qb = inside[a[1]].q[query], inside[b[1]].q[query]  # (dh,) each
    top_a, top_b = int(rows[a[1]].argmax()), int(rows[b[1]].argmax())
    _look(f"token {query}, {tok(run.tokens[query])}, enters {head_name(a)} and {head_name(b)} as the same vector; "
          "each head multiplies it by its own query matrix and compares it with keys made by its own key matrix.")
    _saw([f"{head_name(a)}'s query for {tok(run.tokens[query])} scores key {top_a}, {tok(run.tokens[top_a])}, "
          f"highest: weight {rows[a[1]][top_a]:.2f}.",
          f"{head_name(b)}'s query for the same token scores key {top_b}, {tok(run.tokens[top_b])}, highest: "
          f"weight {rows[b[1]][top_b]:.2f}.",
          f"Made from the same input vector by two matrices, the two queries ({qa.shape[-1]} numbers each) have "
          f"lengths {float(qa.norm()):.2f} and {float(qb.norm()):.2f}; the two rows of weights differ by "
          f"{float((rows[a[1]] - rows[b[1]]).abs().sum()) / 2:.2f} "
          "(total variation: 0 = the same, 1 = no overlap)."])


def _pattern_heads(scores: dict) -> list[tuple[str, Head]]:
    return [(m, argmax_head(scores[m])) for m in PATTERNS]


def draw_patterns(name: str, text: str, n: int) -> None:
    run = lesson_run(name, text)
    scores, base = scores_of(name, run)
    found = _pattern_heads(scores)
    heads = list(dict.fromkeys(h for _, h in found))
    titles = [" · ".join([head_name(h)] + [measures[m].label for m, g in found if g == h]) for h in heads]
    _heads_row(run, heads, titles, key=f"lesson_fig_{n}")
    _look(f"{len(heads)} heads of one model on one input, each chosen as the head with the highest score of one "
          "measure: "
          + "; ".join(f"{head_name(h)} for {measures[m].label} ({measures[m].meaning[0].lower()}"
                      f"{measures[m].meaning[1:].rstrip('.')})" for m, h in found) + ".")
    st.caption("Try: type a sentence in the box above where no name comes back, and watch the induction score "
               "fall; then one where a name comes back twice.")
    lines = [f"{head_name(h)}: {measures[m].label} {float(scores[m][h]):.2f} (uniform attention: {base[m]:.2f})"
             for m, h in found]
    if text != TEXT_REPEAT:
        prepared = lesson_run(name, TEXT_REPEAT)
        p_scores, _ = scores_of(name, prepared)
        lines.append("On the prepared sentence the same heads scored "
                     + ", ".join(f"{measures[m].label} {float(p_scores[m][h]):.2f} at {head_name(h)}"
                                 for m, h in _pattern_heads(p_scores)) + ".")
    _saw(lines)


def draw_combining(name: str, text: str, n: int) -> None:
    model, run = side_model(name), lesson_run(name, text)
    layer = model.n_layers // 2  # a middle layer: it reads the first layer's output and feeds the last
    position = len(run.tokens) - 1
    inside = lesson_inside(name, text, layer)
    contributions = torch.stack([h.contribution[position] for h in inside])  # (H, D)
    combo = combine_heads(contributions, inside[0].bias)
    biggest = (layer, int(combo.along.argmax()))
    switch = _try(f"switch {head_name(biggest)} off", f"lesson_try_{n}",
                  "Its contribution becomes 0; the layer's output is the sum of what is left.")
    names = [head_name((layer, h)) for h in range(model.n_heads)]
    off = frozenset({biggest}) if switch else frozenset()
    shown = combo
    if switch:  # the same token's sum with the head's output zeroed (the later heads of this layer are unchanged)
        after = lesson_inside(name, text, layer, off)
        shown = combine_heads(torch.stack([h.contribution[position] for h in after]), after[0].bias)
    fig = plotting.heads_combine_figure(names, shown.norms, shown.along, [(layer, h) in off for h in
                                                                         range(model.n_heads)],
                                        shown.bias_along, shown.total_norm,
                                        f"Layer {layer}, token {position}: the heads add up"
                                        + (f", {head_name(biggest)} off" if switch else ""))
    st.plotly_chart(fig, width="stretch", key=f"lesson_fig_{n}", config=chart_config())
    _look(f"the dark bars: each head's share of what layer {layer} writes for the last token, "
          f"{tok(run.tokens[position])}. They add up, with the bias, to the total.")
    summed = float(combo.along.sum()) + combo.bias_along
    lines = [f"The heads' shares along the total, plus the bias, sum to {summed:.3f};"
             f" the total's length is {combo.total_norm:.3f}: the layer's output is the heads' outputs added.",
             f"{head_name(biggest)} adds the most along the total: {float(combo.along[biggest[1]]):.3f}."]
    if switch:
        cos = float(torch.nn.functional.cosine_similarity(shown.total, combo.total, dim=0))
        lines.append(f"With {head_name(biggest)} off, the layer's output for this token has length "
                     f"{shown.total_norm:.3f} (it was {combo.total_norm:.3f}) and cosine {cos:.2f} with the output "
                     "before.")
        if run.logits is not None:
            kl = next_token_kl(run.logits, lesson_run(name, text, off).logits)
            lines.append(f"The model's next-token prediction moved by KL {kl:.3f} nats.")
    _saw(lines)


def draw_written(name: str, text: str, n: int) -> None:
    model, run = side_model(WRITTEN), lesson_run(WRITTEN, text)
    written = model.written_heads()
    scores, base = scores_of(WRITTEN, run)
    heads = sorted(written)
    prev = next((h for h in heads if written[h].pattern == "previous"), heads[0])
    switch = _try(f"switch {head_name(prev)} off", f"lesson_try_{n}",
                  "Its output becomes 0: the program's line that reads it gets nothing.")
    off = {prev} if switch else set()
    shown = lesson_run(WRITTEN, text, frozenset(off)) if switch else run
    _heads_row(shown, heads, [f"{head_name(h)} · " + (measures[written[h].pattern].label if written[h].pattern
                                                       else "no measured pattern") for h in heads], off,
               key=f"lesson_fig_{n}")
    _look(f"{len(heads)} heads that a program wrote; each selects what its line of the program says.")
    st.table({"head": [head_name(h) for h in heads], "the program wrote": [written[h].source_line for h in heads],
              "it selects": [written[h].selects for h in heads]})
    lines = []
    for h in heads:
        m = written[h].pattern
        if m:
            lines.append(f"{head_name(h)}: the program wrote that {written[h].selects}; its "
                         f"{measures[m].label} score on this input is {float(scores[m][h]):.2f} (uniform attention: "
                         f"{base[m]:.2f}). Here the label is true.")
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


def draw_learned(name: str, text: str, n: int) -> None:
    model, run = side_model(name), lesson_run(name, text)
    scores, base = scores_of(name, run)
    family = seeds(name) or [name]
    maps, titles, placed = [], [], []
    for seed in family:
        s, _ = scores_of(seed, lesson_run(seed, text))
        maps.append(s["previous"])
        titles.append(seed)
        placed.append((seed, argmax_head(s["previous"]), argmax_head(s["induction"])))
    st.caption(f"The {measures['previous'].label} score of every head (rows: layers, columns: heads) in each model "
               "the recipe trained, on this input.")
    st.plotly_chart(plotting.census_maps_side_by_side(maps, titles), width="stretch", key=f"lesson_fig_{n}",
                    config=chart_config())
    importance = lesson_importance(name, text)  # (L, H)
    excess = pattern_excess(scores, base)  # (L, H)
    patterned = excess >= PATTERNED
    pool = importance.masked_fill(~patterned, float("inf")) if bool(patterned.any()) else -excess
    quiet = argmax_head(-pool)
    loudest = argmax_head(importance)
    top = strongest_pattern(scores, base, quiet)
    _look(f"the {measures['previous'].label} score of every head in {len(family)} models trained by the same recipe "
          f"from different seeds, and {head_name(quiet)} of {name}, a strongly patterned head.")
    switch = _try(f"switch {head_name(quiet)} of {name} off", f"lesson_try_{n}")
    lines = [f"{seed}: {measures['previous'].label} is highest at {head_name(p)}, {measures['induction'].label} at "
             f"{head_name(i)}." for seed, p, i in placed]
    what = f"{measures[top[0]].label} {pct(top[1])}" if top else "its strongest measured pattern"
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
                        width="stretch", key=f"lesson_pred_{n}", config=chart_config())
        lines.append(f"Switched off here: the top prediction was {tok(before[0][0])} at {pct(before[0][1])} and is "
                     f"{tok(after[0][0])} at {pct(after[0][1])} (KL {next_token_kl(run.logits, off_run.logits):.3f}).")
    _saw(lines)


def draw_closing(name: str, text: str, n: int) -> None:
    st.markdown("\n".join(f"{i}. **{s.title}.** {s.claim}" for i, s in enumerate(STEPS[:-1], 1)))
    st.markdown("Every number in these steps was measured on the run in front of you; change the lesson's model "
                "above to another seed and the heads named follow it. Go on with the views: **Layer** (every head "
                "of a layer on your sentence), **Inside a head** (queries, keys, values and the sum of the heads), "
                "**Census** (what each head does across many inputs) and **Ablation effects** (which heads matter).")


STEPS: list[Step] = [
    Step("Heads run in parallel", "A layer's heads all read the same tokens at the same time; none waits for "
         "another's result.", TEXT_PARALLEL, draw_parallel),
    Step("Each head has its own projections", "Each head turns the same token into its own query, key and value "
         "with its own learned matrices, so the same input gives different scores.", TEXT_PARALLEL, draw_projections),
    Step("Heads learn different relations", "Trained heads come to attend by different relations: nearby context, "
         "a term seen before, a fixed place.", TEXT_REPEAT, draw_patterns),
    Step("The outputs are combined", "Each head's output goes through its slice of the output projection, and the "
         "layer's output is their sum.", TEXT_PARALLEL, draw_combining),
    Step("Written heads are labeled modules", "In a model compiled from a program each head does what one line "
         "wrote: the one case where a head's label is true.", TEXT_WRITTEN, draw_written, written=True),
    Step("Learned heads are pathways, not labels", "The same recipe puts the roles on different heads, and a head "
         "with a strong pattern can matter little: attention is not importance.", TEXT_PREDICT, draw_learned),
    Step("What to take away", "Multi-head attention is several learned pathways side by side; measure what a head "
         "does before naming it.", "", draw_closing),
]


def run_step(step: Step, learned: str, text: str, n: int) -> None:
    """Draw one step, or say why its input cannot be run (a word the written program does not know, too long)."""
    try:
        step.draw(learned, text, n)
    except InputError as err:
        st.warning(md_safe(str(err)))


def model_of(step: Step, learned: str) -> Model:
    return side_model(WRITTEN if step.written else learned)
