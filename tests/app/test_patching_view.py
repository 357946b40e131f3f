"""The Patching view and the meaning of "off", through the page (AppTest): what the page shows is compared with
the analysis run on its own, so a regression in the wiring cannot hide in the expected value."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.analysis.patching import (
    Metric,
    attribution_patching,
    direct_effects,
    normalise,
    patching_map,
    top_heads,
)
from mha_viz.app.name_swap import swapped

from helpers import loaded
from page_steps import open_view, send_sentence

APP = str(Path(__file__).resolve().parents[2] / "app.py")
TINY_TEXT = "Anna met Ben at the park. Later Ben gave the book to"
IOI = "When Mary and John went to the store, John gave a drink to"


def _app(model: str, text: str, params: dict | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=300)
    if params:
        at.query_params.update(params)
    at.run()
    if model != "minilm":
        at.sidebar.selectbox(key="model_choice").set_value(model).run()
    return send_sentence(at, text)


def _metric(at: AppTest, start: str) -> float:
    for metric in at.metric:
        if metric.label.startswith(start):
            return float(metric.value)
    raise AssertionError(f"no metric starting {start!r}; have {[m.label for m in at.metric]}")


def test_swapped_names_make_the_second_sentence():
    assert swapped(IOI) == "When Mary and John went to the store, Mary gave a drink to"
    assert swapped(TINY_TEXT) == "Anna met Ben at the park. Later Anna gave the book to"
    assert swapped("no names here at all") == "no names here at all"


LONG = ("When Mary and John went to the store after a long day at work, John gave a small bottle of milk to Mary. "
        "The weather had been cold all week. Inside, the shop smelled of fresh bread and coffee, and they hoped to "
        "rent the house by the lake again before the end of August.")


def test_a_long_text_swaps_the_names_that_come_back_not_capitalised_words():
    """Screenshot matrix: on a ~120-token text the second sentence swapped "August" for "Inside" (a
    month for a sentence-initial word), and the answer tokens were logit(“␣Inside”) − logit(“␣August”). The names
    that come back are swapped: the last "Mary" for "John"."""
    at = _app("minilm", LONG)
    open_view(at, "Patching")
    assert not at.exception, at.exception
    box = next(t for t in at.text_input if t.key.startswith("patch_source"))
    want = LONG.replace("milk to Mary.", "milk to John.")
    assert box.value == want == swapped(LONG), box.value
    # Still swapped: names met once, the one capitalised inside a sentence taken out.
    assert swapped("Inside the shop, Anna met Ben at noon.") == "Inside the shop, Anna met Anna at noon."


def test_tiny_patching_view_shows_the_measured_maps():
    model = loaded("tiny")
    at = _app("tiny", TINY_TEXT)
    open_view(at, "Patching")
    assert not at.exception, at.exception
    source = swapped(TINY_TEXT)
    assert any(t.value == source for t in at.text_input)
    run, other = model.run(TINY_TEXT), model.run(source)
    # The answer tokens are the swapped words ("ben" out, "anna" in), the one the first sentence
    # prefers as the answer; not the two sentences' top predictions, which the swap need not touch.
    ben, anna = model.token_id("ben"), model.token_id("anna")
    answer, against = (ben, anna) if run.logits[-1, ben] >= run.logits[-1, anna] else (anna, ben)
    boxes = {t.label: t.value for t in at.text_input}
    assert {boxes["Answer token"].strip().lower(), boxes["Against"].strip().lower()} == {"ben", "anna"}, boxes
    metric = Metric("logit_diff", position=len(run.tokens) - 1, answer=answer, other=against)
    assert _metric(at, "Metric on the first sentence") == pytest.approx(float(metric(None, run.logits)), abs=1e-3)
    assert _metric(at, "Metric on the second sentence") == pytest.approx(float(metric(None, other.logits)), abs=1e-3)
    parts = direct_effects(model.readout(TINY_TEXT), metric.position, answer, against)
    assert _metric(at, "Total logit difference") == pytest.approx(parts.total, abs=1e-3)
    assert _metric(at, "Sum over heads") + _metric(at, "Rest") == pytest.approx(parts.total, abs=2e-3)
    # The exact map, on request, equals the analysis run on its own; then a patched head moves the prediction.
    def head_of(name: str) -> tuple[int, int]:
        layer, head = (int(part[1:]) for part in name.split())
        return layer, head

    estimate = normalise(attribution_patching(model, TINY_TEXT, source, metric), *(
        float(metric(None, r.logits)) for r in (run, other)))
    before = at.multiselect(key="patch_pick|tiny").value
    assert [head_of(n) for n in before] == [top_heads(estimate, 1)[0][0]], "the estimate's strongest head first"
    labels = [b.label for b in at.button]
    at.button[[i for i, label in enumerate(labels) if label.startswith("Compute the exact map")][0]].click().run()
    assert not at.exception, at.exception
    assert any("rank correlation" in md.value for md in at.markdown)
    exact = patching_map(model, TINY_TEXT, source, metric).moved
    picked = at.multiselect(key="patch_pick|tiny").value
    assert len(picked) == 1, "an untouched pick follows the exact map's strongest head"
    layer, head = head_of(picked[0])
    assert exact.abs().max() == pytest.approx(abs(float(exact[layer, head])), abs=1e-5)
    patched = model.run(TINY_TEXT, patch={(layer, head)}, source=source)
    assert _metric(at, "Metric with 1 head(s) patched") == pytest.approx(float(metric(None, patched.logits)),
                                                                          abs=1e-3)
    mine = ["L0 H0", "L0 H1"]  # a pick the user made is kept on later reruns
    at.multiselect(key="patch_pick|tiny").set_value(mine).run()
    at.run()
    assert at.multiselect(key="patch_pick|tiny").value == mine


def test_a_second_sentence_of_another_length_is_explained():
    at = _app("tiny", TINY_TEXT)
    open_view(at, "Patching")
    box = [t for t in at.text_input if t.key.startswith("patch_source")][0]
    box.input("Anna met Ben at the big park. Later Ben gave the book to").run()
    assert not at.exception, at.exception
    n = len(loaded("tiny").run(TINY_TEXT).tokens)
    assert any(f"has {n + 1} tokens and the first has {n}" in w.value for w in at.warning)


def test_a_second_sentence_ending_in_a_space_is_read_as_the_first_is():
    """The page reads the first sentence without its trailing whitespace (text.read_text); the second one was
    read as typed, so a space after it made one token more than the first and no map."""
    at = _app("smollm2", IOI + " ")
    open_view(at, "Patching")
    box = [t for t in at.text_input if t.key.startswith("patch_source")][0]
    box.input(swapped(IOI) + " ").run()
    assert not at.exception, at.exception
    assert not any("tokens and the first has" in w.value for w in at.warning), [w.value for w in at.warning]
    mary, john = loaded("smollm2").token_id(" Mary"), loaded("smollm2").token_id(" John")
    other = loaded("smollm2").run(swapped(IOI))
    assert _metric(at, "Metric on the second sentence") == pytest.approx(
        float(other.logits[-1, mary] - other.logits[-1, john]), abs=1e-3)


def test_smollm2_worked_example_direct_effects_add_up():
    model = loaded("smollm2")
    at = _app("smollm2", IOI)
    open_view(at, "Patching")
    assert not at.exception, at.exception
    mary, john = model.token_id(" Mary"), model.token_id(" John")
    answers = {t.key.split("|")[0]: t.value for t in at.text_input if t.key.startswith("patch_a")}
    assert answers == {"patch_answer": " Mary", "patch_against": " John"}, answers
    parts = direct_effects(model.readout(IOI), model.token_count(IOI) - 1, mary, john)
    assert _metric(at, "Total logit difference") == pytest.approx(parts.total, abs=1e-3)
    assert _metric(at, "Sum over heads") == pytest.approx(float(parts.heads.sum()), abs=1e-3)


def test_encoder_patching_uses_the_embedding_cosine():
    at = _app("minilm", "The cat sat on the mat.")
    open_view(at, "Patching")
    box = [t for t in at.text_input if t.key.startswith("patch_source")][0]
    box.input("The dog sat on the mat.").run()
    assert not at.exception, at.exception
    assert _metric(at, "Metric on the second sentence") == pytest.approx(1.0, abs=1e-4)
    assert _metric(at, "Metric on the first sentence") < 0.999
    # An encoder has no next-token logits: nothing on the page speaks of a logit difference (the right column's
    # heading did), and the headings say what is measured, the embedding's cosine.
    words = [e.value for kind in ("markdown", "caption", "subheader", "info") for e in getattr(at, kind)
             if not e.value.startswith("### What you are looking at")]  # the page's notes, about every model
    words += [m.label for m in at.metric]
    assert not [w for w in words if "logit" in w.lower()], [w for w in words if "logit" in w.lower()]
    headings = [m.value for m in at.markdown if m.value.startswith("**")]
    assert any("cosine" in h for h in headings if h.startswith("**Direct effect")), headings
    assert any("embedding" in h for h in headings if h.startswith("**Patch heads")), headings


def test_mean_ablation_is_selectable_shown_and_in_the_link():
    model = loaded("minilm")
    at = _app("minilm", "The cat sat on the mat.")
    at.sidebar.radio(key="ablation").set_value("mean").run()
    at.toggle(key="tg|minilm|0|3").set_value(False).run()
    assert not at.exception, at.exception
    assert any(c.value.startswith("Off means mean") for c in at.caption)
    assert any("mean-ablated" in h.value for h in at.subheader)
    assert at.query_params.get("ablation") == ["mean"] or at.query_params.get("ablation") == "mean"
    from mha_viz.analysis import cosine_change

    base, run = model.run("The cat sat on the mat."), model.run("The cat sat on the mat.", ablate={(0, 3)},
                                                                ablation="mean")
    assert _metric(at, "Cosine similarity") == pytest.approx(cosine_change(base.output, run.output), abs=1e-5)
    zero = model.run("The cat sat on the mat.", ablate={(0, 3)})
    assert abs(cosine_change(base.output, zero.output) - cosine_change(base.output, run.output)) > 1e-5


@pytest.mark.parametrize("value, ok", [("mean", True), ("half", False)])
def test_link_carries_the_meaning_of_off(value, ok):
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update({"ablation": value, "off": "L0H3"})
    at.run()
    assert not at.exception, at.exception
    assert at.sidebar.radio(key="ablation").value == ("mean" if ok else "zero")
    notices = [w.value for w in at.warning if w.value.startswith("Link:")]
    assert bool(notices) != ok
    assert any(c.value.startswith(f"Off means {'mean' if ok else 'zero'}") for c in at.caption)


def test_a_predicted_newline_fills_the_answer_box_as_backslash_n():
    # A one-line box drops a newline: SmolLM2's top prediction after a list item is "\n", which used to read as an
    # empty box and a metric on the wrong tokens. The box shows it as \n and the metric uses the newline's id.
    from mha_viz.app.patching_shared import shown_token, typed_token

    for token in ("\n", " Mary", "\n\n", "\t x"):
        assert "\n" not in shown_token(token) and typed_token(shown_token(token)) == token
    model = loaded("smollm2")
    text = "Shopping list:\n- milk\n- eggs\n- bread"
    run = model.run(text)
    assert model.decode(int(run.logits[-1].argmax())) == "\n", "precondition: SmolLM2 predicts a newline here"
    at = _app("smollm2", text)
    open_view(at, "Patching")
    assert not at.exception, at.exception
    # No names to swap: two words changed by hand, so the answer tokens are each sentence's top prediction.
    source = "Shopping list:\n- tea\n- rice\n- bread"
    assert model.token_count(source) == model.token_count(text), "precondition: as many tokens"
    [t for t in at.text_input if t.key.startswith("patch_source")][0].input(source).run()
    assert not at.exception, at.exception
    boxes = {t.label: t.value for t in at.text_input}
    assert boxes["Answer token"] == "\\n"
    assert not [w.value for w in at.warning if "tokens for this model" in w.value]
    other = model.run(source)
    against = int(other.logits[-1].argmax())
    if against == int(run.logits[-1].argmax()):
        against = int(run.logits[-1].topk(2).indices[1])
    metric = Metric("logit_diff", position=len(run.tokens) - 1, answer=model.token_id("\n"), other=against)
    assert _metric(at, "Metric on the first sentence") == pytest.approx(float(metric(None, run.logits)), abs=1e-3)


def _page_text(at: AppTest) -> str:
    return " ".join(str(e.value) for kind in ("markdown", "caption", "metric", "info", "warning")
                    for e in getattr(at, kind))


@pytest.mark.parametrize("model", ["tiny", "minilm", "smollm2"])
def test_identical_sentences_say_so_and_the_example_pair_works(model):
    """A sentence without two names got an identical copy, flat maps, "rank correlation nan"
    and a 270-run button. Now: a clear state with no map and no button; the model's example pair, one click away,
    moves the metric; `nan` never reaches the page."""
    at = _app(model, "the keys to the cabinet are on the table .")
    open_view(at, "Patching")
    assert any("same as the first" in i.value for i in at.info), [i.value for i in at.info]
    assert not [b for b in at.button if b.label.startswith("Compute the exact map")]
    assert not at.get("plotly_chart")
    at.button(key="patch_pair").click().run()
    assert not at.exception, at.exception
    assert at.session_state["view"] == "Patching"
    first, second = _metric(at, "Metric on the first sentence"), _metric(at, "Metric on the second sentence")
    assert abs(first - second) > 1e-3, (first, second)  # an encoder's cosine moves by about 0.02
    if model != "minilm":  # the answer tokens are the swapped words
        boxes = {t.label: t.value.strip() for t in at.text_input}
        assert {boxes["Answer token"], boxes["Against"]} in ({"Mary", "John"}, {"cup", "box"}), boxes
    labels = [b.label for b in at.button]
    at.button[[i for i, label in enumerate(labels) if label.startswith("Compute the exact map")][0]].click().run()
    assert not at.exception, at.exception
    assert not re.search(r"\bnan\b", _page_text(at), re.IGNORECASE)


def _spec(at: AppTest, title: str) -> dict:
    import json

    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if title in c.proto.spec]
    assert len(specs) == 1, f"expected one chart titled {title!r}, found {len(specs)}"
    return specs[0]


def test_exact_map_says_its_cost_counts_stops_and_shares_the_estimates_colour_range():
    """Long steps and honest colour: the exact map's button says what it will cost before it is pressed;
    a stopped job says so and keeps nothing; the exact map and its attribution estimate share one symmetric range."""
    from mha_viz.app.common import _running_key

    text = "Anna met Ben at the old park. Later Ben gave the cup to"  # a pair no other test computes the map of
    model = loaded("tiny")
    n = model.n_layers * model.n_heads
    at = _app("tiny", text)
    open_view(at, "Patching")
    button = at.button(key="patch_exact_btn")
    assert f"({n} heads, about " in button.label and "on this server" in button.label, button.label
    boxes = {t.label: t.value for t in at.text_input}
    metric_args = ("logit_diff", len(model.run(text).tokens) - 1, model.token_id(boxes["Answer token"]),
                   model.token_id(boxes["Against"]))
    job = ("tiny", text, swapped(text), metric_args)
    at.session_state[_running_key("patch_exact_btn")] = job  # as a Stop leaves it: the run ended mid-way
    at.run()
    assert any("Stopped before every head was measured" in i.value for i in at.info)
    assert not [c for c in at.get("plotly_chart") if "Exact: share" in c.proto.spec]
    from mha_viz.app import estimates

    estimates._EXACT_FACTOR.pop("tiny", None)
    at.button(key="patch_exact_btn").click().run()
    assert not at.exception, at.exception
    assert "tiny" in estimates._EXACT_FACTOR, "the finished map corrects the next estimate (estimates.exact_finished)"
    exact, estimate = (_spec(at, t)["data"][0] for t in ("Exact: share", "Attribution estimate"))
    assert exact["zmin"] == estimate["zmin"] == -exact["zmax"] and exact["zmax"] == estimate["zmax"]
    source, metric = swapped(text), Metric(*metric_args)
    run, other = model.run(text), model.run(source)
    ends = float(metric(None, run.logits)), float(metric(None, other.logits))
    largest = max(float(patching_map(model, text, source, metric).moved.abs().max()),
                  float(normalise(attribution_patching(model, text, source, metric), *ends).abs().max()))
    assert exact["zmax"] == pytest.approx(largest, rel=1e-3)  # the largest value of either map
    at.run()
    assert not [b for b in at.button if b.key == "patch_exact_btn"], "no button once the map is there"
    assert _spec(at, "Exact: share")["data"][0]["zmax"] == exact["zmax"]


IOI_END = "When Mary and John went to the store, John gave a drink to Mary."


def test_a_text_ending_with_a_swapped_name_swaps_the_subject_and_keeps_the_name():
    """A text that ends with one of the two names (with or without a full stop) is the prompt up to that name
    plus its answer: the second sentence swaps the subject's second mention, as for a text that stops before the
    name, and keeps the final name. It used to swap the final name itself ("... to John.")."""
    want = "When Mary and John went to the store, Mary gave a drink to Mary."
    assert swapped(IOI_END) == want
    assert swapped(IOI_END[:-1]) == want[:-1]
    assert swapped(IOI_END[:-1] + "!") == want[:-1] + "!"
    assert swapped("Anna met Ben at the park. Later Ben gave the book to Anna.") == \
        "Anna met Ben at the park. Later Anna gave the book to Anna."
    # The page's default sentence names Anna once before Ben: she is the one swapped.
    assert swapped("The keys to the old cabinet are on the table, so Anna gave the keys to Ben.") == \
        "The keys to the old cabinet are on the table, so Ben gave the keys to Ben."
    # A final word that is not one of the swapped names keeps the old rule.
    assert swapped("Mary met John. John and Mary saw Kate.") == "Mary met John. John and John saw Kate."


def _reads_before_the_name(model_name: str, text: str, answer: str, against: str):
    """The page's metric on a text ending with a name is read at the token before that name, on the two names."""
    model = loaded(model_name)
    at = _app(model_name, text)
    open_view(at, "Patching")
    assert not at.exception, at.exception
    source = swapped(text)
    box = next(t for t in at.text_input if t.key.startswith("patch_source"))
    assert box.value == source
    run, other = model.run(text), model.run(source)
    boxes = {t.label: t.value for t in at.text_input}
    assert (boxes["Answer token"].strip().lower(), boxes["Against"].strip().lower()) == (answer, against), boxes
    ids = model.token_id(boxes["Answer token"]), model.token_id(boxes["Against"])
    # The token before the name: where the text up to the name ends (the same tokens, a causal model).
    prompt = text[:text.rindex(text.rstrip(".!? ").split()[-1])].rstrip()
    position = len(model.run(prompt).tokens) - 1
    assert run.tokens[:position + 1] == model.run(prompt).tokens
    assert position < len(run.tokens) - 2
    metric = Metric("logit_diff", position=position, answer=ids[0], other=ids[1])
    assert _metric(at, "Metric on the first sentence") == pytest.approx(float(metric(None, run.logits)), abs=1e-3)
    assert _metric(at, "Metric on the second sentence") == pytest.approx(float(metric(None, other.logits)), abs=1e-3)
    parts = direct_effects(model.readout(text), position, *ids)
    assert _metric(at, "Total logit difference") == pytest.approx(parts.total, abs=1e-3)
    # The page says what is measured: the position and the token there, and the two tokens compared.
    said = " ".join(c.value for c in at.caption)
    assert f"position {position}" in said and "before the name" in said, said
    return at


def test_smollm2_reads_the_metric_before_a_final_name():
    _reads_before_the_name("smollm2", IOI_END, "mary", "john")


def test_tiny_reads_the_metric_before_a_final_name():
    _reads_before_the_name("tiny", "Anna met Ben at the park. Later Ben gave the book to Anna.", "anna", "ben")


def test_smollm2_app_examples_with_two_names_move_the_metric():
    """The app's own example sentences: the default one ends with a name (read before it), the repeated-name one
    does not (read at the last position); both move the metric between the two sentences."""
    model = loaded("smollm2")
    for _, text, _ in model.examples():
        if swapped(text) == text:
            continue  # no two names: the identical state, tested above
        at = _app("smollm2", text)
        open_view(at, "Patching")
        assert not at.exception, at.exception
        assert model.token_count(swapped(text)) == model.token_count(text), text
        first, second = _metric(at, "Metric on the first sentence"), _metric(at, "Metric on the second sentence")
        assert abs(first - second) > 0.1, (text, first, second)


def test_names_of_two_words_swap_whole_and_are_read_before_their_first_word():
    """A name of two words ("Mary Smith") is one name: it is swapped whole for another of two words, and a text
    that ends with it keeps it and is read where its first word is predicted. Before, "Smith" alone was the final
    name, "Mary" and "John" were swapped as two single names, and the metric compared the wrong tokens."""
    text = "When Mary Smith and John Brown went to the store, John Brown gave a drink to Mary Smith."
    assert swapped(text) == "When Mary Smith and John Brown went to the store, Mary Smith gave a drink to Mary Smith."
    # A capitalised word that opens a sentence is no part of the name after it ("Yesterday Mary" names Mary).
    assert swapped("Yesterday Mary met John. Later John gave a book to Mary.") == \
        "Yesterday Mary met John. Later Mary gave a book to Mary."
    # Two-word names swap for two-word names where there is one, so both sentences keep their length.
    assert swapped("Anna Berg met Ben and Tom Lind. Later Tom Lind gave the book to") == \
        "Anna Berg met Ben and Tom Lind. Later Anna Berg gave the book to"


def test_tiny_lowercase_names_are_names_on_the_page():
    """The tiny model's vocabulary is lowercase, so no word of its own sentences looked like a name and the
    second sentence was always the first ("tiny fails every time"). The model says which of its words
    are names (`Model.name_words`): the page swaps them, reads the metric before a final name of two words, at its
    first word, and the sentences differ on the metric."""
    model = loaded("tiny")
    assert {"anna", "berg", "tom", "lind"} <= model.name_words()
    text = "anna berg met tom lind at the park . later tom lind gave the book to anna berg ."
    want = "anna berg met tom lind at the park . later anna berg gave the book to anna berg ."
    assert swapped(text, model.name_words()) == want
    assert swapped(text) == text  # without the model's names: no capitals, no names
    at = _app("tiny", text)
    open_view(at, "Patching")
    assert not at.exception, at.exception
    box = next(t for t in at.text_input if t.key.startswith("patch_source"))
    assert box.value == want
    boxes = {t.label: t.value for t in at.text_input}
    assert (boxes["Answer token"].strip(), boxes["Against"].strip()) == ("anna", "tom"), boxes
    run, other = model.run(text), model.run(want)
    position = len(model.run("anna berg met tom lind at the park . later tom lind gave the book to").tokens) - 1
    assert run.tokens[position] == "to"
    metric = Metric("logit_diff", position=position, answer=model.token_id("anna"), other=model.token_id("tom"))
    assert _metric(at, "Metric on the first sentence") == pytest.approx(float(metric(None, run.logits)), abs=1e-3)
    assert _metric(at, "Metric on the second sentence") == pytest.approx(float(metric(None, other.logits)), abs=1e-3)
    assert abs(float(metric(None, run.logits)) - float(metric(None, other.logits))) > 0.1
