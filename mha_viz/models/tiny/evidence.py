"""The tiny model's training record: the probe file `make probe` writes (tiny_probes.py measures it) and the loss log
`make train` writes, read as `mha_viz.training_record.TrainingEvidence`. Reading needs no model, so the adapter answers
`training_evidence()` without importing the probes."""
from __future__ import annotations

from mha_viz.training_record import StepScores, TrainingEvidence

EVIDENCE = "probes.json"  # in the tiny model's folder; written by `python -m mha_viz.tiny_probes`
# The probes' scores, each under the registered measure it is (mha_viz.measures), as the census names them
# (census_result.role_scores): the previous token, induction and the duplicate token on the census's own generated
# inputs, and the subject from where the verb is predicted (tiny is causal: pre-verb→subject; the file keeps the mean
# attention on the subject, the census's "mass" of that relation, beside which the census keeps its accuracy).
SUBJECT = "pre-verb→subject"
RELATIONS = ("previous", "induction", "duplicate", SUBJECT)
CONTEXT_RELATIONS = ("previous", "induction")  # per position band and length (tiny_probes.measure_context)
RELATION_WORDS = {
    "previous": "previous token (random word sequences)",
    "induction": "induction: token after the first occurrence (a random sequence said twice)",
    "duplicate": "first occurrence itself (a random sequence said twice)",
    SUBJECT: "subject, where the verb is predicted (agreement sentences)",
}
# A probe file written before the scores took the registry's names (a folder trained and probed here earlier).
_OLD_NAMES = {"previous_token": "previous", "subject": SUBJECT}


def _renamed(evidence: dict) -> dict:
    """`evidence` with an older file's score names replaced by the registry's, so a folder probed before reads."""
    def fix(step: dict) -> dict:
        step = dict(step)
        for key in ("scores", "baselines", "context"):
            if isinstance(step.get(key), dict):
                step[key] = {_OLD_NAMES.get(k, k): v for k, v in step[key].items()}
        return step

    out = dict(evidence)
    out["per_step"] = [fix(s) for s in evidence.get("per_step", [])]
    if isinstance(evidence.get("final"), dict):
        out["final"] = fix(evidence["final"])
    return out

def set_verdict(entry: dict, base_accuracy: float) -> bool:
    """"Far more": the top-k set costs at least three times the accuracy the average set of k others costs, and
    more than the worst of them."""
    top_drop = base_accuracy - entry["top_result"]["accuracy"]
    mean_drop = base_accuracy - entry["others_mean_accuracy"]
    below_worst = entry["top_result"]["accuracy"] < entry["worst_other_result"]["accuracy"]
    return top_drop >= 3 * max(mean_drop, 0.0) and below_worst


def causal_summary(causal: dict) -> dict:
    """The top subject head's effect next to the strongest effect of any other single head."""
    (tl, th) = causal["top"]
    top = causal["heads"][tl][th]
    others = [(c["margin"], (l, h), c) for l, row in enumerate(causal["heads"]) for h, c in enumerate(row)
              if (l, h) != (tl, th)]
    margin, head, c = min(others)
    return {"top": (tl, th), "top_margin": top["margin"], "top_accuracy": top["accuracy"],
            "base_margin": causal["none"]["margin"], "base_accuracy": causal["none"]["accuracy"],
            "next": head, "next_margin": margin, "next_accuracy": c["accuracy"],
            "min_other_accuracy": min(o[2]["accuracy"] for o in others)}


def context_roles(context: dict) -> dict:
    """Which head holds each whole-context relation and how well, read from a step's "context" entry:
    {relation: {"head": (layer, head), "min": lowest band score, "mean": mean band score,
    "bands": {length: [score or None per band]}}}. The head is the one with the highest mean over every band
    with pairs at every length (ties to the lowest (layer, head)), so one head must hold the whole context."""
    out = {}
    for rel in CONTEXT_RELATIONS:
        entries = [(length, e) for length, bands in context[rel].items() for e in bands]
        scored = [e["scores"] for _, e in entries if e["scores"] is not None]
        L, H = len(scored[0]), len(scored[0][0])
        mean = {(l, h): sum(s[l][h] for s in scored) / len(scored) for l in range(L) for h in range(H)}
        head = min(mean, key=lambda lh: (-mean[lh], lh))
        l, h = head
        out[rel] = {"head": head, "min": min(s[l][h] for s in scored), "mean": mean[head],
                    "bands": {length: [None if e["scores"] is None else e["scores"][l][h] for e in bands]
                              for length, bands in context[rel].items()}}
    return out


def load_evidence(folder=None) -> dict | None:
    """The evidence file of the tiny model (see `probe`), or None when it has not been written."""
    import json
    from pathlib import Path

    from mha_viz.settings import ASSETS

    path = Path(folder or ASSETS / "tiny") / EVIDENCE
    return _renamed(json.loads(path.read_text())) if path.exists() else None


def typed_evidence(evidence: dict | None, log: dict) -> TrainingEvidence:
    """The evidence file and the training log as `TrainingEvidence` (mha_viz.training_record)."""
    def typed(s: dict) -> StepScores:
        return StepScores(step=int(s["step"]), loss=float(s["loss"]), agreement_accuracy=float(s["agreement_accuracy"]),
                          scores=s["scores"], baselines=s["baselines"],
                          context=context_roles(s["context"]) if s.get("context") else {})

    per_step = tuple(typed(s) for s in (evidence or {}).get("per_step", []))
    final = (evidence or {}).get("final")
    causal = (evidence or {}).get("final", {}).get("causal")
    base = causal["none"]["accuracy"] if causal else None
    return TrainingEvidence(
        log_steps=tuple(log.get("steps", [])), log_loss=tuple(log.get("loss", [])), per_step=per_step,
        relations=dict(RELATION_WORDS), probe_config=(evidence or {}).get("probe_config", {}), causal=causal,
        causal_summary=causal_summary(causal) if causal else None,
        set_verdicts=tuple(set_verdict(e, base) for e in causal.get("sets", [])) if causal else (),
        shipped=typed(final) if final else None)
