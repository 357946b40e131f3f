"""Notes & export: what a head is and is not, with references; the run as NPZ, CSV and JSON (with its scores)."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import streamlit as st

from mha_viz import analysis
from mha_viz.app.common import notes_text
from mha_viz.app.context import ViewContext
from mha_viz.contract import AttentionRun, Model


def render(ctx: ViewContext) -> None:
    notes_text()
    scores, _ = analysis.run_scores(ctx.run, ctx.model.causal)
    export(ctx.model, ctx.run, scores)


def export(model: Model, run: AttentionRun, scores: dict | None = None) -> None:
    att = run.attentions.numpy()  # (L, H, Q, K)
    buf = io.BytesIO()
    np.savez_compressed(buf, attentions=att, tokens=np.array(run.tokens, dtype=object).astype(str),
                        ablated=np.array(sorted(run.ablated), dtype=np.int64).reshape(-1, 2))
    c1, c2, c3 = st.columns(3)
    c1.download_button("Attention (NPZ)", buf.getvalue(), file_name="attention.npz", mime="application/octet-stream")
    table = _csv(run)
    if table is None:
        c2.caption(f"CSV is offered up to {CSV_MAX_CELLS:,} weights; this run has {run.attentions.numel():,}. "
                   "Use the NPZ (numpy.load) instead.")
    else:
        c2.download_button("Attention (CSV, long format)", table, file_name="attention.csv", mime="text/csv")
    payload = {"model": model.info.name, "tokens": run.tokens, "ablated": sorted(run.ablated),
               "shape": "layer, head, query, key"}
    if att.size <= CSV_MAX_CELLS:
        payload["attentions"] = np.round(att, 5).tolist()
    else:
        payload["attentions_note"] = "too large for JSON; download the NPZ"
    if scores:
        payload["scores_shape"] = "layer, head; NaN (null) where a score cannot be measured on this input"
        payload["scores"] = {name: [[None if v != v else round(v, 4) for v in row] for row in value.tolist()]
                             for name, value in scores.items()}
    c3.download_button("Attention and scores (JSON)", json.dumps(payload), file_name="attention.json",
                       mime="application/json")
    st.caption("Figures: the Layer grid saves its heads with its SVG and PNG buttons (labels, legend, which heads "
               "are off); every other figure with the camera button at its top right (on hover), as SVG or PNG as the "
               "sidebar's 'Save figures as' says.")


CSV_MAX_CELLS = 2_000_000  # past this a CSV is hundreds of MB; the NPZ holds the same numbers compactly


def _csv(run: AttentionRun) -> str | None:
    att = run.attentions  # (L, H, Q, K)
    if att.numel() > CSV_MAX_CELLS:
        return None
    n_layers, n_heads, nq, nk = att.shape
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(["layer", "head", "query_pos", "query_token", "key_pos", "key_token", "weight"])
    flat = att.reshape(-1).tolist()
    i = 0
    for layer in range(n_layers):
        for head in range(n_heads):
            for q in range(nq):
                for k in range(nk):
                    writer.writerow([layer, head, q, run.tokens[q], k, run.tokens[k], round(flat[i], 6)])
                    i += 1
    return out.getvalue()
