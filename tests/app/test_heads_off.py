"""The heads-off summary above the views (app/effect_panel.py) through the page (AppTest): the box is reserved at one
height whether heads are off or not (so a toggle does not move the grid: tests/e2e/test_page_layout.py measures
that), and with every head on it says what a switch will show instead of leaving the box blank."""
from __future__ import annotations

import pytest
import torch

from helpers import loaded, open_link
from page_steps import open_view

TEXT = "anna met ben at the park . later ben gave the book to"  # in tiny's vocabulary


def _hint(at) -> str:
    lines = [m.value for m in at.markdown if m.value.startswith("**All heads are on.**")]
    assert len(lines) == 1, [m.value for m in at.markdown]
    return lines[0]


def _off_means(at) -> str:
    lines = [c.value for c in at.caption if c.value.startswith("Off means")]
    assert len(lines) == 1, [c.value for c in at.caption]
    return lines[0]


@pytest.mark.parametrize("view,where", [("Layer", "corner"), ("Follow a token", "Layer view")])
def test_all_heads_on_says_what_a_switch_will_show(view, where):
    """The box is reserved so the grid does not jump on the first toggle; with all heads on it held one short
    line and about 60 px of nothing. Now: where the switches are, what "off" means, and the prediction a switch
    will be measured against (the model's own top next token, measured here)."""
    at = open_view(open_link({"model": "tiny", "text": TEXT}), view)
    hint = _hint(at)
    assert where in hint and "switch" in hint.lower(), hint
    model = loaded("tiny")
    probs = torch.softmax(model.run(TEXT).logits[-1].double(), -1)  # (V,)
    p, top = probs.max(-1)
    caption = _off_means(at)
    assert f"“{model.decode(int(top))}” ({float(p):.0%})" in caption, caption
    assert "KL" in caption and "below the view" in caption, caption


def test_an_encoder_names_its_measure():
    at = open_link({"model": "minilm", "text": "Dogs chase cats."})
    assert "corner" in _hint(at)
    assert "cosine" in _off_means(at)


def test_the_summary_keeps_its_two_lines_through_a_toggle():
    """All on, one off, all on again: a line in bold and the "Off means" line each time, in the same box."""
    at = open_link({"model": "tiny", "text": TEXT})
    assert _hint(at) and _off_means(at)
    at.toggle(key="tg|tiny|0|1").set_value(False).run()
    assert not at.exception, at.exception
    assert any(m.value.startswith("**Heads off:** `L0 H1`") for m in at.markdown)
    assert not any(m.value.startswith("**All heads are on.**") for m in at.markdown)
    assert "KL" in _off_means(at)
    at.toggle(key="tg|tiny|0|1").set_value(True).run()
    assert not at.exception, at.exception
    assert _hint(at) and _off_means(at)
