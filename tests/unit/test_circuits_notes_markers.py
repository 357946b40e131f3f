"""Where the generated circuits section goes in the notes: replaced between its markers, or put after the tiny
model's evidence line the first time; nothing else in the notes changes."""
from __future__ import annotations

from mha_viz import circuits_notes as n


def _section(body: str) -> str:
    return "\n".join([n.CIRCUITS_START, body, n.CIRCUITS_END])


def test_a_first_section_goes_after_the_evidence_line_and_a_second_replaces_it():
    notes = "### Intro\n\ntext\n\n<!-- tiny-model-evidence: filled -->\n\n### Next\nmore"
    once = n.replace_section(notes, _section("first 0.123"))
    assert once.split("\n")[:6] == ["### Intro", "", "text", "", "<!-- tiny-model-evidence: filled -->", ""]
    assert n.current_section(once) == _section("first 0.123")
    twice = n.replace_section(once, _section("second\n0.456"))
    assert n.current_section(twice) == _section("second\n0.456") and "first" not in twice
    assert twice.replace(_section("second\n0.456"), "") == once.replace(_section("first 0.123"), "")
    assert n.current_section(notes) is None


def test_the_markers_render_as_nothing():
    # A markdown link-reference definition: "[label]: # (title)" is not shown by CommonMark renderers.
    for marker in (n.CIRCUITS_START, n.CIRCUITS_END):
        assert marker.startswith("[//]: # (") and marker.endswith(")") and marker.count("(") == 1
