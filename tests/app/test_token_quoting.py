"""One way to write a token in a sentence of the page (the glossary, found again by the screenshot matrix):
prose said "Where . (position 120) looks", "Predictions at the last position, . (the next token)", "L0 H3 → . (7%)",
the prediction picker "16: '.'" (Python's repr, which writes SmolLM2's " She" as "' She'"), the patching metric
"logit('␣Mary')". A token inside a sentence is now its label in curly quotes (“.”, “␣She”); pickers show the label."""
from __future__ import annotations

import json

from mha_viz.app.names import quoted

from helpers import open_link
from page_steps import open_view

TINY = "anna berg went to the market . tom lind saw anna berg at the park ."


def test_quoted_writes_the_label_in_curly_quotes():
    assert quoted(" She") == "“␣She”" and quoted("\n") == "“↵”" and quoted(".") == "“.”"


def test_follow_a_token_names_its_token_in_quotes():
    at = open_view(open_link({"model": "minilm", "text": "Dogs chase cats in the yard."}), "Follow a token")
    chart = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if "follow_fig" in (c.proto.id or ""))
    title = chart["layout"]["title"]["text"]
    assert "Where “.” (position 7) looks" in title, title
    summary = next(c.value for c in at.caption if c.value.startswith("Where each head looks most"))
    assert "→ “" in summary and "→ . (" not in summary, summary


def test_ablation_effects_picker_and_caption_write_tokens_one_way():
    # A head off: with every head on the view shows no before/after panel (nothing differs).
    at = open_view(open_link({"model": "tiny", "text": TINY, "off": "L0H1"}), "Ablation effects")
    picker = at.selectbox(key="pred_pos")
    options = list(picker.options)
    assert options[-1] == "16: ." and not any("'" in o for o in options), options[-3:]
    captions = [c.value for c in at.caption if c.value.startswith("Predictions at")]
    assert captions and "the last position, “.” (the next token)" in captions[0], captions
