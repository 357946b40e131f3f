"""Continue: the model writes on from the sentence, and every head's attention is there for every token it wrote.

Drawn under the Layer view's grid (views/layer.py calls `panel`): the settings (how many tokens, greedy or
sampling with a temperature and a seed) and a Continue button; once it is pressed, the grid over the prompt and
the written tokens (written ones marked ✎), in which the step on screen lights the row of the position that wrote
its token in every head of the layer, with that step's top-5 and the chosen token's probability in the grid's info
line (web/grid/written.js; hovering a written token shows the same), and a step control with Play that draws the
same row and top-5 beside the grid. With heads off the continuation is written again with them off and set beside
the one with every head on: aligned, the first step where they part marked, the KL at each step (`comparison`,
which the Ablation effects view draws too).

Bad input (a number that is not one, more tokens than the context leaves, a temperature of 0 or below, a model that
cannot write) is one line on the page, and nothing runs. The settings live in the session (`ON_KEY`) and travel in
the link (app/continue_link.py: ?write=N&sample=1&temp=T&seed=S). The continuations are entries of the run cache
(`written`), so they count in the process's byte budget (MHA_VIZ_RUN_CACHE_MB) like runs: writing one holds a
page's share for the final sequence while it is written and drawn (memory.PAGE_FACTOR x its attention), a kept one
weighs its tensors (at SmolLM2's 512-token limit about 366 MB: attention 270 MB, logits 96 MB) and goes least
recently used first. The session keeps only their keys, for its last request (`KEPT`), and lets them go when it
asks for another, presses Clear, or moves to another model or text (continue_link.let_go).
"""
from __future__ import annotations

import time
from typing import Callable

import streamlit as st

from mha_viz import plotting
from mha_viz.analysis.continuations import first_difference, step_kl, step_tops
from mha_viz.app import cache
from mha_viz.app.common import chart_config
from mha_viz.app.components.head_grid import encode_soon, grid_rest, head_grid, held, payload
from mha_viz.app.context import ViewContext
from mha_viz.app.continue_link import GREEDY, KEPT, MODE_KEY, N_KEY, ON_KEY, SAMPLING, SEED_KEY, TEMP_KEY, let_go
from mha_viz.app.markdown import md_safe
from mha_viz.app.memory import PAGE_FACTOR, queued
from mha_viz.app.names import head_name, layer_name, token_label
from mha_viz.contract import InputError, UnavailableError
from mha_viz.contract.records import Continuation, GenerationSettings
from mha_viz.web.payload import written_steps

STEP_KEY = "write_step"
MARK = " ✎"  # after a written token's label
PLAY_SECONDS = 0.6  # between steps while playing


# -- the settings ------------------------------------------------------------------------------------------------
def _pressed() -> None:
    st.session_state[ON_KEY] = {"tokens": st.session_state.get(N_KEY, 16),
                                "sampling": st.session_state.get(MODE_KEY) == SAMPLING,
                                "temperature": st.session_state.get(TEMP_KEY, 1.0),
                                "seed": st.session_state.get(SEED_KEY, "0")}
    st.session_state[STEP_KEY] = 1


def _stopped() -> None:
    let_go()
    for key in (ON_KEY, STEP_KEY):
        st.session_state.pop(key, None)


def controls() -> dict | None:
    """The settings' boxes and the Continue button, in one row -> the settings as pressed, or None."""
    for key, default in ((N_KEY, 16), (MODE_KEY, GREEDY), (TEMP_KEY, 1.0), (SEED_KEY, "0")):
        st.session_state.setdefault(key, default)  # the boxes' defaults, or what the link put there
    row = st.container(key="wrap_write")
    # Continue gets the widest share: at 1000x800 its label was cut in a fifth of the row (test_page_layout).
    c1, c2, c3, c4, c5, c6 = row.columns([1, 1.3, 1, 0.8, 1.4, 0.9], vertical_alignment="bottom")
    c1.number_input("Tokens to write", step=1, key=N_KEY,
                    help="How many tokens the model writes after the sentence, at most (it stops earlier at its "
                         "end-of-text token).")
    c2.radio("Choose", [GREEDY, SAMPLING], key=MODE_KEY, horizontal=True,
             help="greedy: the most likely token each time. sampling: drawn from the model's distribution at the "
                  "temperature, by a generator seeded with the seed, so the link writes the same again.")
    c3.number_input("Temperature", step=0.1, key=TEMP_KEY, format="%.2f",
                    help="Sampling only: above 0; below 1 sharpens the distribution, above 1 flattens it.")
    c4.text_input("Seed", key=SEED_KEY, help="Sampling only: a whole number.")
    c5.button("Continue", key="write_go", on_click=_pressed, type="primary",
              help="Let the model write on from the sentence, with the heads that are off switched off.")
    c6.button("Clear", key="write_clear", on_click=_stopped, help="Back to the sentence alone.")
    return st.session_state.get(ON_KEY)


def continuations(ctx: ViewContext, raw: dict) -> tuple[Continuation, Continuation | None] | None:
    """(every head on, with the page's heads off, or None when none is) for the settings as typed; None, with one
    line on the page, when they cannot be written (nothing is run then)."""
    why = ctx.model.cannot_write()
    if why:
        st.warning(md_safe(why))
        return None
    try:
        settings = GenerationSettings.read(**raw)
        key = (ctx.name, ctx.text, settings, ctx.heads_off, str(ctx.ablation))
        entries = [entry(ctx.name, ctx.text, settings)]
        if ctx.heads_off:
            entries.append(entry(ctx.name, ctx.text, settings, ctx.heads_off, ctx.ablation))
        let_go(keep=tuple(entries))  # the last request's continuations go before the new ones are made
        st.session_state[KEPT] = {"key": key, "entries": entries}
        with st.spinner(f"Writing up to {settings.tokens} tokens..."):
            original = written(ctx.model, ctx.name, ctx.text, settings)
            off = written(ctx.model, ctx.name, ctx.text, settings, ctx.heads_off,
                          ctx.ablation) if ctx.heads_off else None
    except (InputError, UnavailableError) as err:
        let_go()
        st.warning(md_safe(str(err)))
        return None
    return original, off


def entry(name: str, text: str, settings: GenerationSettings, off=frozenset(), ablation="zero") -> tuple:
    """The run cache's key of a continuation: greedy settings differ only in what they ignore (temperature,
    seed), so those are left out; nothing off writes the same whatever "off" means."""
    if not settings.sampling:
        settings = GenerationSettings(tokens=settings.tokens)
    off = tuple(sorted(off))
    return ("continuation", name, text, settings, off, str(ablation) if off else "zero")


def written(model, name: str, text: str, settings: GenerationSettings, off=frozenset(),
            ablation="zero") -> Continuation:
    """The continuation of `text` by model `name` (loaded: `model`) with heads `off`: from the run cache, or
    written and kept there. Writing it holds a page's share of the budget for the final sequence (prompt and every
    token asked for, at most the context), once per page run for both continuations of one request, as a page's
    run does; a request that does not fit is the run cache's RunBudgetError (an InputError: one line)."""
    key = entry(name, text, settings, off, ablation)
    T = min(model.token_count(text) + settings.tokens, model.info.max_tokens)
    need = PAGE_FACTOR * model.n_layers * model.n_heads * T * T * 4  # float32 attention (L, H, T, T), x its copies
    return cache.runs().get(key, lambda: model.generate(text, key[3], ablate=off, ablation=ablation), need=need,
                            on_wait=queued, scope_key=("continuation", name, text, settings.tokens))


def kept_for(ctx: ViewContext) -> tuple[Continuation, Continuation | None] | None:
    """The continuations this session wrote for the page's model, sentence and heads off, or None."""
    kept = st.session_state.get(KEPT)
    if kept is None or kept["key"][:2] != (ctx.name, ctx.text) or kept["key"][3] != ctx.heads_off:
        return None
    pair = [cache.runs().peek(key) for key in kept["entries"]]  # None where the budget let one go meanwhile
    if pair[0] is None or (len(pair) > 1 and pair[1] is None):
        return None
    return pair[0], (pair[1] if len(pair) > 1 else None)


# -- what is drawn -----------------------------------------------------------------------------------------------
def labels(cont: Continuation) -> list[str]:
    """The grid's token labels: the written tokens marked."""
    return [token_label(t) + (MARK if i >= cont.n_prompt else "") for i, t in enumerate(cont.run.tokens)]


def written_text(cont: Continuation) -> str:
    """The written tokens' labels, one after another, Markdown-safe: `berg · at · the · city`."""
    return " · ".join(md_safe(token_label(t)) for t in cont.written)


def written_line(model, cont: Continuation) -> str:
    """The written tokens, each as the page labels a token (Markdown-safe), with how writing stopped."""
    text = written_text(cont)
    why = "its end-of-text token" if cont.stopped == "end" else f"the limit of {cont.settings.tokens} tokens"
    return f"**Written:** {text}  \n*({len(cont.written_ids)} tokens; it stopped at {why})*"


def panel(ctx: ViewContext, on_toggle: Callable[[int, int, bool], None], on_layer: Callable[[int], None]) -> None:
    """The Continue panel (see the module docstring), under the Layer view's grid."""
    st.markdown("#### Continue: let the model write on")
    raw = controls()
    if not raw:
        return
    pair = continuations(ctx, raw)
    if pair is None:
        return
    original, off = pair
    shown = off if off is not None else original
    st.markdown(written_line(ctx.model, shown) + (" — with the heads that are off" if off is not None else ""))
    tokens, att = labels(shown), shown.run.attentions  # (L, H, T, T)
    codes = encode_soon(tokens, att, ctx.shared_scale)
    key = f"grid|write|{ctx.name}"
    data = payload(tokens, att, ctx.layer, ctx.heads_off, ctx.n_cols, ctx.shared_scale, {}, encoded=codes,
                   held=held(key))
    data["steps"] = grid_steps(ctx.model, shown, st.session_state.get(STEP_KEY, 1))
    head_grid(data, key=key, on_toggle=on_toggle, on_layer=on_layer)
    steps(ctx, shown)
    if off is not None:
        comparison(ctx.model, original, off)
    grid_rest(data, codes, key)


def grid_steps(model, cont: Continuation, step: int) -> dict:
    """The grid's "steps" (web/payload.written_steps): every written token's top-5 and probability, step `step`
    (1-based, the step control's; out of range: the first) lit."""
    n_written = len(cont.written_ids)
    t = cont.settings.temperature if cont.settings.sampling else 1.0  # as Continuation.step_probs
    tops, chosen = step_tops(cont.run.logits, cont.written_ids, t)
    top = [[(token_label(model.decode(i)), p) for i, p in row] for row in tops]
    lit = step - 1 if 1 <= step <= n_written else 0
    return written_steps(cont.n_prompt, [token_label(w) for w in cont.written], top, chosen, lit)


def step_view(ctx: ViewContext, cont: Continuation, step: int) -> None:
    """Step `step` (1-based): the row of the position that wrote the token, in every head of the layer, that
    step's top-5 and the chosen token's probability."""
    model, n = ctx.model, cont.n_prompt
    k = step - 1
    query = n + k - 1  # the position read when token k was written
    rows = cont.run.attentions[ctx.layer, :, query, :query + 1]  # (H, query + 1)
    tokens = [token_label(t) for t in cont.run.tokens[:query + 1]]
    chosen = token_label(model.decode(cont.written_ids[k]))
    title = (f"Step {step}: reading {tokens[query]!r}, it wrote {chosen!r} (p = {cont.chosen_prob(k):.3f}); "
             f"every head of {layer_name(ctx.layer)}")
    fig = plotting.step_rows_figure(rows, tokens, n, [head_name((ctx.layer, h)) for h in range(model.n_heads)],
                                    title)
    st.plotly_chart(fig, config=chart_config(), key=f"write_rows_{step}_{time.monotonic_ns()}")
    st.table([{"rank": i + 1, "token": token_label(model.decode(t)), "probability": f"{p:.3f}",
               "written": "✎" if t == cont.written_ids[k] else ""} for i, (t, p) in enumerate(cont.top(k))])


def steps(ctx: ViewContext, cont: Continuation) -> None:
    """The step control and Play over the written tokens."""
    n_written = len(cont.written_ids)
    if not 1 <= st.session_state.get(STEP_KEY, 1) <= n_written:
        st.session_state[STEP_KEY] = 1
    c1, c2 = st.columns([5, 1], vertical_alignment="bottom")
    if n_written > 1:
        c1.slider("Step: the written token", 1, n_written, key=STEP_KEY,
                  help="Each written token's step: where every head of the layer looked from the position that "
                       "wrote it, and what the model could have written there.")
    play = c2.button("Play", key="write_play", help="Step through every written token.")
    box = st.empty()
    if play:
        for step in range(1, n_written + 1):
            with box.container():
                step_view(ctx, cont, step)
            time.sleep(PLAY_SECONDS)
        return
    with box.container():
        step_view(ctx, cont, st.session_state.get(STEP_KEY, 1))


def comparison(model, original: Continuation, off: Continuation) -> None:
    """Both continuations aligned step by step, the first step where they part marked, the KL at each step."""
    parts = first_difference(original.written_ids, off.written_ids)
    t = original.settings.temperature if original.settings.sampling else 1.0
    kl = step_kl(original.run.logits, off.run.logits, t)
    ablated = ", ".join(head_name(h) for h in sorted(off.run.ablated)[:6]) + ("…" if len(off.run.ablated) > 6 else "")
    if parts is None:
        st.markdown(f"**With {md_safe(ablated)} off** it writes the same tokens.")
    else:
        st.markdown(f"**With {md_safe(ablated)} off** the continuation parts from the original at step "
                    f"{parts + 1}.")
    rows = []
    for k in range(max(len(original.written_ids), len(off.written_ids))):
        a = original.written_ids[k] if k < len(original.written_ids) else None
        b = off.written_ids[k] if k < len(off.written_ids) else None
        rows.append({"step": k + 1,
                     "every head on": "" if a is None else token_label(model.decode(a)),
                     "heads off": "" if b is None else token_label(model.decode(b)),
                     "KL (nats)": f"{kl[k]:.3f}" if k < len(kl) else "",
                     "": "← parts here" if parts == k else ""})
    st.table(rows)
    st.caption("KL(every head on ‖ heads off) of the distributions each token was chosen from. Up to the step where "
               "they part both read the same tokens; after it each reads its own continuation.")


def comparison_if_written(ctx: ViewContext) -> None:
    """For the Ablation effects view: the comparison of the continuations this session wrote on this sentence with
    these heads off, or a pointer to the Layer view's Continue."""
    pair = kept_for(ctx)
    if pair is None or pair[1] is None:
        if ctx.heads_off and ctx.model.cannot_write() is None:
            st.caption("Continue (under the Layer view's grid) writes on from the sentence with these heads off and "
                       "compares it here with every head on.")
        return
    st.subheader("What it writes with these heads off")
    comparison(ctx.model, *pair)
