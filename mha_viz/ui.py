"""Streamlit page sections. The only module (with app.py) that imports streamlit.

State: `st.session_state` holds UI state only (model choice, text, layer, the set of heads that are off per
model). Models are shared singletons (`st.cache_resource`); every run gets its ablation set as an argument.
"""
from __future__ import annotations

import gc
import html
import json
import threading
from collections import OrderedDict
from pathlib import Path

import streamlit as st
import torch

from . import analysis, plotting
from .contract import AttentionRun, Model, ModelLoadError
from .models import BUILTIN, load_model

ASSETS = Path(__file__).resolve().parent.parent / "assets"
CUSTOM = "custom"
DEFAULT_TEXT = "The keys to the old cabinet are on the table, so Anna gave the keys to Ben."
MAX_TEXT_CHARS = 200_000  # longer text is cut before tokenizing, and the page says so


def set_threads() -> None:
    """One torch thread per forward by default (MHA_VIZ_TORCH_THREADS): with another process on the second core,
    a two-thread forward waits at every barrier and runs 10-20x slower (benchmarks/RESULTS.md); sessions then
    share the cores instead of fighting over both."""
    import os

    raw = os.environ.get("MHA_VIZ_TORCH_THREADS", "1")
    wanted = int(raw) if raw.strip().isdigit() and int(raw) > 0 else 1
    if torch.get_num_threads() != wanted:
        torch.set_num_threads(wanted)


# -- cached resources ----------------------------------------------------------------------------------------
@st.cache_resource(show_spinner=False, max_entries=4)
def get_model(name: str) -> Model:
    model = load_model(name)
    # Streamlit runs a full gc.collect() after every rerun; walking the ~450k long-lived objects of torch,
    # transformers and the weights took ~0.25 s of each toggle (benchmarks/RESULTS.md). Freezing them moves
    # them out of the collector's way; later garbage is still collected.
    gc.collect()
    gc.freeze()
    return model


class _RunCache:
    """Runs shared by every session, least recently used first out, bounded by bytes rather than entries: one
    SmolLM2 run of 512 tokens holds 283 MB of attention, one of 20 tokens 0.4 MB. Not st.cache_data, which
    would copy the tensors on every hit."""

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self._runs: OrderedDict[tuple, AttentionRun] = OrderedDict()
        self._sizes: dict[tuple, int] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, make) -> AttentionRun:
        with self._lock:
            if key in self._runs:
                self._runs.move_to_end(key)
                return self._runs[key]
        run = make()  # outside the lock: sessions run their forwards in parallel
        size = sum(t.numel() * t.element_size() for t in (run.attentions, run.output, run.logits) if t is not None)
        with self._lock:
            self._runs[key], self._sizes[key] = run, size
            while len(self._runs) > 1 and sum(self._sizes.values()) > self.budget:
                oldest, _ = self._runs.popitem(last=False)
                del self._sizes[oldest]
        return run


def _cache_budget() -> int:
    import os

    raw = os.environ.get("MHA_VIZ_RUN_CACHE_MB", "1024")
    return (int(raw) if raw.strip().isdigit() else 1024) * 2**20


RUNS = _RunCache(_cache_budget())


def get_run(name: str, text: str, off: tuple[tuple[int, int], ...]) -> AttentionRun:
    return RUNS.get((name, text, off), lambda: get_model(name).run(text, ablate=off))


def examples_for(name: str) -> list[tuple[str, str, str]]:
    """(button label, sentence, what to look for) triples shown as one-click examples."""
    if name.startswith("tiny"):
        from .corpus import example_sentences

        return [(f"{e.relation}: {e.label}"[:48], e.text, e.label) for e in example_sentences()]
    path = ASSETS / "examples.json"
    if path.exists():
        return [(e["label"], e["text"], e["text"]) for e in json.loads(path.read_text())]
    return [("agreement", DEFAULT_TEXT, DEFAULT_TEXT)]


# -- state helpers -------------------------------------------------------------------------------------------
def off_set(model_name: str) -> set[tuple[int, int]]:
    store = st.session_state.setdefault("off", {})
    return store.setdefault(model_name, set())


def _toggle_key(model_name: str, layer: int, head: int) -> str:
    return f"tg|{model_name}|{layer}|{head}"


def _on_toggle(model_name: str, layer: int, head: int) -> None:
    heads = off_set(model_name)
    if st.session_state[_toggle_key(model_name, layer, head)]:
        heads.discard((layer, head))
    else:
        heads.add((layer, head))


def set_heads(model_name: str, heads: set[tuple[int, int]]) -> None:
    store = st.session_state.setdefault("off", {})
    store[model_name] = set(heads)


# -- sidebar -------------------------------------------------------------------------------------------------
def sidebar() -> str | None:
    """Model picker. Returns the model name to load, or None when the custom box is empty."""
    st.sidebar.header("Model")
    choices = list(BUILTIN) + [CUSTOM]
    labels = {**BUILTIN, CUSTOM: "your own: a Hugging Face id or a local folder"}
    choice = st.sidebar.selectbox("Model", choices, format_func=labels.get, key="model_choice")
    if choice == CUSTOM:
        custom = st.sidebar.text_input(
            "Model id or folder", key="custom_id", placeholder="e.g. prajjwal1/bert-tiny or /path/to/model",
            help="Loaded with eager attention, safetensors weights only, never remote code.",
        ).strip()
        return custom or None
    return choice


def load_or_explain(name: str) -> Model | None:
    try:
        if name == "smollm2":
            with st.spinner("Loading SmolLM2 (the first start converts its GGUF file, about 30 s)..."):
                return get_model(name)
        with st.spinner(f"Loading {name}..."):
            return get_model(name)
    except ModelLoadError as err:
        st.error(_md_safe(str(err)))  # the id may come from a link: show it as text, never as Markdown
    except Exception as err:  # an unexpected library error must not take the page down
        st.error(_md_safe(f"Could not load '{name}': {type(err).__name__}: {str(err)[:300]}"))
    return None


# -- text ----------------------------------------------------------------------------------------------------
def _set_text(text: str) -> None:
    st.session_state["text_box"] = text
    st.session_state["text"] = text


def _submit_text() -> None:
    st.session_state["text"] = st.session_state.get("text_box", "")


def text_input(model_name: str) -> str:
    st.session_state.setdefault("text", DEFAULT_TEXT)
    st.session_state.setdefault("text_box", st.session_state["text"])
    with st.form("text_form", border=False):
        st.text_area("Sentence", key="text_box", height=80, max_chars=None,
                     help="Any text; it is cut at the model's token limit and the page says how much was dropped.")
        st.form_submit_button("Show attention", type="primary", on_click=_submit_text)
    examples = examples_for(model_name)
    if examples:
        cols = st.columns(min(len(examples), 4))
        for i, (label, text, hint) in enumerate(examples[:8]):
            cols[i % len(cols)].button(
                label, key=f"ex{i}", on_click=_set_text, args=(text,), help=f"{hint} — “{text}”",
                width="stretch",
            )
    text = st.session_state["text"]
    if len(text) > MAX_TEXT_CHARS:
        st.info(f"The text has {len(text):,} characters; only the first {MAX_TEXT_CHARS:,} are tokenized.")
        text = text[:MAX_TEXT_CHARS]
    return text


LONG_STRIP = 80


def token_strip(run: AttentionRun, model: Model) -> None:
    chips = []
    unknown = set(run.unknown)
    for i, tok in enumerate(run.tokens):
        style = "background:#fde2e1;border-color:#c44e52" if i in unknown else ""
        chips.append(
            f"<span style='display:inline-block;border:1px solid #ccc;border-radius:4px;padding:0 4px;"
            f"margin:1px;font-family:monospace;font-size:12px;{style}' title='position {i}'>"
            f"{html.escape(_visible(tok))}</span>"
        )
    strip = f"<div data-testid='token-strip'>{''.join(chips)}</div>"
    if len(chips) > LONG_STRIP:  # a long text's strip would push every heatmap off the screen
        with st.expander(f"Tokens ({len(chips)})"):
            st.markdown(strip, unsafe_allow_html=True)
    else:
        st.markdown(strip, unsafe_allow_html=True)
    notes = [f"{len(run.tokens)} tokens"]
    if run.truncated:
        notes.append(
            f"**{run.truncated} tokens were dropped**: the text is longer than the {model.info.max_tokens} tokens "
            "this view handles, so only the start is shown"
        )
    if unknown:
        words = ", ".join(sorted({_visible(run.tokens[i]) for i in unknown}))
        notes.append(f"{len(unknown)} position(s) map to the unknown token (highlighted; the model does not know: "
                     f"{_md_safe(words[:200])})")
    st.caption(" · ".join(notes))


def _visible(token: str, limit: int = 40) -> str:
    text = plotting.visible_text(token) or "∅"
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _md_safe(text: str) -> str:
    """Escape what can make Markdown elements (links, images, code, maths, emphasis); keep words like A_B as typed.
    Streamlit already shows raw HTML as text."""
    for ch in "\\`*[]()<>$!|~#":
        text = text.replace(ch, "\\" + ch)
    return text


# -- notes ---------------------------------------------------------------------------------------------------
LEARNED_NOTE = (
    "Each heatmap is one head's **learned** attention pattern on this sentence. Heads are not labeled modules: "
    "nobody assigned them roles, and a pattern that looks like grammar or copying is a measurement on this "
    "input, not an explanation. Switch heads off to test what they actually contribute."
)


def learned_note() -> None:
    st.info(LEARNED_NOTE, icon="ℹ️")
    with st.expander("More: what a head is, and what a heatmap can and cannot tell you"):
        notes_page()


def notes_page() -> None:
    notes = ASSETS / "notes.md"
    st.markdown(notes.read_text() if notes.exists() else LEARNED_NOTE)


# -- the layer grid ------------------------------------------------------------------------------------------
def layer_grid(model: Model, model_name: str, run: AttentionRun, layer: int, n_cols: int, scale: str,
               tokens: list[str] | None = None, att: torch.Tensor | None = None) -> None:
    """The heads of one layer side by side, each with its on/off toggle. `tokens`/`att` (L, H, Q, K) may be a
    display transform of the run (hidden specials, merged words); scores are always measured on the run."""
    heads_off = off_set(model_name)
    tokens = run.tokens if tokens is None else tokens
    att = (run.attentions if att is None else att)[layer]  # (H, Q, K)
    zmax = 1.0 if scale == "shared 0–1" else None
    badges = _badges(run, model)
    for start in range(0, model.n_heads, n_cols):
        heads = list(range(start, min(start + n_cols, model.n_heads)))
        fig = plotting.heads_row_figure(
            att[heads[0]:heads[-1] + 1], tokens, [f"L{layer} H{h}" for h in heads],
            [(layer, h) in heads_off for h in heads], zmax=zmax, columns=n_cols,
            height=int(900 / n_cols),  # about the width of one column of the main area: squarish cells
        )
        st.plotly_chart(fig, width="stretch", key=f"row|{layer}|{start}", config={"displaylogo": False})
        cols = st.columns(n_cols)
        for head in heads:
            with cols[head - start]:
                _head_switch(model_name, layer, head, badges)


def _head_switch(model_name: str, layer: int, head: int, badges) -> None:
    key = _toggle_key(model_name, layer, head)
    st.session_state[key] = (layer, head) not in off_set(model_name)
    st.toggle(f"L{layer} H{head}", key=key, on_change=_on_toggle, args=(model_name, layer, head),
              help="On: the head contributes. Off: its output is zeroed before the output projection.")
    if badges is None:
        return
    scores, baselines = badges
    top = analysis.top_badges(scores, baselines, layer, head, n=1)
    if top:
        name, value = top[0]
        st.caption(f"measured: {value:.0%} → {SHORT_TARGET.get(name, name)}",
                   help=analysis.describe_score(name, value) + " A measurement, not a role.")
    else:
        st.caption("measured: no location stands out", help="No score is 10 points above what "
                   "uniform attention would give on this input.")


SHORT_TARGET = {"previous": "previous token", "next": "next token", "self": "itself", "first": "first token",
                "special": "special/punct.", "same_token": "same token earlier"}


def _badges(run: AttentionRun, model: Model):
    return _badges_cached(model.info.name, tuple(run.tokens), run.ablated, run, model)


@st.cache_resource(show_spinner=False, max_entries=64)
def _badges_cached(name: str, tokens: tuple, ablated: frozenset, _run: AttentionRun, _model: Model):
    run, model = _run, _model
    try:
        special = analysis.special_mask(run.tokens, run.special)
        causal = model.info.kind == "causal-lm"
        ids = torch.tensor(run.token_ids) if run.token_ids else None
        scores = analysis.pattern_scores(run.attentions, ids, special, causal)
        baselines = analysis.uniform_baselines(len(run.tokens), causal, ids, special)
        return scores, baselines
    except Exception:  # badges are an extra; never block the grid
        return None


ONLY_PROMPT = "Only this head on…"


def _layer_off(model_name: str, layer: int, n_heads: int, off: bool) -> None:
    heads = off_set(model_name)
    layer_heads = {(layer, h) for h in range(n_heads)}
    if off:
        heads.update(layer_heads)
    else:
        heads.difference_update(layer_heads)


def _only(model_name: str, layer: int, n_heads: int) -> None:
    key = f"only|{model_name}|{layer}"
    choice = st.session_state.get(key, ONLY_PROMPT)
    if choice != ONLY_PROMPT:
        keep = int(choice[1:])
        heads = off_set(model_name)
        heads.update((layer, h) for h in range(n_heads) if h != keep)
        heads.discard((layer, keep))
    st.session_state[key] = ONLY_PROMPT  # a callback may reset its own widget: it runs before the script


def _reset(model_name: str) -> None:
    off_set(model_name).clear()


def layer_controls(model: Model, model_name: str, layer: int) -> None:
    """Bulk switches. Callbacks, not st.rerun: they change state before the page is drawn, so one run suffices."""
    n = model.n_heads
    c1, c2, c3, c4 = st.columns(4)
    c1.button(f"All heads of L{layer} off", width="stretch", on_click=_layer_off, args=(model_name, layer, n, True))
    c2.button(f"All heads of L{layer} on", width="stretch", on_click=_layer_off, args=(model_name, layer, n, False))
    c3.selectbox("Only this head on", [ONLY_PROMPT] + [f"H{h}" for h in range(n)], key=f"only|{model_name}|{layer}",
                 label_visibility="collapsed", on_change=_only, args=(model_name, layer, n),
                 help="Switch off every other head of this layer.")
    c4.button("Reset: all heads on", width="stretch", on_click=_reset, args=(model_name,))


def off_summary(model_name: str) -> None:
    heads = sorted(off_set(model_name))
    if heads:
        st.markdown("**Heads off:** " + ", ".join(f"`L{layer} H{head}`" for layer, head in heads))
    else:
        st.caption("All heads are on. Switch a head off with the toggle under its heatmap.")


# -- effect of ablation --------------------------------------------------------------------------------------
def effect_panel(model: Model, base: AttentionRun, ablated: AttentionRun) -> None:
    if not ablated.ablated:
        return
    st.subheader("What changed with these heads off")
    if len(ablated.ablated) == model.n_layers * model.n_heads:
        st.warning("Every head is off: no token can read any other token, so each position sees only itself "
                   "through the residual stream. The output below is what is left.")
    position = prediction_position(model, base)
    if base.logits is not None and position is not None:
        kl = analysis.next_token_kl(base.logits, ablated.logits, position)
        before = _top(model, base.logits[position])
        after = _top(model, ablated.logits[position])
        c1, c2, c3 = st.columns(3)
        c1.metric("KL(before ‖ after) of the prediction", f"{kl:.4f} nats")
        c2.metric("Top prediction before", before[0][0].strip() or repr(before[0][0]))
        c3.metric("Top prediction after", after[0][0].strip() or repr(after[0][0]))
        where = "the masked position" if model.info.kind == "masked-lm" else "the last position (the next token)"
        with st.expander(f"Top-5 predictions at {where}, before and after", expanded=True):
            st.plotly_chart(plotting.predictions_figure(before, after, f"Top-5 predictions at {where}"),
                            width="stretch", key="pred_fig")
    elif model.info.kind == "masked-lm":
        st.caption(f"Put {getattr(model, 'mask_token', None) or 'the mask token'} in the sentence to compare the "
                   "masked word's predictions before and after.")
    cos = analysis.cosine_change(base.output, ablated.output)
    change = analysis.token_change(base.output, ablated.output, relative=True)
    c1, c2 = st.columns(2)
    c1.metric("Cosine similarity of sentence embedding (before vs after)", f"{cos:.5f}",
              delta=f"{cos - 1:.5f}", delta_color="inverse" if cos < 1 else "off")
    c2.metric("Largest per-token change of final hidden state", f"{float(change.max()):.2%}")
    with st.expander("Change of each token's final hidden state", expanded=False):
        st.plotly_chart(plotting.token_change_figure(base.tokens, change,
                                                     "Relative change of each token's final hidden state"),
                        width="stretch", key="tok_change_fig")


def prediction_position(model: Model, run: AttentionRun) -> int | None:
    """Where predictions are compared: a causal LM's last position, a masked LM's first mask token."""
    if run.logits is None:
        return None
    if model.info.kind == "masked-lm":
        mask = getattr(model, "mask_token", None)
        masked = [i for i, t in enumerate(run.tokens) if mask and t == mask]
        return masked[0] if masked else None
    return len(run.tokens) - 1


def _top(model: Model, logits: torch.Tensor, k: int = 5) -> list[tuple[str, float]]:
    probs, ids = analysis.topk_predictions(logits, k)
    return [(model.decode(int(i)), float(p)) for p, i in zip(probs, ids)]
