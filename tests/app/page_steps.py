"""Steps on the page through AppTest. A sentence is typed into the box and sent with the form's button. The steps
with no Streamlit widget to click: the views' navigation and the Layer view's tabs are browser components (AppTest
runs no JavaScript), so a test does what their callbacks do, setting the page's one state (state.set_view,
state.set_layer) and running the page again."""
from __future__ import annotations


def open_view(at, view: str):
    at.session_state["view"] = view
    at.run()
    assert not at.exception, at.exception
    return at


def set_layer(at, model: str, layer: int):
    at.session_state[f"layer|{model}"] = layer
    at.run()
    assert not at.exception, at.exception
    return at


def layer_of(at, model: str) -> int:
    return at.session_state[f"layer|{model}"]


def send_sentence(at, text: str):
    """Type `text` into the sentence box and press the form's "Show attention"."""
    at.text_area(key="text_box").input(text)
    at.button[0].click()
    at.run()
    assert not at.exception, at.exception
    return at
