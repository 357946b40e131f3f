"""Continue under the Layer grid (app/continuation.py) through the page (AppTest): pressed, or opened from a link, it
writes what `Model.generate` writes with the same settings (the page's path is that call); the link carries the
settings and reopens the same continuation; a step shows that step's top-5; with heads off the continuation is
written again and set beside the original (and in Ablation effects); bad input is one line and nothing is written."""
from __future__ import annotations

import json

import pytest
from test_page_truth import downloads  # noqa: F401  (the download buttons' files)

from mha_viz.app import continuation
from mha_viz.app.continue_link import N_KEY
from mha_viz.contract.records import GenerationSettings

from helpers import loaded, open_link
from page_steps import open_view

TEXT = "anna met ben at the park . later ben gave the book to"  # in tiny's vocabulary
OFF = "L1H0,L1H2,L2H1"
OFF_HEADS = {(1, 0), (1, 2), (2, 1)}


def _written(at) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("**Written:**")]


def _expected(settings: GenerationSettings, ablate=()) -> str:
    return continuation.written_text(loaded("tiny").generate(TEXT, settings, ablate=ablate))


def _tables(at) -> list:
    return [t.value for t in at.table]


def test_pressing_continue_writes_what_generate_writes():
    at = open_link({"model": "tiny", "text": TEXT})
    assert not _written(at)
    at.number_input(key=N_KEY).set_value(5)
    at.button(key="write_go").click().run()
    assert not at.exception, at.exception
    lines = _written(at)
    assert len(lines) == 1 and _expected(GenerationSettings(tokens=5)) in lines[0], lines
    assert at.query_params["write"] == "5"


def test_a_link_reopens_the_same_sampled_continuation():
    at = open_link({"model": "tiny", "text": TEXT, "write": "6", "sample": "1", "temp": "1.5", "seed": "3"})
    settings = GenerationSettings(tokens=6, sampling=True, temperature=1.5, seed=3)
    assert _expected(settings) in _written(at)[0]
    link = {k: at.query_params[k] for k in at.query_params}
    assert {k: link[k] for k in ("write", "sample", "temp", "seed")} == \
        {"write": "6", "sample": "1", "temp": "1.5", "seed": "3"}
    again = open_link(link)
    assert _written(again) == _written(at)


def test_a_step_shows_its_top_five_and_the_chosen_token():
    at = open_link({"model": "tiny", "text": TEXT, "write": "4"})
    at.session_state[continuation.STEP_KEY] = 3
    at.run()
    assert not at.exception, at.exception
    cont = loaded("tiny").generate(TEXT, GenerationSettings(tokens=4))
    top = [t for t in _tables(at) if "rank" in getattr(t, "columns", [])]
    assert top, _tables(at)
    rows = top[0]
    assert list(rows["probability"]) == [f"{p:.3f}" for _, p in cont.top(2)]
    assert list(rows["written"]).count("✎") == 1
    titles = [c.proto.spec for c in at.get("plotly_chart")]
    assert any(f"p = {cont.chosen_prob(2):.3f}" in spec and "Step 3" in spec for spec in titles)


def test_play_steps_through_every_written_token(monkeypatch):
    monkeypatch.setattr(continuation, "PLAY_SECONDS", 0.0)
    at = open_link({"model": "tiny", "text": TEXT, "write": "3"})
    at.button(key="write_play").click().run()
    assert not at.exception, at.exception


def test_heads_off_write_again_beside_the_original_and_in_ablation_effects():
    at = open_link({"model": "tiny", "text": TEXT, "write": "8", "off": OFF})
    model = loaded("tiny")
    original = model.generate(TEXT, GenerationSettings(tokens=8))
    off = model.generate(TEXT, GenerationSettings(tokens=8), ablate=OFF_HEADS)
    assert _expected(GenerationSettings(tokens=8), OFF_HEADS) in _written(at)[0]
    side = [t for t in _tables(at) if "heads off" in getattr(t, "columns", [])]
    assert side, _tables(at)
    table = side[0]
    assert list(table["every head on"]) == [model.decode(i) for i in original.written_ids]
    assert list(table["heads off"]) == [model.decode(i) for i in off.written_ids]
    assert all(float(k) >= 0 for k in table["KL (nats)"])
    effects = open_view(at, "Ablation effects")
    assert any("What it writes with these heads off" in h.value for h in effects.subheader)


@pytest.mark.parametrize("params, says", [
    ({"write": "10000"}, "do not fit"),
    ({"write": "4", "sample": "1", "temp": "0"}, "above 0"),
    ({"write": "4", "sample": "1", "seed": "abc"}, "seed must be a whole number"),
    ({"write": "many"}, "whole number"),
    ({"write": "4", "model": "minilm", "text": "Dogs chase cats."}, "not a causal language model"),
])
def test_bad_input_is_one_line_and_nothing_is_written(params, says):
    at = open_link({"model": "tiny", "text": TEXT, **params})
    lines = [w.value for w in at.warning if says in w.value]
    assert len(lines) == 1 and "\n" not in lines[0], [w.value for w in at.warning]
    assert not _written(at)


def test_the_exports_hold_the_written_tokens(downloads):  # noqa: F811
    at = open_link({"model": "tiny", "text": TEXT, "write": "5", "off": OFF})
    at = open_view(at, "Notes & export")
    button = [b for b in at.get("download_button") if "JSON" in b.label][0]
    payload = json.loads(downloads(button))
    cont = loaded("tiny").generate(TEXT, GenerationSettings(tokens=5), ablate=OFF_HEADS)
    assert payload["written_from"] == cont.n_prompt and payload["written"] == cont.written
    assert payload["tokens"] == cont.run.tokens and payload["ablated"] == sorted([list(h) for h in OFF_HEADS])
