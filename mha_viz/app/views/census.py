"""Census: what each head does in general, measured on inputs made for each question (`mha_viz.head_census`), not
on the one sentence typed above; and, for a model trained under several seeds, which head took which role in each.

A layers x heads map per score with its baselines, a scatter of every head by any two scores, a click opens the head
in the Layer view, the texts where a head scores highest, and every score as CSV/JSON. Computed once per model, input
seed and texts, shared by every session (the last few are kept)."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Callable

import streamlit as st

from mha_viz import measures, plotting
from mha_viz.analysis.census_result import RULE_WORDS, CensusConfig, HeadCensus, seed_roles
from mha_viz.analysis.census_run import MAX_TEXT_CHARS, MAX_TEXTS, head_census
from mha_viz.analysis.written import summary, written_vs_census
from mha_viz.app.cache import CENSUSES, RunCache, census_control, get_model, side_model
from mha_viz.app.common import clicked_head, head_name, md_safe, pick_clicked_head
from mha_viz.app.context import ViewContext
from mha_viz.contract import Ablation, Head, InputError, Model, ModelLoadError
from mha_viz.models import seeds
from mha_viz.models.examples import census_texts
from mha_viz.web import kinds

_CENSUS = CENSUSES  # the last 8 censuses, shared by every session (other views read them: cache.census_made)
MAX_UPLOAD_BYTES = MAX_TEXTS * MAX_TEXT_CHARS
# A census score is shown by its registered measure's label and words (`mha_viz.measures`), as everywhere else.
shown = measures.score_label


# What a census of a model with cross-attention measures, and why only that (web/kinds.py says the cross part).
CROSS_MODEL_NOTE = (
    "This census measures the encoder's self-attention heads: each generated input is read as a source. The "
    "decoder's heads are not measured here, since each input would need a target the decoder reads beside it, and "
    "the census's inputs are single texts; the Layer view's Decoder grid reads them on your source and target. "
    + kinds.NO_READINGS[kinds.CROSS])


def render(ctx: ViewContext) -> None:
    st.subheader("Census: what each head does in general")
    st.caption("Measured on inputs made for each question, generated from words this model reads as one token "
               "each (seeded: the same seed gives the same inputs), not on the sentence above. Each score is set "
               "against what uniform attention would score, against a control, and for the structural relations "
               "against the best fixed offset (\"always the word k to the left\"). A high score says where a head's "
               "attention goes; it does not label what the head is for, and most heads mix several patterns.")
    if ctx.model.has_cross_attention:
        st.info(CROSS_MODEL_NOTE)
    texts = _texts(ctx.model)
    if texts is False:
        return
    # A column: at full width a 3-digit number box runs across the whole page.
    seed = int(st.columns([1, 4])[0].number_input(
        "Input seed", min_value=0, max_value=999, value=0, step=1, key="census_seed",
        help="Which generated inputs: another seed gives other random sequences and sentences"))
    census = _get(ctx.name, ctx.model, seed, texts)
    if census is None:
        return
    _overview(census)
    _written(ctx.model, census, seed)
    picked = _maps(census)
    _scatter(census)
    _open_head(ctx, picked)
    _examples(census)
    _in_context(census)
    _downloads(census)
    _seeds(ctx.name, seed)


def _texts(model: Model):
    """The natural texts (pasted or uploaded, one per line; default the model's examples) or False on an error."""
    with st.expander("Natural texts for the text scores and the top examples (default: the example sentences)"):
        pasted = st.text_area(f"One text per line (at most {MAX_TEXTS} lines of {MAX_TEXT_CHARS} characters)",
                              key="census_texts", height=100)
        upload = st.file_uploader("or upload a .txt file, one text per line", type=["txt"], key="census_upload")
    raw = pasted
    if upload is not None:
        data = upload.getvalue()
        if len(data) > MAX_UPLOAD_BYTES:
            st.error(f"The file has {len(data):,} bytes; the census takes at most {MAX_UPLOAD_BYTES:,} "
                     f"({MAX_TEXTS} lines of {MAX_TEXT_CHARS} characters). Upload a shorter file.")
            return False
        raw = data.decode("utf-8", errors="replace")
    lines = tuple(t for t in (raw or "").splitlines() if t.strip())
    if not lines:
        return None
    if len(lines) > MAX_TEXTS or any(len(t) > MAX_TEXT_CHARS for t in lines):
        st.error(f"{len(lines)} lines, the longest {max(len(t) for t in lines)} characters: the census takes at "
                 f"most {MAX_TEXTS} lines of at most {MAX_TEXT_CHARS} characters. Shorten or split the text.")
        return False
    return lines


def _get(name: str, model: Model, seed: int, texts) -> HeadCensus | None:
    key = (name, seed, texts)
    found = _CENSUS.peek(key)
    if found is not None:
        return found
    cfg = CensusConfig.for_model(model)
    n = cfg.n_random + cfg.n_repeated + cfg.n_templates + len(texts or census_texts(model))
    st.info(f"The census of {model.info.title} runs at most about {2 * n} forward passes (its inputs, then the "
            "control; fewer where the heads it names separate early) and is kept for every visitor once made.")
    if not st.button("Run the census", key="census_run", type="primary"):
        return None
    bar = st.progress(0.0, text="Census...")
    try:
        census = _CENSUS.get(key, lambda: head_census(model, texts=texts or census_texts(model), seed=seed,
                                                      control=census_control(model),
                                                      progress=lambda f, m: bar.progress(f, text=m)))
    except InputError as err:
        bar.empty()
        st.error(str(err))
        return None
    bar.empty()
    return census


def _fmt(v: float) -> str:
    return "—" if v is None or math.isnan(v) else f"{v:.2f}"


def _overview(c: HeadCensus) -> None:
    """The leading head of every score, against both baselines and the control."""
    rows = []
    for name in c.names:
        top = c.top(name, 2)
        (lh, value), second = top[0], (top[1] if len(top) > 1 else (None, float("nan")))
        named = c.named(name)
        off = c.offset.get(name)
        ctrl = c.control.get(name)
        rows.append({
            "score": shown(name),
            # a tie shows each head's interval: what the data could not separate
            "named heads": (", ".join(f"{head_name(h)}" + (f" ({c.head_label(name, h).rsplit(', ', 1)[-1]})"
                                                           if name == "offset" else "")
                                      + (f" {v:.2f} [{_fmt(float(c.low[name][h]))}–{_fmt(float(c.high[name][h]))}]"
                                         if len(named) > 1 else "") for h, v in named)
                            + (" (tie)" if len(named) > 1 else "")) or "none (none beats its control)",
            "leading head": head_name(lh), "its score": _fmt(value),
            "95% interval": f"{_fmt(float(c.low[name][lh]))}–{_fmt(float(c.high[name][lh]))}",
            "next head": f"{head_name(second[0])} {_fmt(second[1])}" if second[0] else "—",
            "uniform": _fmt(c.uniform[name]),
            "best fixed offset": f"{off[0]:+d}: {_fmt(off[1])}" if off else "—",
            "control, same head": _fmt(float(ctrl[lh])) if ctrl is not None else "—",
            "control": c.control_of.get(name, "—"),
            "inputs": c.n_inputs[name],
        })
    st.dataframe(rows, hide_index=True, height=min(560, 38 + 35 * len(rows)))
    st.caption(f"Control: {c.control_kind}. Words: {c.lexicon_source}."
               + (f" {c.skipped} generated inputs were left out because the tokenizer did not read each word as "
                  "one token." if c.skipped else "")
               + " Distance and entropy lead with their lowest heads (a band near the diagonal; focused attention). "
               + RULE_WORDS)


def _clicked(key: str) -> Head | None:
    return clicked_head(st.session_state.get(key))


def _maps(c: HeadCensus) -> Head | None:
    name = st.selectbox("Score", c.names, key="census_score",
                        format_func=lambda n: f"{shown(n)}: {measures.score_words(n)}")
    off = c.offset.get(name)
    base = f"best offset {off[0]:+d}: {off[1]:.2f}" if off else ""
    fig = plotting.census_map(c.scores[name], f"{shown(name)}, {c.inputs[name]}", c.uniform[name], base,
                              zmax=None, reverse=c.lower_is_notable(name))
    st.plotly_chart(fig, width="stretch", key="census_map", on_select="rerun", selection_mode="points")
    st.caption(f"Source: {measures.get(name).citation}")
    if name in c.control:
        ctrl = float(c.control[name].max() if not c.lower_is_notable(name) else c.control[name].min())
        st.caption(f"Control ({c.control_of.get(name, c.control_kind)}): its most extreme head scores {ctrl:.2f}.")
    elif name in c.no_control:
        st.caption(f"No control for this score: {c.no_control[name]}.")
    st.caption(c.naming_words(name))
    return _clicked("census_map")


def _scatter(c: HeadCensus) -> None:
    names = c.names
    c1, c2 = st.columns(2)
    x = c1.selectbox("x", names, index=names.index("previous") if "previous" in names else 0, key="census_x",
                     format_func=shown)
    y = c2.selectbox("y", names, index=names.index("induction") if "induction" in names else 1, key="census_y",
                     format_func=shown)
    fig = plotting.census_scatter(c.scores[x], c.scores[y], shown(x), shown(y), c.baseline(x), c.baseline(y))
    st.plotly_chart(fig, width="stretch", key="census_scatter", on_select="rerun", selection_mode="points")
    st.caption("Every head by two scores; dotted lines: each score's stronger baseline (uniform, or the best fixed "
               "offset). Heads between the corners mix patterns: few are pure.")


def _go_layer(name: str, head: Head) -> None:
    # A callback: it runs before the page is drawn, so it may set the sidebar's layer and the View radio.
    st.session_state[f"layer|{name}"] = head[0]
    st.session_state["view"] = "Layer"


def _open_head(ctx: ViewContext, picked: Head | None) -> None:
    picked = _clicked("census_scatter") or picked
    options = [(l, h) for l in range(ctx.model.n_layers) for h in range(ctx.model.n_heads)]
    pick_clicked_head(picked, options, "census_head", "_census_click")
    head = st.selectbox("Head (or click one in the map or the scatter)", options, format_func=head_name,
                        key="census_head")
    st.button(f"Open {head_name(head)} in the Layer view", key="census_open", on_click=_go_layer,
              args=(ctx.name, head))


def _examples(c: HeadCensus) -> None:
    if not c.text_values:
        return
    head = st.session_state.get("census_head", (0, 0))
    names = list(c.text_values)
    name = st.selectbox("Top examples by", names, key="census_example_score")
    values = c.text_values[name][:, head[0], head[1]]  # (N,)
    order = sorted(range(len(values)), key=lambda i: (math.isnan(float(values[i])),
                                                      float(values[i]) if c.lower_is_notable(name)
                                                      else -float(values[i])))
    st.markdown(f"**Where {head_name(head)} scores {'lowest' if c.lower_is_notable(name) else 'highest'} on "
                f"{name}** ({len(values)} texts)")
    st.table([{name: _fmt(float(values[i])), "text": md_safe(c.texts[i][:200])} for i in order[:5]])


def _in_context(c: HeadCensus) -> None:
    ic = c.in_context
    if ic is None:
        return
    tops = ", ".join(head_name(h) for h in ic.top_heads)
    st.markdown("**Is the induction pattern used?** (Olsson et al. 2022's in-context check)")
    st.write(f"On {ic.n_inputs} random sequences said twice, the next-token loss is {ic.loss_first:.2f} nats on the "
             f"first copy and {ic.loss_second:.2f} on the second: a drop of {ic.drop:.2f}. With the {ic.k} heads of "
             f"highest induction score ({tops}) switched off, the share of that drop lost:")
    st.table([{"heads off": k, "share of the drop lost": f"{v:.0%}" if not math.isnan(v) else "—"}
              for k, v in ic.lost.items()])
    st.caption(f"Other heads: the mean over {len(ic.other_sets)} random sets of {ic.k} other heads ("
               + "; ".join(", ".join(head_name(h) for h in s) for s in ic.other_sets)
               + "), none of them an induction or previous-token head. The previous-token heads are switched off on "
                 "their own: an induction head reads from them (Olsson et al. 2022's two-head circuit), so they can "
                 "cost as much as the induction heads. " + _meanings_of_off(ic))


def _meanings_of_off(ic) -> str:
    """What "off" meant in the in-context check, in each meaning's own words (`Ablation`), and where the meanings
    that read texts took their outputs from: the census's natural texts stand in for the example sentences."""
    measured = "; ".join(f"{off.adjective}, its output {off.describe}" for off in map(Ablation.of, ic.others_lost))
    text = (f"Switched off: {measured}. The example sentences here are the census's natural texts ({ic.mean_over}).")
    for key, why in ic.unavailable.items():
        text += f" {Ablation.of(key).label.capitalize()} ablation was not measured: {why}"
    return text


def _downloads(c: HeadCensus) -> None:
    rows = c.rows()
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    c1, c2 = st.columns(2)
    c1.download_button("Every score as CSV", buf.getvalue(), file_name=f"census-{c.seed}.csv", mime="text/csv",
                       key="census_csv")
    c2.download_button("Everything as JSON", json.dumps(c.to_json(), ensure_ascii=False), key="census_json",
                       file_name=f"census-{c.seed}.json", mime="application/json")


def _seed_model(name: str, seed_name: str) -> Model:
    """A seed of the recipe of `name`: the user's own model where it is that seed, else a side model (in the run
    cache, under its memory budget, so the seeds do not push the user's models out of get_model's slots)."""
    return get_model(seed_name) if seed_name == name else side_model(seed_name)


def _model_census(name: str, model: Model, seed: int, progress=None) -> HeadCensus:
    """The census of one seed or twin with its own shipped texts and control, made once for every visitor."""
    return _CENSUS.get((name, seed, None), lambda: head_census(
        model, texts=census_texts(model), seed=seed, control=census_control(model), progress=progress))


def _for_each_model(base: str, names: list[str], done: list, button: str, key: str,
                    measure: Callable[[int, str, Model, object], object]) -> list | None:
    """What `measure(i, name, model, bar)` gives for each of `names` (seeds or twins of `base`, loaded as
    `_seed_model` does), in order. `done` holds what the caches have already (None where not): when any is
    missing, nothing runs until the user clicks `button`, then each missing one is measured with a progress bar.
    None while the button waits, or when a model cannot load (its error is shown)."""
    if all(d is not None for d in done):
        return done
    if not st.button(button, key=key):
        return None
    bar = st.progress(0.0, text="Measuring...")
    for i, name in enumerate(names):
        if done[i] is not None:
            continue
        try:
            model = _seed_model(base, name)
        except ModelLoadError as err:
            bar.empty()
            st.error(str(err))
            return None
        done[i] = measure(i, name, model, bar)
    bar.empty()
    return done


def _written(model: Model, c: HeadCensus, seed: int) -> None:
    """A compiled program's heads: what the program wrote into each, beside what the census measured, and the
    learned contrast (the tiny recipe's seeds) on request."""
    written = model.written_heads()
    if not written:
        return
    rows = written_vs_census(written, c)
    st.markdown("### Written heads, and what the census names them")
    st.caption("This model was compiled from a RASP program (Tracr): every head's role was written by the program, "
               "so the label is true by construction. The census did not read the program: it measured the heads "
               "on its own inputs, and names heads by the rule every view reads. " + RULE_WORDS)
    st.dataframe([{"head": head_name(r.head), "the program wrote": written[r.head].text,
                   "each query selects": written[r.head].selects.removeprefix("each query selects "),
                   "written role": measures.score_label(r.written) if r.written else "none the census measures",
                   "the census names it": r.words(),
                   "runner-up": f"{head_name(r.runner_up[0])} {r.runner_up[1]:.2f}" if r.runner_up else "—",
                   "agrees": "yes" if r.agrees else "no"} for r in rows], hide_index=True)
    st.markdown(md_safe(summary(rows)))
    _twins(model, c, seed)
    if seeds("tiny"):
        st.caption("Learned, for contrast: the tiny model's training recipe run from several seeds puts the same "
                   "kinds of role on other heads, and mixes them (below, on request).")
        _seeds("tiny", seed)


_TWINS = RunCache(16, size=lambda _: 1)  # the last comparisons, keyed (written, learned, census seed, texts)
TWIN_TEXTS = 200  # held-out inputs per comparison: 2-3 s per twin on one core


def _twins(model: Model, c: HeadCensus, seed: int) -> None:
    """Written vs learned: the in-repo stack trained on what this program computes, each seed beside the written
    heads (`analysis.twins.compare_twins`): accuracy, the learned heads that attend like each written one and their
    census names, what switching each off breaks, and the composition path."""
    from mha_viz.analysis.twins import BROKEN_AT, DISTANCE, MATCH_AT, MATCH_TIE, compare_twins
    from mha_viz.models.registry import twins
    from mha_viz.models.twin_records import SHIP_AT, TWIN_ASSETS, held_out_texts, tried

    st.markdown("### Written vs learned: the same task, trained")
    stem = model.name.removeprefix("written-").replace("-", "_")
    record = tried(TWIN_ASSETS / stem)
    names = twins(model.name)
    failed = [r for r in record.get("seeds", []) if not r["shipped"]]
    if record:
        recipe = record["recipe"]
        heads = f"{model.n_heads} head" + ("s" if model.n_heads != 1 else "")
        st.caption(
            f"The in-repo stack (pre-LN blocks, as tiny; {model.n_layers} layers x {heads} as the "
            f"written model, d_model {recipe['d_model']}) trained from scratch on {recipe['n_texts']:,} random texts "
            f"labelled by this program's own output, {recipe['steps']:,} steps, seeds "
            f"{', '.join(str(r['seed']) for r in record['seeds'])}; a seed ships when it gets {100 * SHIP_AT:.0f}% "
            "of held-out positions right (texts never trained on). "
            + " ".join(f"Seed {r['seed']} reached {100 * r['accuracy']:.1f}% and is not shipped." for r in failed))
    if not names:
        st.caption("No learned twin of this program ships"
                   + ("" if model.causal else ": the program is not causal (each position reads later ones too), "
                      "and the in-repo stack is, so a twin could not see what the program reads") + ".")
        return
    texts = tuple(held_out_texts(model, TWIN_TEXTS, seed))

    def compare(i: int, name: str, learned: Model, bar) -> object:
        bar.progress(i / len(names), text=f"{name}: its census, then {TWIN_TEXTS} held-out inputs")
        census = _model_census(name, learned, seed)
        return _TWINS.get((model.name, name, seed, c.texts),
                          lambda: compare_twins(model, learned, list(texts), c, census))

    done = _for_each_model(model.name, names, [_TWINS.peek((model.name, n, seed, c.texts)) for n in names],
                           f"Compare with the {len(names)} learned twins ({', '.join(names)})", "census_twins",
                           compare)
    if done is None:
        return
    st.caption(f"Distance: {DISTANCE}; a learned head under {MATCH_AT} bits attends like the written one (others "
               f"within {MATCH_TIE} bits of the best are listed with it), else the nearest is named as the nearest. "
               "Census names: what each model's own census names the head for (ties included). Off: switched off "
               "(zero), the share of positions each model still gets right; a drop of "
               f"{100 * BROKEN_AT:.0f} points or more breaks it. On {TWIN_TEXTS} held-out inputs, the same for every "
               "seed.")
    st.dataframe([cmp.summary() for cmp in done], hide_index=True)
    for cmp in done:
        st.markdown(f"#### {md_safe(cmp.learned)}")
        st.dataframe(cmp.rows(), hide_index=True)
        for line in cmp.sentences():
            st.markdown("- " + md_safe(line))


def _seeds(name: str, seed: int) -> None:
    names = seeds(name)
    if len(names) < 2:
        return
    st.markdown("### Same recipe, different seeds")
    st.caption(f"The same training recipe run from {len(names)} seeds ({', '.join(names)}): the same data, another "
               "initialisation and data order. Which head takes which role is not fixed by the architecture.")
    done = _for_each_model(
        name, names, [_CENSUS.peek((n, seed, None)) for n in names], f"Run the census of all {len(names)} seeds",
        "census_seeds", lambda i, n, model, bar: _model_census(
            n, model, seed, progress=lambda f, msg: bar.progress((i + f) / len(names), text=msg)))
    if done is None:
        return
    roles = seed_roles(done)
    for role, score in roles["scores"].items():
        st.plotly_chart(plotting.census_maps_side_by_side([c.scores[score] for c in done], names),
                        width="stretch", key=f"census_seed_map|{role}")
        st.caption(f"{role} ({score}), one map per seed, one colour scale (0-1).")
    st.table(roles["rows"])
    for line in roles["sentences"]:
        st.markdown("- " + md_safe(line))
