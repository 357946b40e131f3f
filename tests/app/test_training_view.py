"""The Training view through AppTest: a slider over the saved steps, the chosen layer's heads at that step (the
same numbers `load_model("tiny@N")` gives), the measured scores from the probe file beside them, Play, and the
older "Trained vs untrained" link."""
from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz import checkpoints, load_model
from mha_viz.models.tiny.evidence import load_evidence

from helpers import APP, heatmap_z

TEXT = "the keys to the old cabinet are on the table ."
STEPS = checkpoints("tiny")


def _open(view: str = "Training", model: str = "tiny") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": model, "view": view, "text": TEXT, "layer": "0"})
    at.run()
    assert not at.exception, at.exception
    return at


_z = heatmap_z


def _head_rows(at: AppTest) -> dict[int, list[np.ndarray]]:
    """step -> the heatmaps (one per head) of every row figure the view drew for that step."""
    rows: dict[int, list[np.ndarray]] = {}
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        heat = [t for t in spec["data"] if t.get("type") == "heatmap" and " · step " in t.get("name", "")]
        for trace in heat:
            rows.setdefault(int(trace["name"].rsplit(" ", 1)[1]), []).append(_z(trace))
    return rows


def _timeline(at: AppTest) -> dict:
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        if any(t.get("name") == "training loss" for t in spec["data"]):
            return spec
    raise AssertionError("no timeline figure (training loss against the step)")


def test_there_are_saved_steps():
    assert len(STEPS) >= 6 and STEPS[0] == 0


def test_slider_shows_the_heads_of_that_step():
    at = _open()
    slider = at.select_slider(key="train_step")
    assert slider.value == STEPS[-1]
    rows = _head_rows(at)
    assert list(rows) == [STEPS[-1]] and len(rows[STEPS[-1]]) == 4  # the layer's four heads, at the last step
    # The numbers drawn are the model's own at that step.
    want = load_model(f"tiny@{STEPS[-1]}").run(TEXT).attentions[0]  # (H, Q, K)
    for h, z in enumerate(rows[STEPS[-1]]):
        np.testing.assert_allclose(z, want[h].numpy(), atol=1e-6)

    slider.set_value(0).run()
    assert not at.exception, at.exception
    rows0 = _head_rows(at)
    assert list(rows0) == [0]
    init = load_model("tiny@0").run(TEXT).attentions[0]
    for h, z in enumerate(rows0[0]):
        np.testing.assert_allclose(z, init[h].numpy(), atol=1e-6)
        assert not np.allclose(z, rows[STEPS[-1]][h], atol=0.05), "trained and initial patterns should differ"
    # The step is marked on the timeline (step 0 sits at 1 on the log axis).
    assert {s["x0"] for s in _timeline(at)["layout"]["shapes"]} == {1}


def test_scores_beside_the_heads_come_from_the_probe_file():
    evidence = load_evidence()
    assert evidence is not None, "run `make probe`"
    at = _open()
    middle = STEPS[len(STEPS) // 2]
    at.select_slider(key="train_step").set_value(middle).run()
    row = next(s for s in evidence["per_step"] if s["step"] == middle)
    table = at.table[0].value
    assert list(table["head"])[:4] == ["L0 H0", "L0 H1", "L0 H2", "L0 H3"]
    # The file's scores are filed under their registered measures, and the table's columns are their labels.
    from mha_viz import measures

    assert set(row["scores"]) == {"previous", "induction", "duplicate", "pre-verb→subject"}
    for name in row["scores"]:
        assert list(table[measures.get(name).label])[:4] == [f"{v:.0%}" for v in row["scores"][name][0]], name
    assert any(f"agreement accuracy {row['agreement_accuracy']:.0%}" in c.value for c in at.caption)
    # The timeline's lines are the file's scores: L0 H2's previous-token line, step by step.
    spec = _timeline(at)
    line = [t for t in spec["data"] if t.get("name") == "L0 H2" and t.get("yaxis") == "y2"]
    assert len(line) == 1
    want = [s["scores"]["previous"][0][2] for s in evidence["per_step"]]
    np.testing.assert_allclose(_z({"z": line[0]["y"]}).astype(float), want, atol=1e-6)


def test_the_table_names_scores_as_the_rest_of_the_page_does():
    """The glossary: the table said "duplicate" for what the badges and the Similarity table call "same token
    earlier" (attention on a repeated token's earlier occurrence)."""
    from mha_viz import measures

    at = _open()
    columns = list(at.table[0].value.columns)
    assert measures.get("duplicate").label in columns and "duplicate" not in columns, columns
    assert not any("(duplicate)" in c.value for c in at.caption)


def test_play_walks_through_every_step_and_ends_on_the_last():
    at = _open()
    at.select_slider(key="train_step").set_value(0).run()
    at.button(key="train_play").click().run()
    assert not at.exception, at.exception
    at.run()  # the next run applies the step Play ended on
    assert at.select_slider(key="train_step").value == STEPS[-1]


def test_old_trained_vs_untrained_link_shows_the_last_step_over_the_initialisation():
    at = _open(view="Trained vs untrained")
    assert not at.warning, [w.value for w in at.warning]
    rows = _head_rows(at)
    assert sorted(rows) == [0, STEPS[-1]]
    want = load_model("tiny").run(TEXT).attentions[0]
    np.testing.assert_allclose(rows[STEPS[-1]][3], want[3].numpy(), atol=2e-3)  # float16 checkpoint vs tiny


@pytest.mark.parametrize("model", ["minilm"])
def test_from_another_model_the_view_picks_the_tiny_models_layer_itself(model):
    at = _open(model=model)
    picker = at.selectbox(key="train_layer")
    assert picker.options == ["L0", "L1", "L2"] or len(picker.options) >= 2
    picker.set_value(1).run()
    assert not at.exception, at.exception
    assert len(_head_rows(at)[STEPS[-1]]) == 4


def test_the_notes_on_the_page_read_the_probe_file():
    from mha_viz.app.views.notes import evidence_markdown
    from mha_viz.models.tiny.adapter import load_tiny

    at = _open(view="Notes & export")
    section = evidence_markdown(load_tiny().training_evidence())
    shown = "\n".join(md.value for md in at.markdown)
    for line in section.splitlines():
        if line.startswith("- "):  # every measured line of the section is on the page, as written from the file
            assert line[2:60] in shown, line


def test_under_another_model_the_view_shows_no_heads_off_panel_and_says_what_it_cut():
    """Under MiniLM the Training view showed MiniLM's heads-off panel above a view about tiny, and cut
    the text to the tiny model's token limit without saying so."""
    from helpers import loaded

    long_text = " ".join(["the dog is happy ."] * 40)  # far more than the tiny model reads
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "minilm", "view": "Training", "text": long_text, "off": "L0H3"})
    at.run()
    assert not at.exception, at.exception
    assert not [m for m in at.markdown if m.value.startswith("**Heads off:**")]
    assert not [h for h in at.subheader if h.value.startswith("What changed")]
    kept = len(loaded("tiny").run(long_text).tokens)
    assert any(c.value.startswith(f"The tiny model reads at most {kept} tokens") for c in at.caption), \
        [c.value for c in at.caption]


def _circuits_figure(at: AppTest) -> dict:
    for chart in at.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        if any("K-composition" in (t.get("name") or "") for t in spec["data"]):
            return spec
    raise AssertionError("no figure of the K-composition against the step")


def _half_step(steps: list[int], values: list[float]) -> int | None:
    """Written again here from the caption's words: the first step that covers half the rise from the first value."""
    rise = values[-1] - values[0]
    return next((s for s, v in zip(steps, values) if rise > 0 and v - values[0] >= 0.5 * rise), None)


def test_the_induction_path_in_the_weights_over_training_for_every_seed():
    """Every seed's K-composition from its previous-token head into its induction head against
    the step, next to that head's induction score and its copying score. The heads are found here by measurement
    (the causal check's all-on scores at the last step), every value recomputed from each step's own weights."""
    from mha_viz import circuits, seeds
    from mha_viz.analysis.circuits import causal_check, repeated_texts

    at = _open()
    spec = _circuits_figure(at)
    lines = {t["name"]: _z({"z": t["y"]}).astype(float) for t in spec["data"] if t.get("name")}
    text = "\n".join(m.value for m in at.markdown)
    names = seeds("tiny")
    assert len(names) >= 2
    for name in names:
        steps = checkpoints(name)
        last = load_model(f"{name}@{steps[-1]}")
        texts = repeated_texts(last)
        measured = causal_check(last, (0, 0), texts)  # its "all heads on" scores; which head is off is irrelevant
        n_heads = last.n_heads
        i = int(measured.induction_on[1:].flatten().argmax())
        induction_head = (1 + i // n_heads, i % n_heads)
        p = int(measured.previous_on[:induction_head[0]].flatten().argmax())
        previous_head = (p // n_heads, p % n_heads)
        pair = f"L{previous_head[0]} H{previous_head[1]} → L{induction_head[0]} H{induction_head[1]}"
        k_line = lines[f"{name}: K-composition {pair}"]
        ind_line = lines[f"{name}: L{induction_head[0]} H{induction_head[1]} induction score"]
        copy_line = lines[f"{name}: L{induction_head[0]} H{induction_head[1]} copying"]
        x = [t for t in spec["data"] if t.get("name", "").startswith(f"{name}: K-")][0]["customdata"]
        shown = [j for j, s in enumerate(x) if s in steps]  # this seed's steps on the union of every seed's steps
        assert [x[j] for j in shown] == steps and not np.isnan(k_line[shown]).any()
        k_want, ind_want, copy_want = [], [], []
        for s in steps:
            model = load_model(f"{name}@{s}")
            c = circuits(model)
            k_want.append(float(c.composition["k"][previous_head + induction_head]))
            copy_want.append(float(c.copying[induction_head]))
            ind_want.append(float(causal_check(model, (0, 0), texts).induction_on[induction_head]))
        np.testing.assert_allclose(k_line[shown], k_want, atol=1e-6)
        np.testing.assert_allclose(copy_line[shown], copy_want, atol=1e-6)
        np.testing.assert_allclose(ind_line[shown], ind_want, atol=1e-6)
        # The words say what was measured: both values at the first and last step, and when each rose.
        assert f"The K-composition {pair} is {k_want[0]:.3f} at step {steps[0]} and {k_want[-1]:.3f}" in text
        k_half, i_half = _half_step(steps, k_want), _half_step(steps, ind_want)
        assert k_half is not None and i_half is not None, "training should raise both"
        assert (f"half of its rise by step {k_half}, the induction score by step {i_half}") in text
    # Random matrices of the same shapes, as the baseline line.
    base = [t for t in spec["data"] if t.get("name") == "random matrices"][0]
    assert base["y"][0] == pytest.approx(circuits(load_model("tiny")).baseline["k"].mean)
