"""What the Circuits and Training views measure on a model's weights, once per server for every session: its
circuits (per kind for a model with cross-attention; a training step's as a side result in the run cache), how
the previous-token -> induction path forms over its saved steps, the path found by measurement, the causal check
of one head off, its embeddings and one head's maps.
"""
from __future__ import annotations

import streamlit as st

from mha_viz.analysis import circuits as circ
from mha_viz.app.cache import get_model, side_model, side_result
from mha_viz.contract import Head
from mha_viz.models import checkpoints, load_model
from mha_viz.web import kinds

FULL_MAP_VOCAB = 512  # vocabularies up to this size get the full token x token maps; larger ones a chosen row


@st.cache_resource(show_spinner=False, max_entries=8)
def model_circuits(name: str, kind: str | None = None) -> circ.Circuits:
    """`mha_viz.circuits` of a loaded model, one per model name (and kind of attention, for a model with
    cross-attention) for every session (the weights never change)."""
    return circ.circuits(get_model(name), kind=kind)


def step_circuits(name: str) -> circ.Circuits:
    """The same for a model loaded only for its weights (a training step such as tiny@800): the model is a side
    model and its circuits a side result, both in the run cache under its memory budget, so a timeline of many
    steps holds only what fits and drops the least recently used."""
    return side_result("circuits", name, lambda: circ.circuits(side_model(name)))


@st.cache_resource(show_spinner=False, max_entries=8)
def formation(name: str) -> circ.Formation:
    """Every saved training step of `name` measured once per server: its circuits, and its heads' induction and
    previous-token scores on the same repeated random texts at every step (`analysis.circuits.measured_formation`,
    as the notes measure it). Each step's model is loaded for this and dropped. Shared by this view and the Training
    view."""
    return circ.measured_formation(name, checkpoints(name), load_model)


@st.cache_resource(show_spinner=False, max_entries=8)
def measured_path(name: str) -> tuple[Head, Head] | None:
    """(previous-token head, induction head) of `name`, found by measuring both patterns on repeated random texts
    (`circ.induction_path`, as the notes find them); None where the vocabulary has too few plain words."""
    model = get_model(name)
    try:
        texts = circ.repeated_texts(model)
    except ValueError:
        return None
    return circ.induction_path(*circ.induction_and_previous(model, texts))


@st.cache_resource(show_spinner=False, max_entries=32)
def causal(name: str, off: Head, ablation: str) -> circ.CausalCheck:
    return circ.causal_check(get_model(name), off, ablation=ablation)


def by_kind(kind: str | None) -> dict:
    """The `kind` argument a model with cross-attention takes (its weights and embeddings per kind); none else."""
    return {} if kind is None else {"kind": kind}


@st.cache_resource(show_spinner=False, max_entries=8)
def embeddings(name: str, kind: str | None = None):
    """`Model.embeddings()` once per model (and kind): its labels take seconds to build for a 49k-token vocabulary."""
    return get_model(name).embeddings(**by_kind(kind))


@st.cache_resource(show_spinner=False, max_entries=16)
def head_maps(name: str, layer: int, head: int, kind: str | None = None) -> dict:
    """One head's maps from the weights: the full token maps for a small vocabulary, the position map for learned
    positions, and what a big vocabulary needs to show one row at a time. `kind`: a model with cross-attention's
    Encoder, Decoder or Cross (layers numbered within it)."""
    model = get_model(name)
    w = model.head_weights(layer, **by_kind(kind))
    emb = embeddings(name, kind)
    out = {"vocab": emb.labels, "rotary": w.rotary, "kv_head": w.kv_head[head],
           "full": len(emb.labels) <= FULL_MAP_VOCAB, "logits": emb.unembed is not None}
    wq, wk, wv, wo = w.w_q[head], w.w_k[head], w.w_v[head], w.w_o[head]  # (D, dh) x 3, (dh, D)
    if out["full"]:
        out["ov"] = circ.ov_token_map(emb.tokens, wv, wo, emb.unembed)  # (V, V)
        out["qk"] = circ.qk_token_map(emb.tokens, wq, wk)  # (V, V)
    if emb.positions is not None and not w.rotary:
        causal = model.causal if kind is None else kind == kinds.DECODER  # the decoder sees earlier targets only
        out["positions"] = circ.qk_position_map(emb.positions, wq, wk, causal=causal)  # (P, P)
    return out
