"""Lesson steps 5 and 6: a head a program wrote is a labeled module (switch it off and the program's output
changes where that line decides); learned heads are pathways (the same recipe puts a role on different heads in
each seed, and a strongly patterned head can matter little)."""
from __future__ import annotations

import streamlit as st

from mha_viz import measures, plotting
from mha_viz.analysis import next_token_kl
from mha_viz.analysis.twins import BROKEN_AT, DISTANCE, TwinComparison, compare_twins
from mha_viz.app.cache import side_model, side_result
from mha_viz.app.common import NO_VALUE_NOTE, head_name, md_safe, program_value, top_predictions, visible
from mha_viz.app.lesson.frame import (
    TYPED,
    Question,
    column_px,
    figure_config,
    heads_row,
    look,
    named,
    saw,
    try_switch,
)
from mha_viz.app.lesson.readings import (
    FLOOR,
    PATTERNED,
    ROLES,
    WRITTEN,
    argmax_head,
    census_role,
    heads_words,
    lesson_census,
    lesson_importance,
    lesson_run,
    listed,
    pattern_excess,
    pct,
    queries,
    read,
    role_heads,
    role_reading,
    strongest_pattern,
    tok,
    too_few,
)
from mha_viz.contract import Head
from mha_viz.models import seeds
from mha_viz.models.registry import twins
from mha_viz.models.twin_records import held_out_texts
from mha_viz.plotting import lesson as lesson_figures
from mha_viz.plotting.lesson import MARK

OUTPUT_CHOICES = ("Not one of them", "Some, not all", "All of them")


def written_input(text: str, n: int, prepared: str) -> str:
    """The input step `n` runs on the written model: `text` with the words outside the program's vocabulary (and
    any past its length) left out, which a warning marks, with a button that puts the prepared input back; the
    prepared input where nothing is left. So the step keeps its figure when a word is out of vocabulary."""
    config = side_model(WRITTEN).config
    items = text.split()
    unknown = [i for i, t in enumerate(items) if t not in config.vocab]
    kept = [t for i, t in enumerate(items) if i not in set(unknown)][:config.max_seq_len]
    if not unknown and len(items) <= config.max_seq_len:
        return text
    shown = " ".join(f"**{md_safe(t)}** ⚠" if i in set(unknown) else md_safe(t) for i, t in enumerate(items))
    over = max(0, len(items) - len(unknown) - config.max_seq_len)
    runs = " ".join(kept) if kept else prepared
    st.warning(f"The program knows only {' '.join(config.vocab)}: your input reads {shown}. "
               + (f"{len(unknown)} of its words (marked ⚠) left out" if unknown else "")
               + (f"{'; ' if unknown else ''}{over} past its {config.max_seq_len} positions left out" if over else "")
               + f". The step runs on “{md_safe(runs)}”" + ("" if kept else ", the prepared input") + ".",
               icon=":material/warning:")

    def restore() -> None:
        st.session_state[f"lesson_text_{n}"] = prepared
        st.session_state.get(TYPED, {}).pop(n, None)

    st.button("Put the prepared input back", key=f"lesson_restore_{n}", on_click=restore,
              icon=":material/undo:")
    return runs


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
    switch = try_switch(f"switch {head_name(prev)} off", f"lesson_try_{n}",
                  "Its output becomes 0: the program's line that reads it gets nothing.",
                  expect=f"a table of the program's output before and after; {changed} of {total} positions differ.")
    off = {prev} if switch else set()
    shown = lesson_run(WRITTEN, text, frozenset(off)) if switch else run
    heads_row(shown, heads, [f"{head_name(h)} · " + (measures.get(written[h].pattern).label if written[h].pattern
                                                       else "no measured pattern") for h in heads], off,
              key=f"lesson_fig_{n}", marked=prev)
    look(f"{len(heads)} heads that a program wrote; each selects what its line of the program says. {named(prev)} "
         "(▶, outlined) reads the previous token: the head the question switches off.", html=True)
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
            lines.append(f"{head_name(h)}: the program wrote that {written[h].selects}. {_unmeasured(run, h)}"
                         "A true role need not be one a measure names.")
    before = model.program_output(run)
    if switch:
        after = model.program_output(shown)
        changed = [i for i, (x, y) in enumerate(zip(before, after)) if x != y]
        st.table({"position": list(range(len(run.tokens))), "token": [visible(t) for t in run.tokens],
                  "output, all heads on": [program_value(x) for x in before],
                  f"{head_name(prev)} off": [program_value(x) for x in after]})
        no_value = f" ({NO_VALUE_NOTE})" if None in before + after else ""
        lines.append(f"With {head_name(prev)} off the program's output changed at {len(changed)} of "
                     f"{len(before)} positions{no_value}.")
    saw(lines)


def _unmeasured(run, head: Head) -> str:
    """Where a written head no measure names puts its weight on this input, and, where that is one position just
    after the tokens the tokenizer added, why no measure names it: the program counts its indices from the first
    word, the census's first token measure reads position 0."""
    tops = {int(k) for k in run.attentions[head][1:].argmax(-1)}  # each query's top key (the added token left out)
    if len(tops) != 1:
        return ""
    top = tops.pop()
    said = f"On this input every query puts its weight on position {top}, {tok(run.tokens[top])}"
    added = sorted(set(run.special))
    if added and top == len(added) and added == list(range(len(added))):
        return (f"{said}: the first word. The program counts its indices from the first word, so its index 0 is "
                f"position {top}, one after {tok(run.tokens[0])}; the census's first token measure reads position 0, "
                "so no measure names this head. ")
    return said + ". "


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
    most). Patterned in one of the roles the Lesson has introduced (`ROLES`), so the step can show it on that
    measure's map; with no strongly patterned head, the most patterned one stands in."""
    importance = lesson_importance(name, text)  # (L, H)
    excess = pattern_excess(read(name, lesson_run(name, text)), ROLES)  # (L, H)
    patterned = excess >= PATTERNED
    pool = importance.masked_fill(~patterned, float("inf")) if bool(patterned.any()) else -excess
    return argmax_head(-pool), argmax_head(importance)


def draw_learned(name: str, text: str, n: int) -> None:
    model, run = side_model(name), lesson_run(name, text)
    r = read(name, run)
    family = seeds(name) or [name]
    readings = {seed: read(seed, lesson_run(seed, text)) for seed in family}
    importance = lesson_importance(name, text)  # (L, H)
    quiet, loudest = quiet_and_loud(name, text)
    top = strongest_pattern(r, quiet, ROLES)
    # The maps are of the measure the outlined head is strong on: its cell is where the text says it is.
    shown = top[0] if top else "previous"
    maps, titles = [readings[seed].scores[shown] for seed in family], list(family)
    label, support = measures.get(shown).label, r.support[shown]
    st.caption(f"The {label} score of every head (rows: layers, columns: heads) in each model the recipe trained, "
               + (f"on this input, over {queries(support)}." if support >= FLOOR else
                  f"on this input: {too_few(shown, support)}, so the maps say little."))
    fig = plotting.census_maps_side_by_side(maps, titles)
    i = family.index(name) if name in family else 0
    xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
    # The head the text names, outlined on its model's map; its name over the map, for the hover hook.
    fig.add_shape(type="rect", xref=xa, yref=ya, x0=quiet[1] - 0.5, x1=quiet[1] + 0.5, y0=quiet[0] - 0.5,
                  y1=quiet[0] + 0.5, line=dict(color=MARK, width=3))
    fig.add_annotation(text=f"<b>▶ {head_name(quiet)}</b>", xref=xa, yref=ya, x=quiet[1], y=quiet[0],
                       showarrow=False, font=dict(size=10, color=MARK), bgcolor="rgba(255,255,255,0.7)")
    lesson_figures.square_maps(fig, column_px())  # square cells, the column's width
    st.plotly_chart(fig, width="content", key=f"lesson_fig_{n}", config=figure_config())
    look(f"the {label} score of every head in {len(family)} models trained by the same recipe from different seeds, "
         f"and {named(quiet)} of {name} (▶, outlined), a strongly patterned head.", html=True)
    switch = try_switch(f"switch {head_name(quiet)} of {name} off", f"lesson_try_{n}",
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
                        width="stretch", key=f"lesson_pred_{n}", config=figure_config())
        lines.append(f"Switched off here: the top prediction was {tok(before[0][0])} at {pct(before[0][1])} and is "
                     f"{tok(after[0][0])} at {pct(after[0][1])} (KL {next_token_kl(run.logits, off_run.logits):.3f}).")
    saw(lines)
    twins_contrast()


TWIN_WRITTEN, TWIN_LEARNED = "written-induction", "learned-induction"  # a program and the stack trained on it
TWIN_TEXTS = 100  # held-out inputs the contrast measures on (never trained on), seed 0


def lesson_twins() -> TwinComparison:
    """`TWIN_WRITTEN` beside `TWIN_LEARNED` (`analysis.twins.compare_twins`) on `TWIN_TEXTS` held-out inputs, with
    both models' censuses as the lesson makes them; kept in the run cache beside the learned model."""
    def make() -> TwinComparison:
        written, learned = side_model(TWIN_WRITTEN), side_model(TWIN_LEARNED)
        texts = held_out_texts(written, TWIN_TEXTS, 0)
        return compare_twins(written, learned, texts, lesson_census(TWIN_WRITTEN), lesson_census(TWIN_LEARNED))
    return side_result(("lesson-twins", TWIN_WRITTEN), TWIN_LEARNED, make)


def twins_contrast() -> None:
    """The same task written and learned: for each head the program wrote, the learned head(s) that attend like
    it, and how much switching each side off breaks its model's output, measured on held-out inputs. Said in one
    line where the twin does not ship (a seed under the held-out accuracy to ship is not shipped)."""
    if TWIN_LEARNED not in twins(TWIN_WRITTEN):
        st.caption(f"No learned twin of {TWIN_WRITTEN} ships here, so this step shows no written/learned contrast.")
        return
    cmp = lesson_twins()
    st.markdown("##### Written and learned, the same task")
    st.caption(f"{TWIN_WRITTEN} is compiled from a program that copies the token after the earlier copy of the "
               f"current one; {TWIN_LEARNED} is the in-repo stack trained from scratch on that program's output, with "
               f"the same layers x heads. Measured on {cmp.n_texts} held-out inputs: which learned head attends most "
               f"like each written head ({DISTANCE}), and each model's accuracy with that head switched off.")
    rows = []
    for row in cmp.heads:
        rows.append({"written head": head_name(row.written),
                     "its role": measures.get(row.role).label if row.role else row.selects,
                     "learned head(s) in its place": ", ".join(f"{head_name(h)} ({d:.3f} bits)"
                                                               for h, d in row.matches)
                     + ("" if row.matched else " (nearest; none attends like it)"),
                     "written off: program accuracy": f"{pct(cmp.accuracy_written)} → {pct(row.written_off)}",
                     "learned off: twin accuracy": f"{pct(cmp.accuracy_learned)} → {pct(row.learned_off)}"})
    st.table(rows)
    lines = [f"On these inputs the program scores {pct(cmp.accuracy_written)}, its twin {pct(cmp.accuracy_learned)}."]
    for row in cmp.heads:
        heads = [h for h, _ in row.matches]
        role = measures.get(row.role).label if row.role else "its"
        took = (f"{heads_words(heads)} took the role" if row.matched else
                f"no learned head took the role; the nearest is {heads_words(heads)}")
        lines.append(f"The program wrote {head_name(row.written)} as its {role} head; in the twin {took} "
                     f"({row.matches[0][1]:.3f} bits). Switching the written head off takes the program from "
                     f"{pct(cmp.accuracy_written)} to {pct(row.written_off)}; switching "
                     f"{heads_words(heads)} off takes the twin from {pct(cmp.accuracy_learned)} to "
                     f"{pct(row.learned_off)}.")
    spread = [(divmod(i, cmp.single_off.shape[1]), float(v)) for i, v in enumerate(cmp.single_off.flatten().tolist())
              if cmp.accuracy_learned - v >= BROKEN_AT]
    lines.append("In the twin, switching off one head alone breaks the output (a drop of "
                 f"{BROKEN_AT:.0%} or more) for " + (listed([f"{head_name(h)} (to {pct(v)})" for h, v in spread])
                                                     if spread else "no head") + ".")
    softer = [row for row in cmp.heads if row.learned_off > row.written_off + 0.05]
    if softer:
        lines.append("Each learned counterpart switched off breaks the twin less (to "
                     + ", ".join(pct(r.learned_off) for r in softer) + ") than its written head breaks the program (to "
                     + ", ".join(pct(r.written_off) for r in softer) + "): in the twin the role is not held by one "
                     "head alone; other heads still carry part of it.")
    else:
        lines.append("Each learned counterpart, switched off, breaks the twin about as much as its written head "
                     "breaks the program: on this seed the twin holds each role in one head.")
    saw(lines)
