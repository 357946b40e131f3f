"""The sentence as the page reads it (app/text.py) and the token strip above the views, through AppTest."""
from __future__ import annotations

import re

import pytest

from helpers import loaded, open_link
from page_steps import open_view

LONG = " ".join(["The keys to the old cabinet are on the table, so Anna gave the keys to Ben."] * 6)


def _page_text(at) -> list[str]:
    return ([e.label for e in at.expander] + [c.value for c in at.caption]
            + [m.value for m in at.markdown if "token-strip" not in m.value])


def _counts(at, n: int) -> list[str]:
    """The lines that give the strip's token count ("Tokens (n)", "n tokens · ..."), not a sentence that
    mentions the count to explain something else."""
    return [t for t in _page_text(at) if re.match(rf"(Tokens \({n}\)|{n} tokens)(\b|$)", t)]


@pytest.mark.parametrize("view", ["Follow a token", "All layers"])
def test_a_long_texts_token_count_is_written_once(view):
    """A strip of more than LONG_STRIP tokens folds into a "Tokens (N)" expander; the caption under it said
    "N tokens" as well (the count shown twice)."""
    from mha_viz.app.text import LONG_STRIP

    at = open_view(open_link({"model": "minilm", "text": LONG}), view)
    n = len(loaded("minilm").run(LONG).tokens)
    assert n > LONG_STRIP
    assert _counts(at, n) == [f"Tokens ({n})"], _counts(at, n)


def test_a_short_texts_token_count_is_written_once():
    text = "Dogs chase cats."
    at = open_view(open_link({"model": "minilm", "text": text}), "Follow a token")
    n = len(loaded("minilm").run(text).tokens)
    assert not at.expander or not any(e.label.startswith("Tokens (") for e in at.expander)
    assert _counts(at, n) == [f"{n} tokens"], _counts(at, n)


SENTENCE = "the keys are on the table ."  # in every model's vocabulary, tiny's too


@pytest.mark.parametrize("ending", [" ", "\n", " \n\n"])
def test_the_default_followed_token_is_the_last_word_not_a_trailing_whitespace_token(ending):
    """SmolLM2 makes a token of a final space or newline ("␣", "↵"), and Follow a token
    opened it. The default is the last token that is neither whitespace-only nor special."""
    from mha_viz.app.common import default_token

    model = loaded("smollm2")
    run = model.run(SENTENCE + ending)  # what the model makes of the text with its ending
    assert not run.tokens[-1].strip(), run.tokens  # the case: a whitespace-only last token
    assert run.tokens[default_token(run)] == " ."


def test_the_default_token_skips_special_tokens():
    from mha_viz.app.common import default_token

    run = loaded("minilm").run(SENTENCE)
    assert run.tokens[-1] == "[SEP]" and run.tokens[default_token(run)] == "."


@pytest.mark.parametrize("view", ["Follow a token", "Inside a head"])
@pytest.mark.parametrize("ending", [" ", "\n"])
def test_a_text_ending_in_whitespace_is_read_without_it(view, ending):
    """The page reads the sentence without its trailing whitespace (a space or newline left by typing or pasting),
    says so, and every count, default and link is the stripped text's; inner whitespace is kept."""
    text = "the keys  are on the\n\ntable ." + ending
    at = open_view(open_link({"model": "smollm2", "text": text}), view)
    kept = loaded("smollm2").run(text.rstrip())
    assert "\n" in kept.tokens  # the inner newlines are still tokens of their own
    picker = at.pills(key="token_pick")
    assert len(picker.options) == len(kept.tokens)
    assert picker.value == len(kept.tokens) - 1 and kept.tokens[picker.value] == " ."
    assert at.query_params["text"] in (text.rstrip(), [text.rstrip()])  # the link carries what was shown
    assert _counts(at, len(kept.tokens)) == [f"{len(kept.tokens)} tokens"]
    assert any("end of the text" in c.value for c in at.caption), [c.value for c in at.caption]


def test_a_token_chosen_in_the_link_is_kept():
    text = SENTENCE + " "
    at = open_view(open_link({"model": "smollm2", "text": text, "token": "2"}), "Follow a token")
    assert at.pills(key="token_pick").value == 2
    assert at.query_params["token"] in ("2", ["2"])


@pytest.mark.parametrize("model,text", [("smollm2", SENTENCE), ("minilm", SENTENCE + " \n")])
def test_no_note_where_nothing_was_a_token(model, text):
    """No trailing whitespace, or a tokenizer that makes no token of it (WordPiece): nothing to say."""
    at = open_link({"model": model, "text": text})
    assert not any("end of the text" in c.value for c in at.caption)
    assert at.query_params["text"] in (text.rstrip(), [text.rstrip()])
