"""A session rebuilt after its server process died (app/reconnect.py) runs the sentence the browser resends from the
box, not the link's older one (state.read_url_once, text.text_input), through AppTest on a stand-in model.

A rebuilt session is one whose `reconnect.rebuilt()` answer is True: the test sets that answer in the session, as
the first run would from the websocket handshake. The browser's resent box value is the box's widget value on the
session's first draw of the box (not yet in reconnect.DRAWN), set here through the session."""
from __future__ import annotations

from streamlit.testing.v1 import AppTest

from mha_viz.app import reconnect

LINK = "The keys to the old cabinet are on the table."
SENT = "Anna gave the keys to Ben before the train left."  # sent from the box as the old process died


def _page() -> None:
    import streamlit as st

    from mha_viz.app import reconnect, state, text

    class Model:  # what text_input asks of a model
        has_cross_attention = False  # one text: the box alone, no target box

        def examples(self):
            return []

        def example_pairs(self):
            return []

        def token_count(self, s: str) -> int:
            return len(s.split())

    state.read_url_once(["Layer"])
    reconnect.say_if_rebuilt()
    st.markdown(f"ran: {text.text_input(Model())}")


def _open(rebuilt: bool) -> AppTest:
    at = AppTest.from_function(_page, default_timeout=30)
    at.query_params["text"] = LINK
    at.session_state["_rebuilt"] = rebuilt  # reconnect.rebuilt()'s answer, kept for the session
    at.run()
    assert not at.exception, at.exception
    return at


def _ran(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("ran: "))[len("ran: "):]


def _resend(at: AppTest, value: str) -> AppTest:
    """The box's first draw again, with `value` in it as the browser's resent value would be (AppTest sends a form's
    values only with its submit button, whose callback would run the value itself: so set in the session)."""
    at.session_state[reconnect.DRAWN] = set()
    at.session_state["text_box"] = value
    at.run()
    assert not at.exception, at.exception
    return at


def test_a_fresh_session_runs_the_links_sentence_and_says_nothing():
    at = _open(rebuilt=False)
    assert _ran(at) == LINK and at.text_area(key="text_box").value == LINK
    assert not at.info and not at.warning, [e.value for e in [*at.info, *at.warning]]


def test_a_rebuilt_session_runs_the_sentence_its_browser_resends():
    at = _open(rebuilt=True)
    assert _ran(at) == LINK and at.text_area(key="text_box").value == LINK  # nothing resent: the link's
    assert [i.value for i in at.info] == [reconnect.REBUILT]
    assert not at.warning, [w.value for w in at.warning]  # no "default value and Session State" warning
    _resend(at, SENT)
    assert _ran(at) == SENT
    assert at.text_area(key="text_box").value == SENT


def test_a_rebuilt_session_keeps_the_links_sentence_when_the_box_is_empty():
    at = _resend(_open(rebuilt=True), "   ")
    assert _ran(at) == LINK


def test_after_its_first_draw_a_rebuilt_box_waits_for_show_attention_again():
    """Once drawn, the box is the session's own: typing runs nothing until the form is sent."""
    at = _open(rebuilt=True)
    at.session_state["text_box"] = SENT  # in the box, not sent
    at.run()
    assert _ran(at) == LINK
    at.text_area(key="text_box").input(SENT)
    at.button[0].click()  # the form's "Show attention"
    at.run()
    assert _ran(at) == SENT


def test_the_notice_says_what_comes_from_the_link_and_what_from_the_browser():
    assert "was rebuilt from the page's link" in reconnect.REBUILT  # the words the browser tests wait for
    assert "the sentence is the last one you sent" in reconnect.REBUILT
    assert "the Lesson's step are as the link has them" in reconnect.REBUILT
    assert "display options are as you left them" in reconnect.REBUILT


def test_a_rebuilt_lesson_has_no_sentence_box_and_the_layer_view_gets_it_back_with_the_links_sentence():
    """A session rebuilt on the Lesson (`?view=Lesson`): the page's box is not drawn there (the step has its own
    input), so the browser resends no sentence; opening the Layer view draws the box, on the link's sentence."""
    from helpers import APP
    from page_steps import open_view

    sentence = "mia frost saw leo hart ."  # in tiny's vocabulary
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "tiny", "view": "Lesson", "lesson": "3", "text": sentence})
    at.session_state["_rebuilt"] = True
    at.run()
    assert not at.exception, at.exception
    assert reconnect.REBUILT in [i.value for i in at.info]
    assert "text_box" not in [w.key for w in at.main.text_area]
    assert reconnect.DRAWN not in at.session_state or "text_box" not in at.session_state[reconnect.DRAWN]  # so the
    # box's first draw, later, is the rebuilt one
    open_view(at, "Layer")
    assert at.text_area(key="text_box").value == sentence and at.query_params["text"] in (sentence, [sentence])
    assert not at.warning, [w.value for w in at.warning]
