"""Notes & export: what a head is and is not, with references; the run as NPZ, CSV and JSON (with its scores)."""
from __future__ import annotations

import csv
import io
import json

import numpy as np
import streamlit as st

from mha_viz import analysis
from mha_viz.analysis.pairs import SUBJECT
from mha_viz.app import continuation
from mha_viz.app.context import ViewContext
from mha_viz.app.names import head_name
from mha_viz.contract import Ablation, AttentionRun, Model
from mha_viz.settings import ASSETS
from mha_viz.training_record import TrainingEvidence

NOTES_MARK = "<!-- tiny-model-evidence"  # the line of assets/notes.md that the measured section replaces
OFF_MARK = "<!-- ablation-meanings"  # the line of assets/notes.md that each meaning of "off" replaces


def notes_text() -> None:
    """The notes, with the in-repo model's measured numbers filled in from its training record (read through the
    same cache as the Training view, not again on every rerun of the page), never typed into notes.md by hand."""
    from mha_viz.app.cache import training_evidence
    from mha_viz.app.common import LEARNED_NOTE, trained_here

    notes = ASSETS / "notes.md"
    evidence = training_evidence(trained_here(""))
    st.markdown(fill_notes(notes.read_text(), evidence) if notes.exists() else LEARNED_NOTE)


def fill_notes(notes: str, evidence: TrainingEvidence | None) -> str:
    """The notes with the line starting with NOTES_MARK replaced by `evidence_markdown(evidence)` (or by a line
    saying how to write the evidence file)."""
    section = evidence_markdown(evidence) if evidence is not None and evidence.per_step else (
        "*The tiny model's measured numbers appear here once `make probe` has written assets/tiny/probes.json.*")
    filled = {NOTES_MARK: section, OFF_MARK: off_meanings()}
    return "\n".join(next((text for mark, text in filled.items() if line.startswith(mark)), line)
                     for line in notes.split("\n"))


def off_meanings() -> str:
    """Each meaning of "off" in its own words (`contract.Ablation`: label, help and source), one item each."""
    return "\n".join(f"- **{a.label}**: {a.help}" + (f" Source: {a.source}." if a.source else "")
                     for a in Ablation.kinds())


def best_head(scores: list[list[float]]) -> tuple[tuple[int, int], float]:
    """The (layer, head) with the highest score, ties to the lowest (layer, head), and its score."""
    value, layer, head = max((v, -l, -h) for l, row in enumerate(scores) for h, v in enumerate(row))
    return (-layer, -head), value


def _fmt_head(head) -> str:
    return head_name(head)


def context_lines(final, words: dict[str, str]) -> list[str]:
    """The whole-context check, worded from `final.context`: for the previous-token and induction relations, the
    one head that holds each best over every text length and position band, its lowest band and where it is."""
    if not final.context:
        return []
    lines = []
    for rel, role in final.context.items():
        bands = role["bands"]
        low_len, low_band = min(((n, i) for n, b in bands.items() for i, v in enumerate(b) if v is not None),
                                key=lambda nb: bands[nb[0]][nb[1]])
        per_len = "; ".join(f"{n} tokens: " + " / ".join("-" if v is None else f"{v:.0%}" for v in b)
                            for n, b in sorted(bands.items(), key=lambda kv: int(kv[0])))
        lines.append(f"- Across the whole context, {words[rel].split(' (')[0].split(':')[0].lower()}: "
                     f"{_fmt_head(role['head'])} holds it best over every length and position third ({per_len}); "
                     f"its lowest is {role['min']:.0%}, in the {('first', 'middle', 'last')[low_band]} third at "
                     f"{low_len} tokens" + (" - it holds across the context." if role["min"] >= 0.9 else
                                             " - below 90% there."))
    return lines


def evidence_markdown(evidence: TrainingEvidence) -> str:
    """The notes' section on the in-repo model, worded from its measured training record, so no number in it is
    typed by hand."""
    first, final = evidence.per_step[0], evidence.final
    words = evidence.relations
    lines = [
        "### What the probes measured on the in-repo tiny model",
        "",
        f"`make probe` measured every saved training step of `tiny` (step 0 is its seeded initialisation, step "
        f"{final.step} the shipped weights) on held-out inputs the trainer never saw; the numbers below are read "
        "from the file it wrote (`assets/tiny/probes.json`), and a test recomputes them from the weights.",
        "",
    ]
    for rel in words:  # the probe file's scores, by their registered measures
        head, value = best_head(final.scores[rel])
        _, start = best_head(first.scores[rel])
        lines.append(f"- {words[rel]}: the best head ({_fmt_head(head)}) puts {value:.0%} of its attention "
                     f"there, against {final.baselines[rel]:.0%} for uniform attention; at step 0 the best "
                     f"head put {start:.0%}.")
    c, cfg = evidence.causal_summary, evidence.probe_config
    if c is not None:
        far = c["top_margin"] < 0.5 * c["next_margin"]
        lines += [
            f"- Agreement: the model picks the verb form that agrees with the subject on "
            f"{final.agreement_accuracy:.0%} of {cfg.get('n_agreement', '?')} held-out sentences whose attractor noun "
            f"has the other number; at step 0 it did on {first.agreement_accuracy:.0%} (chance is 50%).",
            f"- Switching a head off here means mean ablation (its output replaced by its mean over "
            f"{cfg.get('n_reference', '?')} other agreement sentences; Wang et al. 2022 mean-ablate the same way), "
            f"since zeroing also takes away the typical contribution every later layer was trained to expect. "
            f"Switching off {_fmt_head(c['top'])}, the head that attends most to the subject, cuts the mean logit "
            f"margin of the agreeing verb form from {c['base_margin']:.1f} to {c['top_margin']:.1f} (accuracy "
            f"{c['base_accuracy']:.0%} to {c['top_accuracy']:.0%}); switching off any one other head leaves at least "
            f"{c['next_margin']:.1f} ({_fmt_head(c['next'])}; accuracies {c['min_other_accuracy']:.0%} or more)"
            + (": agreement runs mostly through that head, not only alongside its attention." if far else
               ": not far enough apart to say agreement runs through that head more than through others."),
        ]
        for entry, verdict in zip(evidence.causal.get("sets", []), evidence.set_verdicts):
            k, top, worst = entry["k"], entry["top_result"], entry["worst_other_result"]
            if k == 1:
                continue
            lines.append(
                f"- The {k} heads with the highest subject scores ({', '.join(_fmt_head(h) for h in entry['top'])}) "
                f"off together: agreement accuracy {top['accuracy']:.0%}, margin {top['margin']:.1f}. Every one of "
                f"the {entry['n_others']} sets of {k} other heads: accuracy {entry['others_mean_accuracy']:.0%} on "
                f"average, margin {entry['others_mean_margin']:.1f}; the most harmful of them "
                f"({', '.join(_fmt_head(h) for h in entry['worst_other'])}) leaves {worst['accuracy']:.0%}"
                + (" - far less harm than the subject heads do." if verdict
                   else " - not far enough below the subject heads to say agreement runs through them."))
    lines += context_lines(final, words)
    untouched = all(best_head(first.scores[r])[1] <= first.baselines[r] + 0.05 for r in words)
    lines += [
        "",
        "**The training timeline** (the Training view) shows the same heads at every saved step. The patterns are "
        "not there at the start: they appear during training"
        + (", from an initialisation where no head beats uniform attention by more than 5 points on any measure. "
           if untouched else ". ")
        + "Olsson et al. 2022 (*In-context learning and induction heads*) found that "
        "induction heads form abruptly, in a phase change early in training that shows as a bump in the training "
        "loss. In this model, between consecutive saved steps:",
        "",
    ]
    steps = evidence.steps
    for rel in ("previous", "induction", SUBJECT):
        best = [best_head(s.scores[rel])[1] for s in evidence.per_step]
        rise, i = max((best[i + 1] - best[i], i) for i in range(len(best) - 1))
        lines.append(f"- {words[rel].split(' (')[0].split(':')[0]}: the best score rose most between steps "
                     f"{steps[i]} and {steps[i + 1]}, from {best[i]:.0%} to {best[i + 1]:.0%} "
                     f"({rise * 100:+.0f} points).")
    losses = [s.loss for s in evidence.per_step]
    drop, j = max((losses[i] - losses[i + 1], i) for i in range(len(losses) - 1))
    lines += [
        f"- Held-out loss: {losses[0]:.2f} nats at step 0, {losses[-1]:.2f} at step {steps[-1]}; it fell most "
        f"between steps {steps[j]} and {steps[j + 1]} ({losses[j]:.2f} to {losses[j + 1]:.2f}).",
        "",
        "These are measurements of this model on this corpus's inputs; they do not say what the heads of another "
        "model do, and a high score says where attention went, not what the head is for.",
    ]
    return "\n".join(lines)


def render(ctx: ViewContext) -> None:
    notes_text()
    run, written_from = ctx.run, None
    pair = continuation.kept_for(ctx)  # what Continue wrote on this sentence with these heads off, if it did
    if pair is not None:
        cont = pair[1] if pair[1] is not None else pair[0]
        run, written_from = cont.run, cont.n_prompt
        st.caption(f"The exports hold the sentence and the {len(cont.written_ids)} tokens the model wrote after it "
                   f"(Continue, under the Layer grid): `written_from` = {written_from} is the first written position.")
    scores, _ = analysis.run_scores(run, ctx.model.causal)
    export(ctx.model, run, scores, written_from)


def export(model: Model, run: AttentionRun, scores: dict | None = None, written_from: int | None = None) -> None:
    """NPZ, CSV and JSON of the run; `written_from`: where a continuation's written tokens begin (they are the
    run's tokens from there on), carried by the NPZ and the JSON."""
    att = run.attentions.numpy()  # (L, H, Q, K)
    buf = io.BytesIO()
    written = {} if written_from is None else {"written_from": np.int64(written_from)}
    np.savez_compressed(buf, attentions=att, tokens=np.array(run.tokens, dtype=object).astype(str),
                        ablated=np.array(sorted(run.ablated), dtype=np.int64).reshape(-1, 2), **written)
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
    if written_from is not None:
        payload.update(written_from=written_from, written=run.tokens[written_from:])
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
