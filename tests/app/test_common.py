"""Helpers every view uses to show tokens."""
from mha_viz.app.common import md_safe, visible


def test_a_token_of_spaces_is_visible_and_keeps_markdown_emphasis_closed():
    # SmolLM2 has a token that is a single space; shown as-is it read as nothing, and "**... {token}**" in the
    # Inside view printed its asterisks literally (emphasis cannot close after a space).
    assert visible(" ") == "␣" and visible("   ") == "␣␣␣" and visible("") == "∅"
    assert visible(" keys") == "␣keys" and visible("\n") == "↵"  # a leading space is part of the token: ␣
    assert not md_safe(visible(" ")).endswith(" ")
