"""The page through Streamlit's AppTest: no exception, a sentence in, a head off, a non-zero change shown."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _app(model: str = "minilm") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    if model != "minilm":
        at.sidebar.selectbox(key="model_choice").set_value(model).run()
    assert not at.exception, at.exception
    return at


def _metric(at: AppTest, label_start: str) -> str:
    for metric in at.metric:
        if metric.label.startswith(label_start):
            return metric.value
    raise AssertionError(f"no metric starting {label_start!r}; have {[m.label for m in at.metric]}")


def _enter(at: AppTest, text: str) -> None:
    at.text_area(key="text_box").input(text)
    at.button[0].click()  # the form's "Show attention"
    at.run()
    assert not at.exception, at.exception


def test_minilm_sentence_toggle_and_change():
    at = _app()
    assert len(at.toggle) == 12 and at.toggle[0].label == "L0 H0"
    _enter(at, "Seven purple giraffes played chess beside the quiet river.")
    assert any("chess" in md.value for md in at.markdown), "token strip shows the new sentence"
    at.toggle(key="tg|minilm|0|3").set_value(False).run()
    assert not at.exception, at.exception
    cos = float(_metric(at, "Cosine similarity"))
    assert cos < 1.0
    assert float(_metric(at, "Largest per-token change").rstrip("%")) > 0
    assert any("L0 H3" in md.value for md in at.markdown if "Heads off" in md.value)
    # Switching it back on restores the baseline: the effect panel disappears.
    at.toggle(key="tg|minilm|0|3").set_value(True).run()
    assert not any(m.label.startswith("Cosine similarity") for m in at.metric)


def test_heads_of_another_layer_keep_their_state():
    at = _app()
    at.toggle(key="tg|minilm|0|0").set_value(False).run()
    at.sidebar.selectbox(key="layer|minilm").set_value(3).run()
    assert [t.label for t in at.toggle][:1] == ["L3 H0"] and all(t.value for t in at.toggle)
    assert "L0 H0" in " ".join(md.value for md in at.markdown if "Heads off" in md.value)
    at.sidebar.selectbox(key="layer|minilm").set_value(0).run()
    assert at.toggle(key="tg|minilm|0|0").value is False


@pytest.mark.parametrize("text", ["", "   \n\t  "])
def test_empty_text_is_a_friendly_message(text):
    at = _app()
    _enter(at, text)
    assert any("empty" in w.value for w in at.warning)


def test_long_text_says_how_much_was_dropped():
    at = _app()
    _enter(at, "word " * 600)
    assert any("tokens were dropped" in c.value for c in at.caption)


def test_layer_bulk_controls():
    at = _app()
    labels = [b.label for b in at.button]
    at.button[labels.index("All heads of L0 off")].click().run()
    assert not at.exception and all(t.value is False for t in at.toggle)
    labels = [b.label for b in at.button]
    at.button[labels.index("Reset: all heads on")].click().run()
    assert all(t.value for t in at.toggle)
