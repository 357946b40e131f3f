"""The notes' written-heads section (assets/notes.md) is what the models give now: `python -m mha_viz.written_notes`
measures it again, and this test fails, saying that command, when a written model or a tiny seed changed."""
from __future__ import annotations

import pytest

from mha_viz import written_notes as notes
from mha_viz.circuits_notes import NOTES


@pytest.mark.large  # measures every built-in model, SmolLM2 among them
def test_the_notes_written_section_is_what_the_models_give():
    shown = notes.current_section(NOTES.read_text())
    assert shown is not None, "assets/notes.md has no written-heads section: run python -m mha_viz.written_notes"
    assert shown == notes.section(), ("the written-heads section of assets/notes.md differs from what the models give "
                                      "now: run python -m mha_viz.written_notes (and commit assets/notes.md)")
    assert "no measured pattern explains it" in shown and "ranked first" in shown
