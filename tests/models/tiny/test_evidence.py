"""The probe file (assets/tiny/probes.json) that the notes and the Training view read holds the numbers the shipped
weights give: every figure is recomputed here from the weights and compared, so a retrain without `make probe`
(or a hand-edited number) fails."""
import json

import pytest

from mha_viz.app.views.notes import evidence_markdown, fill_notes
from mha_viz.models.tiny.adapter import checkpoint_steps, load_tiny
from mha_viz.models.tiny.train import TINY_ASSETS as ASSETS
from mha_viz.models.tiny.train import sha256
from mha_viz.settings import ASSETS as ALL_ASSETS
from mha_viz.tiny_probes import EVIDENCE, load_evidence, probe


@pytest.fixture(scope="module")
def shipped():
    evidence = load_evidence()
    assert evidence is not None, f"no {ASSETS / EVIDENCE}: run `make probe` and commit it"
    return evidence


@pytest.fixture(scope="module")
def recomputed():
    return probe(ASSETS)


def test_the_file_was_written_from_these_weights(shipped):
    for name, digest in shipped["weights"].items():
        assert sha256(ASSETS / name) == digest, f"{name} changed since `make probe`: run it again"
    assert shipped["steps"] == checkpoint_steps(ASSETS)


def test_every_number_matches_a_fresh_measurement(shipped, recomputed):
    # Scores are rounded to 4 decimals in the file; a fresh measurement agrees to that rounding.
    def close(a, b, path="") -> None:
        if isinstance(a, dict):
            assert a.keys() == b.keys(), path
            for k in a:
                close(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, list):
            assert len(a) == len(b), path
            for i, (x, y) in enumerate(zip(a, b)):
                close(x, y, f"{path}[{i}]")
        elif isinstance(a, float):
            assert abs(a - b) <= 2e-4, f"{path}: file {a}, measured {b}"
        else:
            assert a == b, f"{path}: file {a!r}, measured {b!r}"

    close(json.loads(json.dumps(recomputed)), shipped)


def test_the_notes_show_the_files_numbers(shipped):
    notes = (ALL_ASSETS / "notes.md").read_text()
    typed = load_tiny().training_evidence()  # the model's typed record of the same file
    assert typed.steps == shipped["steps"] and typed.final.scores == shipped["final"]["scores"]
    filled = fill_notes(notes, typed)
    section = evidence_markdown(typed)
    assert section in filled and "tiny-model-evidence" not in filled
    final = shipped["final"]
    assert f"{final['agreement_accuracy']:.0%}" in section
    best_subject = max(max(row) for row in final["scores"]["pre-verb→subject"])
    assert f"{best_subject:.0%}" in section
    assert f"{final['causal']['heads'][final['causal']['top'][0]][final['causal']['top'][1]]['margin']:.1f}" in section
    for entry in final["causal"]["sets"]:  # the set-level causal check, with its own verdict
        if entry["k"] > 1:
            assert f"{entry['n_others']} sets of {entry['k']} other heads" in section
            assert f"agreement accuracy {entry['top_result']['accuracy']:.0%}" in section
    # Without the file the notes say how to write it instead of showing stale numbers.
    assert "make probe" in fill_notes(notes, None)


def test_the_notes_say_how_far_across_the_context_each_head_holds(shipped):
    """The whole-context lines: for each relation, the head with the best mean over every length and band (found
    here from the raw file), and its lowest band, as the notes state them."""
    section = evidence_markdown(load_tiny().training_evidence())
    context = shipped["final"]["context"]
    for rel, words in (("previous", "previous token"), ("induction", "induction")):
        cells = [e["scores"] for bands in context[rel].values() for e in bands if e["scores"] is not None]
        n_layers, n_heads = len(cells[0]), len(cells[0][0])
        heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
        best = max(heads, key=lambda lh: (sum(c[lh[0]][lh[1]] for c in cells), -lh[0], -lh[1]))
        lowest = min(c[best[0]][best[1]] for c in cells)
        line = next(s for s in section.splitlines() if s.startswith(f"- Across the whole context, {words}"))
        assert f"L{best[0]} H{best[1]} holds it best" in line and f"its lowest is {lowest:.0%}" in line, line
        assert ("holds across the context" in line) == (lowest >= 0.9), line


def test_the_training_record_is_read_without_loading_the_model(monkeypatch):
    """The sidebar's notes on every page show tiny's record; reading it loaded tiny's weights on a page about MiniLM
    (a model the visitor never asked for, on every cold start). The registry reads it from disk, the same record."""
    import mha_viz.models.registry as registry
    from mha_viz.models import load_model, training_record

    expected = load_model("tiny").training_evidence()
    loads = []
    monkeypatch.setattr(registry, "load_model", lambda *a, **k: loads.append(a) or None)
    for name in ("tiny", "tiny-untrained", "tiny@400"):
        assert training_record(name) == expected, name
    assert loads == []
    assert training_record("minilm") is None  # trained elsewhere: only the loaded model can say (it says none)
