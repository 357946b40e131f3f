"""Hostile links: every query parameter the page reads, malformed on purpose, through AppTest.

Each case must give a notice ("Link: ...") or a clear load error, never a traceback, and the page must keep
working afterwards (heatmap toggles are drawn, and a head can still be switched off). The notices quote what
was in the link, so they must quote it as *text*: a link is attacker-controlled, and `st.warning` renders
Markdown (links, images, `$$` maths).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from helpers import open_link
from page_steps import layer_of

APP = str(Path(__file__).resolve().parents[2] / "app.py")
N_LAYERS, N_HEADS = 6, 12  # all-MiniLM-L6-v2, the default model


_open = open_link


def _notices(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if w.value.startswith("Link:")]


def _works(at: AppTest) -> None:
    """The page still draws the default model's layer, and a head can still be switched off."""
    assert len(at.toggle) == N_HEADS, [t.label for t in at.toggle]
    key = at.toggle[1].key
    at.toggle(key=key).set_value(False).run()
    assert not at.exception, at.exception
    assert any(m.label.startswith("Cosine similarity") for m in at.metric), "the effect panel should appear"


_MD = MarkdownIt("commonmark")


def _shown_as_text(markdown: str) -> None:
    """What Streamlit's Markdown would make of it: no link, image or raw HTML element, no unescaped `$`."""
    rendered = _MD.render(markdown)
    for tag in ("<a ", "<img", "<script", "<iframe"):
        assert tag not in rendered, f"{markdown!r} renders an element: {rendered!r}"
    unescaped_dollar = [i for i, ch in enumerate(markdown) if ch == "$" and (i == 0 or markdown[i - 1] != "\\")]
    assert not unescaped_dollar, f"{markdown!r} has unescaped '$' that Streamlit renders as maths"


def test_no_params_no_notice():
    at = _open({})
    assert _notices(at) == []
    _works(at)


@pytest.mark.parametrize("layer,fragment", [
    ("99", "does not exist"),
    ("6", "does not exist"),  # one past the last layer
    ("-1", "does not exist"),
    ("99999999999999999999999", "does not exist"),
    ("abc", "not a number"),
    ("1.5", "not a number"),
    ("1e3", "not a number"),
    ("", "not a number"),
    ("٣", None),  # an Arabic-Indic digit: int() accepts it as 3, which is a valid layer
])
def test_bad_layer(layer, fragment):
    at = _open({"layer": layer})
    notices = _notices(at)
    if fragment is None:
        assert notices == [] and layer_of(at, "minilm") == 3
    else:
        assert any(fragment in n for n in notices), notices
        assert layer_of(at, "minilm") == 0
    assert len(at.toggle) == N_HEADS


def test_valid_link_state_is_applied():
    at = _open({"model": "minilm", "layer": "2", "off": "L2H3,0.5", "view": "Layer", "text": "The cat sat."})
    assert _notices(at) == []
    assert layer_of(at, "minilm") == 2
    assert at.toggle(key="tg|minilm|2|3").value is False
    heads_off = " ".join(md.value for md in at.markdown if "Heads off" in md.value)
    assert "L0 H5" in heads_off and "L2 H3" in heads_off


@pytest.mark.parametrize("off,fragment", [
    ("L99H0", "do not exist"),
    ("L0H99", "do not exist"),
    ("L-1H0", "not heads"),
    ("x,y,z", "not heads"),
    ("L0H0," * 700, None),  # 700 copies of one valid head: accepted, de-duplicated
    (",".join(f"L{i}H0" for i in range(100, 600)), "do not exist"),  # 500 heads, 3,500 characters
], ids=["layer99", "head99", "negative", "words", "700-duplicates", "500-missing"])
def test_bad_heads(off, fragment):
    at = _open({"off": off})
    notices = _notices(at)
    if fragment is None:
        assert notices == []
    else:
        assert any(fragment in n for n in notices), notices
    for n in notices:
        assert len(n) < 400, f"a notice should stay short; got {len(n)} characters"
    at.run()
    assert not at.exception
    assert len(at.toggle) == N_HEADS


def test_enormous_list_of_heads_is_ignored_with_a_notice():
    at = _open({"off": ",".join(f"L{l}H{h}" for l in range(6) for h in range(12)) * 20})  # > 4,000 characters
    assert any("characters long and was ignored" in n for n in _notices(at)), _notices(at)
    _works(at)


def test_all_heads_off_from_a_link():
    """Every head of the model off: a valid run, and the page says what that means."""
    at = _open({"off": ",".join(f"L{l}H{h}" for l in range(N_LAYERS) for h in range(N_HEADS))})
    assert _notices(at) == []
    assert any("Every head is off" in w.value for w in at.warning)
    assert all(t.value is False for t in at.toggle)


def test_very_long_values_are_ignored():
    keys = ["text", "model", "layer", "off", "compare", "view"]
    at = _open({**{key: "A" * 50_000 for key in keys}, "unknown_key": "B" * 50_000})
    notices = _notices(at)
    for key in keys:
        assert any(key in n and "characters long and was ignored" in n for n in notices), (key, notices)
    _works(at)


def test_repeated_keys_use_the_first_and_say_so():
    at = _open({"layer": ["2", "4", "5"], "model": ["minilm", "smollm2"]})
    notices = _notices(at)
    assert any("layer" in n and "appears 3 times" in n for n in notices), notices
    assert any("model" in n and "appears 2 times" in n for n in notices), notices
    assert layer_of(at, "minilm") == 2
    _works(at)


@pytest.mark.parametrize("view", ["Nope", "layer", "<b>x</b>"])
def test_unknown_view(view):
    at = _open({"view": view})
    assert any("not a view" in n for n in _notices(at)), _notices(at)
    _works(at)


def test_unknown_model_is_a_clear_error_and_the_page_recovers():
    at = _open({"model": "no-such-org/no-such-model-xyz"})
    # A link's custom model loads only when the visitor confirms (tests/app/test_link_confirm.py); the error
    # comes from that load.
    at.button(key="link_model_load").click().run()
    errors = [e.value for e in at.error]
    assert errors and "no-such-org/no-such-model-xyz" in errors[0], errors
    assert "network" in errors[0] or "hub" in errors[0], errors
    # The user picks a built-in model and the page works.
    at.sidebar.selectbox(key="model_choice").set_value("minilm").run()
    assert not at.exception and not at.error
    _works(at)


@pytest.mark.parametrize("model", ["../../etc", "https://example.com/x", "a/../../b"])
def test_a_link_naming_a_url_or_dotdot_path_is_refused_from_the_name_alone(model):
    at = _open({"model": model})
    errors = [e.value for e in at.error]
    assert errors and "cannot name a model by a URL or a path with '..'" in errors[0], errors


@pytest.mark.parametrize("model", ["/etc/passwd", "~root"])
def test_a_path_in_a_link_is_checked_only_after_the_visitor_confirms(model):
    """The preview does not say whether the path exists; the loader refuses it once confirmed."""
    at = _open({"model": model})
    assert not at.error and any("This link asks for a model" in i.value for i in at.info)
    at.button(key="link_model_load").click().run()
    errors = [e.value for e in at.error]
    assert errors and ("not a folder" in errors[0] or "not a model" in errors[0]
                       or "no config.json" in errors[0] or "hub" in errors[0]), errors


@pytest.mark.parametrize("value", [
    "[x](javascript:alert(1))",
    "![x](http://127.0.0.1:9/x.png)",
    "$$x$$",
    "<img src=x onerror=alert(1)>",
    "**bold** _it_ `code`",
])
def test_notices_quote_link_values_as_text(value):
    # The value goes into every parameter that is quoted back, and is a (repeated) parameter *name* too.
    at = _open({"layer": value, "view": value, "off": value, value: ["1", "2"]})
    notices = _notices(at)
    assert len(notices) >= 4, notices
    for notice in notices:
        _shown_as_text(notice)
    at.run()
    assert not at.exception and len(at.toggle) == N_HEADS


def test_link_to_a_saved_tiny_step_opens_it_without_asking():
    """`tiny@N` is a training step that ships with the app: a link opens it at once; an unsaved step asks first."""
    from mha_viz import checkpoints, load_model

    step = checkpoints("tiny")[1]  # an early step, whose patterns differ from the last one's
    at = _open({"model": f"tiny@{step}", "text": "one two three four"})
    assert not [b for b in at.button if b.key == "link_model_load"], "a shipped step must not ask for confirmation"
    assert len(at.toggle) == load_model("tiny").n_heads
    # The picker names the step, not "your own"; an unsaved step says which steps exist.
    picker = at.sidebar.selectbox(key="model_choice")
    assert picker.value == f"tiny@{step}"
    assert f"tiny at training step {step} (saved with the app)" in picker.options, picker.options
    at2 = _open({"model": "tiny@999999"})  # not a saved step: nothing loads, and the page says which steps exist
    assert not [b for b in at2.button if b.key == "link_model_load"]
    said = " ".join(w.value for w in at2.warning)
    assert "not saved at training step 999,999" in said and f"{step:,}" in said, said
    assert "Hugging Face" not in said and not any("Hugging Face" in i.value for i in at2.info)
    at2.button(key="link_model_decline").click().run()
    assert not at2.exception and len(at2.toggle) == load_model("tiny").n_heads


def test_the_navigation_places_every_view_once_and_census_and_circuits_in_general():
    from mha_viz.app.views import HIDDEN, VIEWS, navigation

    groups = navigation()
    placed = [v for names in groups.values() for v in names]
    assert sorted(placed) == sorted(v for v in VIEWS if v not in HIDDEN) and len(placed) == len(set(placed))
    assert groups["In general"] == ["Census", "Circuits"] and "More" not in groups


@pytest.mark.parametrize("view", ["Census", "Circuits", "Training", "Trained vs untrained", "Notes & export"])
def test_views_about_the_model_in_general_show_no_sentence_strip_or_heads_off_line(view):
    """Census and Circuits read the weights or generated inputs, not this sentence's run: the page's token
    strip, its token count and the heads-off summary are not drawn above them (an old link opens them too)."""
    from mha_viz.app.views import NOT_ABOUT_THIS_RUN

    assert view in NOT_ABOUT_THIS_RUN
    at = _open({"model": "tiny", "view": view, "off": "L0H1"})
    assert at.session_state["view"] == view and not _notices(at), _notices(at)
    page = " ".join(str(e.value) for kind in ("markdown", "caption", "info") for e in getattr(at, kind))
    assert "token-strip" not in page and "Heads off:" not in page and "All heads are on" not in page
    assert not any(c.value.endswith(" tokens") for c in at.caption), [c.value for c in at.caption]


@pytest.mark.parametrize("view", ["Layer", "Follow a token", "Patching"])
def test_views_about_this_run_still_show_the_sentence(view):
    at = _open({"model": "tiny", "view": view})
    assert at.session_state["view"] == view and not _notices(at), _notices(at)
    page = " ".join(str(e.value) for kind in ("markdown", "caption") for e in getattr(at, kind))
    assert "All heads are on" in page
