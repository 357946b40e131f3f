"""Training: the in-repo tiny model's heads at each saved training step, beside each head's measured scores and the
training loss against the step, so a person sees *when* each pattern appears, not only that it exists.

`timeline(ctx, versus_init=True)` is the older "Trained vs untrained" view (views/trained_vs_untrained.py): the
last step with step 0, the initialisation, drawn under it.
"""
from __future__ import annotations

import time

import numpy as np
import streamlit as st

from mha_viz import checkpoints, measures, plotting, seeds
from mha_viz.analysis.circuits import describe_formation
from mha_viz.analysis.pairs import SUBJECT
from mha_viz.app.cache import checkpoint_run, training_evidence
from mha_viz.app.circuit_cache import formation
from mha_viz.app.common import chart_config, head_name, md_safe, trained_here
from mha_viz.app.context import ViewContext
from mha_viz.app.names import layer_name
from mha_viz.contract import InputError, ModelLoadError, UnavailableError
from mha_viz.settings import ASSETS

STEP_KEY = "train_step"
LAYER_KEY = "train_layer"
PENDING = "_train_step_pending"  # a step to show on the next run (a widget's value cannot change after it is drawn)
PLAY_SECONDS = 0.7  # per saved step while playing
PER_ROW = 2  # heads per row figure
# The probe's scores under their registered measures' names and labels (`mha_viz.measures`), as the badges, the
# Similarity table and the census word them; the subject probe is attention on the gold subject, the registry's
# `gold` on pre-verb→subject.
PANELS = {name: measures.get(name).label for name in ("previous", "induction", SUBJECT)}


SOURCE_KEY = "train_source"
TINY_SOURCE, STUDY_SOURCE = "tiny's shipped training", "a study file"


def render(ctx: ViewContext) -> None:
    source = st.radio("Show", [TINY_SOURCE, STUDY_SOURCE], horizontal=True, key=SOURCE_KEY,
                      help="A study file is any training run's checkpoints measured by `mha-viz study RUN_DIR "
                           "--out STUDY.duckdb` (docs/scale.md)")
    if source == STUDY_SOURCE:
        render_study()
        return
    timeline(ctx, versus_init=False)


def timeline(ctx: ViewContext, versus_init: bool) -> None:
    trained = trained_here(ctx.name)
    steps = checkpoints(trained)
    evidence = training_evidence(trained)
    if evidence is not None and not evidence.per_step:
        evidence = None
    if not steps:
        st.warning("The tiny model has no saved training steps: run `make train` (it saves them in "
                   "assets/tiny/checkpoints/), then `make probe` for their scores.")
        return
    st.subheader("Training: watch the tiny model's heads form")
    st.caption("The in-repo tiny model saved at several steps of its training, on the same sentence: step 0 is its "
               "seeded initialisation, the last step is the shipped `tiny`. Move the slider (or press Play) to see "
               "when each head's pattern appears; the scores beside it were measured at each step on held-out "
               "inputs. Patterns are learned: nobody assigned a head its role.")
    pending = st.session_state.pop(PENDING, None)
    if versus_init and STEP_KEY not in st.session_state:
        pending = steps[-1]
    if pending is not None or st.session_state.get(STEP_KEY) not in steps:
        st.session_state[STEP_KEY] = pending if pending in steps else steps[-1]
    # The page's style lets this row fold onto two lines on a narrow screen (at 1000x800 the Play button's column
    # was ~50 px and showed "▶…").
    c1, c2, c3 = st.container(key="wrap").columns([6, 1, 2])
    step = c1.select_slider("Training step", options=steps, key=STEP_KEY,
                            format_func=lambda s: f"{s} (initialisation)" if s == 0 else str(s))
    play = c2.button("▶ Play", key="train_play", help="Show every saved step in turn, from the first")
    n_layers = len(evidence.final.scores[SUBJECT]) if evidence else None
    layer = _layer(ctx, c3, n_layers)
    unknown = _unknown_note(trained, ctx.text, steps)
    if unknown:
        st.caption(unknown)

    left, right = st.columns([3, 2])
    with right:
        chart = st.empty()
        table = st.empty()
    with left:
        heads = st.empty()
        if versus_init and steps[0] != step:
            st.markdown(f"**The same heads at step {steps[0]} (the initialisation)**")
            _heads(trained, ctx.text, steps[0], layer, key="train_init")
    below = st.container()  # drawn before Play walks the steps, so it is there while the steps play
    if not versus_init:
        with below:
            circuits_over_training(trained, step)
    if play:
        for shown in steps:
            _draw(trained, ctx.text, shown, layer, evidence, heads, chart, table, key=f"play{shown}")
            time.sleep(PLAY_SECONDS)
        st.session_state[PENDING] = steps[-1]
        return
    _draw(trained, ctx.text, step, layer, evidence, heads, chart, table, key="step")


def _layer(ctx: ViewContext, where, n_layers: int | None) -> int:
    """The sidebar's layer when the page shows a tiny model; otherwise a picker of the tiny model's own layers."""
    if checkpoints(ctx.name):
        return min(ctx.layer, (n_layers or ctx.model.n_layers) - 1)
    options = list(range(n_layers or 1))
    return where.selectbox("Layer of the tiny model", options, format_func=layer_name, key=LAYER_KEY)


def _unknown_note(name: str, text: str, steps: list[int]) -> str | None:
    try:
        run = checkpoint_run(name, steps[-1], text)
    except (InputError, ModelLoadError):
        return None
    if not run.unknown:
        return None
    words = ", ".join(sorted({run.tokens[i] for i in run.unknown}))[:200]
    return (f"{len(run.unknown)} word(s) of this sentence are not in the tiny model's vocabulary and are read as "
            f"<unk>: {md_safe(words)}. Its example sentences use only words it knows.")


def _heads(name: str, text: str, step: int, layer: int, key: str, where=None) -> None:
    where = where or st
    try:
        run = checkpoint_run(name, step, text)
    except (InputError, ModelLoadError) as err:
        where.warning(md_safe(str(err)))
        return
    if run.truncated:  # said here: this view runs the tiny model whatever the page's model reads
        where.caption(f"The tiny model reads at most {len(run.tokens)} tokens: the last {run.truncated} of this text "
                      "are not shown here.")
    n_heads = run.attentions.shape[1]
    # Two heads per row: the heads share the page with the timeline, and four in a row would be too small to read.
    for start in range(0, n_heads, PER_ROW):
        heads = list(range(start, min(start + PER_ROW, n_heads)))
        fig = plotting.heads_row_figure(run.attentions[layer, heads[0]:heads[-1] + 1], run.tokens,
                                        [f"{head_name((layer, h))} · step {step}" for h in heads],
                                        [False] * len(heads), columns=PER_ROW, height=330)
        where.plotly_chart(fig, width="stretch", key=f"{key}|{step}|{layer}|{start}", config=chart_config())


def _draw(name, text, step, layer, evidence, heads, chart, table, key: str) -> None:
    heads.empty()
    _heads(name, text, step, layer, key=key, where=heads.container())
    if evidence is None:
        chart.info("No measured scores yet: run `make probe` to write assets/tiny/probes.json.")
        return
    scores = {PANELS[r]: np.array([s.scores[r] for s in evidence.per_step]) for r in PANELS}  # (S, L, H)
    baselines = {PANELS[r]: evidence.per_step[0].baselines[r] for r in PANELS}
    fig = plotting.timeline_figure(list(evidence.log_steps), list(evidence.log_loss), evidence.steps, scores,
                                   baselines, layer, step, height=560)
    chart.plotly_chart(fig, width="stretch", key=f"timeline|{key}|{layer}", config=chart_config())
    row = evidence.at(step)
    if row is None:
        table.caption(f"Step {step} was not measured: run `make probe` again.")
        return
    n_heads = len(row.scores[SUBJECT][layer])
    rows = [{"head": head_name((layer, h)),
             **{measures.get(r).label: f"{row.scores[r][layer][h]:.0%}" for r in evidence.relations}}
            for h in range(n_heads)]
    rows.append({"head": "uniform attention",
                 **{measures.get(r).label: f"{row.baselines[r]:.0%}" for r in evidence.relations}})
    with table.container():
        st.caption(f"Step {step}: held-out loss {row.loss:.2f} nats, agreement accuracy "
                   f"{row.agreement_accuracy:.0%} (chance 50%). Mean attention of each head of layer {layer} on: "
                   "the previous token of random word sequences; at a word's second occurrence in a random "
                   "sequence said twice, the word after its first occurrence (induction) and the first occurrence "
                   "itself (same token earlier); the subject where the verb is predicted.")
        st.table(rows)


def circuits_over_training(trained: str, step: int) -> None:
    """The induction path read from the weights at every saved step of every seed of the recipe, beside the
    behaviour it may explain: each seed's K-composition from its previous-token head into its induction head (both
    found by measurement at its last step), that head's OV copying score and its induction score, against the
    step (`plotting.formation_figure`, the Circuits view's timeline figure), and what they say in words."""
    st.markdown("#### The induction path in the weights, step by step")
    names = [n for n in (seeds(trained) or [trained]) if checkpoints(n)]
    try:
        with st.spinner("Measuring every saved step of every seed (once per server)"):
            forms = [formation(n) for n in names]
    except (UnavailableError, ModelLoadError, ValueError) as err:
        st.caption(f"Not available: {md_safe(str(err))}")
        return
    f0 = forms[0]
    st.caption(
        "For each seed of the recipe, at its last saved step: the head of a later layer with the highest induction "
        "score and the head of an earlier layer that attends most to the previous token, both measured on "
        f"{len(f0.texts)} texts of random words said twice (the same texts at every step; Olsson et al. 2022). "
        "Then, at every saved step: the K-composition score from the first into the second, read from the weights "
        "alone (how much of what the previous-token head writes lies where the induction head's keys read; Elhage "
        "et al. 2021), the induction head's OV copying score (its eigenvalues' sum over their sizes: +1 copies), "
        "and its induction score. The dotted line is random matrices of the same shapes. Measured here, at each "
        "step, not read from the probe file: the panels above come from it.")
    st.plotly_chart(plotting.formation_figure(forms, current=step), width="stretch", key="train_circuits",
                    config=chart_config())
    for f in forms:
        st.markdown(describe_formation(f))
    rows = []
    for f in forms:
        pair = f"{head_name(f.previous_head)} → {head_name(f.induction_head)}"
        for i, s in enumerate(f.steps):
            rows.append({"model": f.name, "step": s, "K-composition": f"{float(f.composition['k'][i]):.3f}",
                         "pair": pair, "induction score": f"{float(f.induction[i]):.0%}",
                         "copying": f"{float(f.copying[i]):+.2f}",
                         "previous token": f"{float(f.previous[i]):.0%}"})
    with st.expander("Every number of the figure", expanded=False):
        st.table(rows)


# -- a study file: any training run's checkpoints (`mha-viz study`, mha_viz/study/) ---------------------------------

STUDY_PATH_KEY = "train_study_path"
STUDY_SCORE_KEY = "train_study_score"
STUDY_OPEN_KEY = "train_study_open"
STUDY_DEFAULT_SCORE = "induction"
# tiny and its seeds, every saved step, as `mha-viz study assets/tiny assets/tiny/seeds/seed* --out` this file made it
SHIPPED_STUDY = ASSETS / "tiny" / "study.duckdb"


@st.cache_data(show_spinner=False, max_entries=4)
def _read_study(path: str, stamp: tuple[float, int]):
    """The study file read whole, once per version of it (its modification time and size are in the key, so a
    study still being written is read again when it has grown)."""
    from mha_viz.study.store import read_study

    return read_study(path)


def _uploaded_path(upload) -> str:
    """An uploaded study, written once under the temporary folder by its digest (DuckDB reads files, not bytes)."""
    import hashlib
    import tempfile
    from pathlib import Path

    data = upload.getvalue()
    path = Path(tempfile.gettempdir()) / f"mha-viz-study-{hashlib.sha256(data).hexdigest()[:16]}.duckdb"
    if not path.exists():
        path.write_bytes(data)
    return str(path)


def render_study() -> None:
    """Any study file: each head's score against the step, runs side by side; the step each named head forms at;
    the checkpoints (failed ones with their reason); one checkpoint opened in the other views."""
    import os

    st.subheader("A study: every checkpoint of any training run")
    if STUDY_PATH_KEY not in st.session_state and SHIPPED_STUDY.is_file():
        st.session_state[STUDY_PATH_KEY] = str(SHIPPED_STUDY)  # tiny's own study, until another is given
    c1, c2 = st.columns([3, 2])
    path = c1.text_input("Study file (a path on the server)", key=STUDY_PATH_KEY,
                         placeholder="runs/study.duckdb", help="Written by `mha-viz study RUN_DIR --out FILE`")
    upload = c2.file_uploader("or upload one", type=["duckdb"], key="train_study_upload")
    if upload is not None:
        path = _uploaded_path(upload)
    if not path or not path.strip():
        st.info("Give a study file: `mha-viz study RUN_DIR [RUN_DIR ...] --out STUDY.duckdb` measures every "
                "checkpoint of a training run (transformers' Trainer checkpoint-N/ folders, model folders named by "
                "step, or tiny's step files) with the head census and the circuits' composition scores.")
        return
    path = path.strip()
    try:
        stat = os.stat(path)
        tables = _read_study(path, (stat.st_mtime, stat.st_size))
    except OSError:
        st.warning(md_safe(f"{path} does not exist on the server: give the path of a study file, or upload it."))
        return
    except InputError as err:  # not a study, a newer one, being written
        st.warning(md_safe(str(err)))
        return
    _study_summary(tables)
    if tables.heads.empty:
        return
    from mha_viz.study.timeline import formation, scores

    names = scores(tables)
    if st.session_state.get(STUDY_SCORE_KEY) not in names:
        st.session_state[STUDY_SCORE_KEY] = STUDY_DEFAULT_SCORE if STUDY_DEFAULT_SCORE in names else names[0]
    score = st.selectbox("Score", names, key=STUDY_SCORE_KEY, format_func=_score_label)
    runs = list(dict.fromkeys(tables.checkpoints["run"]))
    st.plotly_chart(study_figure(tables, score, runs), width="stretch", key=f"study|{score}", config=chart_config())
    st.markdown(f"**When each head is named for {md_safe(_score_label(score))}**")
    rows = formation(tables, score)
    if rows:
        st.caption("A head forms at the first measured step from which the census names it at every later step of "
                   "its run (past the stronger baseline by 0.2, its interval overlapping the best head's).")
        st.table([{k: ("–" if v is None else f"{v:.2f}" if isinstance(v, float) else v) for k, v in r.items()}
                  for r in rows])
    else:
        st.caption(f"No head of any run is named for {md_safe(_score_label(score))} at any step.")
    _open_checkpoint(tables)


def _score_label(score: str) -> str:
    try:
        return measures.score_label(score)
    except (KeyError, ValueError):
        return score  # the circuits' OV copying score, which no measure registers


def _study_summary(tables) -> None:
    ck = tables.checkpoints
    done, failed = int((ck["status"] == "done").sum()), int((ck["status"] == "failed").sum())
    runs = list(dict.fromkeys(ck["run"]))
    st.caption(f"{len(runs)} run(s): {md_safe(', '.join(runs))}; {done} checkpoint(s) measured, {failed} failed. "
               f"Census size: {md_safe(tables.meta.get('census_config', 'the census default'))}; control: "
               f"{md_safe(tables.meta.get('control', '–'))}.")
    if failed:
        bad = ck[ck["status"] == "failed"]
        with st.expander(f"{failed} checkpoint(s) did not load or measure", expanded=False):
            st.table([{"run": r.run, "step": int(r.step), "why": r.error} for r in bad.itertuples()])


def study_figure(tables, score: str, runs: list[str]):
    """Each head's `score` against the step, one panel per run (side by side, shared y); the heads named at a run's
    last step in colour, the others grey; a filled marker where the census names the head at that step."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from mha_viz.study.timeline import series

    fig = make_subplots(rows=1, cols=len(runs), shared_yaxes=True, subplot_titles=runs,
                        horizontal_spacing=0.04 if len(runs) > 1 else 0.0)
    from plotly.colors import qualitative

    palette = qualitative.Plotly  # one colour per named head of a run
    for i, run in enumerate(runs):
        lines = series(tables, score, run)
        coloured = [lh for lh, (_, _, named) in lines.items() if named and named[-1]]
        for lh, (steps, values, named) in lines.items():
            on = lh in coloured
            colour = palette[coloured.index(lh) % len(palette)] if on else "#c8c8c8"
            fig.add_trace(go.Scatter(
                x=steps, y=values, mode="lines+markers", name=f"{run}: {head_name(lh)}", legendgroup=head_name(lh),
                showlegend=on, line={"width": 2.5 if on else 1, "color": colour},
                marker={"size": [8 if n else 4 for n in named], "symbol": ["circle" if n else "circle-open"
                                                                          for n in named]},
                hovertemplate=f"{run}, {head_name(lh)}<br>step %{{x}}: %{{y:.3f}}<extra></extra>"),
                row=1, col=i + 1)
        fig.update_xaxes(title_text="training step", row=1, col=i + 1)
    fig.update_yaxes(title_text=_score_label(score), row=1, col=1)
    fig.update_layout(height=420, margin={"t": 40, "b": 40, "l": 60, "r": 20}, legend={"orientation": "h", "y": -0.25})
    return fig


def _open_checkpoint(tables) -> None:
    """One checkpoint opened in the other views: a link to the page with ?model= set, where the app can load it."""
    from urllib.parse import urlencode

    ck = tables.checkpoints[(tables.checkpoints["status"] == "done")]
    options = [f"{r.run} @ step {int(r.step)}" for r in ck.itertuples()]
    if not options:
        return
    st.markdown("**Open a checkpoint in the other views**")
    c1, c2 = st.columns([3, 2])
    pick = c1.selectbox("Checkpoint", options, index=len(options) - 1, key=STUDY_OPEN_KEY)
    row = ck.iloc[options.index(pick)]
    name = row["model_name"] or ""
    if not name:
        c2.caption("This checkpoint is the tiny stack outside the app's assets: only the study loads it.")
        return
    c2.link_button(f"Open {name if len(name) < 40 else '…' + name[-38:]} in the Layer view",
                   "?" + urlencode({"model": name, "view": "Layer"}))
