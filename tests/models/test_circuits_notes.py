"""The notes' circuits section (assets/notes.md) is what the weights give now: `python -m mha_viz.circuits_notes`
measures it again, and this test fails, saying that command, when the weights changed (e.g. after `make train`)."""
from __future__ import annotations

import pytest

from mha_viz import circuits_notes as notes


@pytest.mark.large  # measures every built-in model, SmolLM2 among them
def test_the_notes_circuits_section_is_what_the_weights_give():
    shown = notes.current_section(notes.NOTES.read_text())
    assert shown is not None, "assets/notes.md has no circuits section: run python -m mha_viz.circuits_notes"
    measured = notes.section()
    assert shown == measured, ("the circuits section of assets/notes.md differs from what the weights give now: run "
                               "python -m mha_viz.circuits_notes (and commit assets/notes.md)")
