"""A text is checked once per run: the page's `get_run` encodes it once (`Model.encode_text`), and the size estimate,
the run, its meaning of "off" and the patching source read that one value instead of checking the string again."""
import sys

import pytest

from mha_viz import contract
from mha_viz.app import cache

TEXT = "anna saw the dog and the dog saw anna"
SOURCE = "berg saw the cat and the cat saw berg"  # as many tokens as TEXT, for patching


@pytest.fixture
def checks(monkeypatch):
    """Every call of `contract.check_text`, wherever a module imported it: (the texts checked)."""
    original, seen = contract.check_text, []

    def counted(text):
        seen.append(text)
        return original(text)

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("mha_viz") and getattr(module, "check_text", None) is original:
            monkeypatch.setattr(module, "check_text", counted)
    return seen


@pytest.mark.parametrize("ablation", ["zero", "mean", "resample"])
def test_a_run_from_the_page_checks_its_text_once(checks, ablation):
    text = f"{TEXT} and {ablation}"  # a text no other test runs, so the run is computed here, not found kept
    run = cache.get_run("tiny", text, off=((0, 0),), ablation=ablation)
    assert run.ablated == {(0, 0)} and run.ablation == ablation
    assert checks.count(text) == 1, f"check_text ran {checks.count(text)} times on the run's text: {checks}"


def test_a_patched_run_checks_each_of_its_two_texts_once(checks):
    run = cache.get_run("tiny", TEXT, patch=((1, 0),), source=SOURCE)
    assert run.patched == {(1, 0)}
    assert (checks.count(TEXT), checks.count(SOURCE)) == (1, 1), checks


def test_the_page_checks_its_text_once_for_each_of_its_two_parts(checks):
    """The page's first run asks for the run twice, from its frame and from the fragment under it (page.py), and
    reads the positions whose logits the view needs from the text's tokens (effect_panel.logits_at): each part checks
    the text once and hands the value on, so the positions and the run do not check it again."""
    from streamlit.testing.v1 import AppTest

    from helpers import APP

    text = f"{TEXT} on the page"  # a text no other test runs
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "tiny", "view": "Layer", "text": text})
    at.run()
    assert not at.exception, at.exception
    assert checks.count(text) == 2, f"check_text ran {checks.count(text)} times on the page's text: {checks}"
