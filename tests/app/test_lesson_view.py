"""The Lesson view: every step renders with no error, 'nan' or 'None'; each number and each head it names equals the
model's own measurement, recomputed here through the public API; the heads follow the lesson's model (a seed of
the tiny recipe); Next, Back and `?lesson=N` keep the place, in the URL too. Also the page's chrome: the Lesson first
in the navigation, the first-visit hint pointing to it, Streamlit's viewer toolbar.

Roles: within a model, a role's head is the census's (`head_census(...).named`), in every step (3 and 6 agree); a
step's own input is checked against it in words; a one-input reading says how many queries it averaged over, and
below `measures.SUPPORT_FLOOR` gives no number; words the model does not know are counted and marked."""
from __future__ import annotations

import functools
import json
import os
import re

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from mha_viz import head_census, load_model, measures, seeds
from mha_viz.analysis import combine_heads
from mha_viz.analysis.agreement import agreement
from mha_viz.analysis.census_run import census_inputs
from mha_viz.analysis.importance import head_importance
from mha_viz.analysis.scores import run_scores, run_support
from mha_viz.app.lesson import steps as lesson_steps
from mha_viz.app.names import UNKNOWN_MARK
from mha_viz.names import head_name

from helpers import APP, REPO, heatmap_z

N_STEPS = len(lesson_steps.STEPS)
ROLES = ("previous", "induction", "first")  # the roles the lesson names heads for


def _lesson(params: dict, answer: bool = True) -> AppTest:
    """The Lesson opened by its link; with `answer`, the step's prediction made (first choice), so it draws."""
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "tiny", "view": "Lesson", **params})
    at.run()
    assert not at.exception, at.exception
    if answer:
        _answer(at)
    return at


def _text(at) -> str:
    return "\n".join(m.value for m in at.markdown if not m.value.startswith("<style"))


def _saw(at) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("**What you just saw**"))


def _typed_into(at) -> list[str]:
    """The keys of the boxes a student can type into in the page's main column."""
    return [w.key for w in [*at.main.text_input, *at.main.text_area]]


def _argmax(scores: torch.Tensor) -> tuple[int, int]:
    layer, head = divmod(int(scores.nan_to_num(float("-inf")).flatten().argmax()), scores.shape[1])
    return layer, head


def _scores(name: str, text: str):
    model = load_model(name)
    return model, model.run(text), *run_scores(model.run(text), model.info.causal)


def _support(name: str, text: str) -> dict[str, int]:
    model = load_model(name)
    return run_support(model.run(text), model.info.causal)


@functools.lru_cache(maxsize=None)
def _named(name: str, role: str) -> tuple[tuple[int, int], ...]:
    """The heads the model's census names for `role` (its default census, as the Census view makes it)."""
    return tuple(h for h, _ in head_census(load_model(name)).named(role))


def _heads(heads) -> str:
    names = [head_name(h) for h in heads]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


# "the census's induction head L1 H3", "the census's first token heads are L1 H0, L1 H2 and L1 H3": role -> heads
CENSUS_ROLE = re.compile(r"[Tt]he census's ([a-z ]+?) heads? (?:is |are )?((?:L\d+ H\d+)(?:(?:, | and )L\d+ H\d+)*)")


def _roles_named(text: str) -> dict[str, set[frozenset[str]]]:
    """Every head set the text gives a role, by role: one set per role means one name per role."""
    found: dict[str, set[frozenset[str]]] = {}
    for role, heads in CENSUS_ROLE.findall(text):
        found.setdefault(role, set()).add(frozenset(re.findall(r"L\d+ H\d+", heads)))
    return found


def _answer(at) -> None:
    """Pick the first choice of every prediction question still open, so the step draws its figure."""
    for radio in [r for r in at.radio if (r.key or "").startswith("lesson_q_") and r.value is None]:
        radio.set_value(radio.options[0]).run()
        assert not at.exception, at.exception


def test_a_step_asks_first_and_its_question_and_answer_follow_the_model():
    """Step 1 asks before it draws; on tiny#seed2 the census's previous token head of layer 0 is another head, and
    the question and the measured answer name it."""
    for model in ("tiny", "tiny#seed2"):
        at = _lesson({"lesson": "1", "lesson_model": model}, answer=False)
        prev = next(h for h in _named(model, "previous") if h[0] == 0)
        question = next(r for r in at.radio if r.key == "lesson_q_1")
        assert f"switch off {head_name(prev)}" in question.label
        # Before the prediction only the first screen's figure (what attention is) is drawn, none of the step's.
        assert [c.key for c in at.get("plotly_chart")] == ["lesson_intro"], "a step's figure before the prediction"
        question.set_value("Only the other heads of layer 0").run()
        assert at.get("plotly_chart")
        assert "the answer is “Only the heads of the later layers”" in at.info[0].value
        assert f"With {head_name(prev)} off" in at.info[0].value


def test_the_typed_input_stays_across_next_and_back_and_a_long_paste_is_cut():
    at = _lesson({"lesson": "1"})
    at.text_input(key="lesson_text_1").input("anna saw ben . ben saw anna .").run()
    at.button(key="lesson_next").click().run()
    at.button(key="lesson_back").click().run()
    assert at.text_input(key="lesson_text_1").value == "anna saw ben . ben saw anna ."
    # One sentence the steps share: the link carries it once.
    assert at.query_params["lesson_text_0"] in ("anna saw ben . ben saw anna .", ["anna saw ben . ben saw anna ."])
    at.text_input(key="lesson_text_1").input("anna " * 100).run()
    assert len(at.text_input(key="lesson_text_1").value) == 400
    assert any("keeps the first 400" in i.value for i in at.info)
    at.text_input(key="lesson_text_1").input("").run()
    assert any("The box is empty, so the step shows its prepared sentence" in c.value for c in at.caption)


@pytest.fixture(scope="module")
def every_step():
    """The lesson opened at step 1 and walked with Next to the end, each step's text, and every 'try' switched on."""
    at = _lesson({"lesson": "1"})
    texts, tried, typed_into = {}, {}, {}
    for n in range(1, N_STEPS + 1):
        if n > 1:
            at.button(key="lesson_next").click().run()
            assert not at.exception, (n, at.exception)
        assert at.query_params["lesson"] == [str(n)] or at.query_params["lesson"] == str(n)
        _answer(at)
        texts[n] = _text(at)
        typed_into[n] = _typed_into(at)
        toggles = [t for t in at.toggle if t.key == f"lesson_try_{n}"]
        if toggles:
            toggles[0].set_value(True).run()
            assert not at.exception, (n, at.exception)
            tried[n] = _text(at)
    return at, texts, tried, typed_into


def test_every_step_renders_with_no_nan_none_or_error(every_step):
    at, texts, tried, _ = every_step
    assert len(texts) == N_STEPS and 6 <= N_STEPS <= 8
    for n, text in [*texts.items(), *tried.items()]:
        assert f"Step {n} of {N_STEPS}" in text
        assert not re.search(r"\b(nan|NaN|None|inf)\b", text), (n, text)
    assert not at.error and not at.warning


def test_step1_names_the_previous_token_head_and_switching_it_off_leaves_its_layer(every_step):
    _, texts, tried, _ = every_step
    model, run, scores, base = _scores("tiny", lesson_steps.TEXT_PARALLEL)
    prev = next(h for h in _named("tiny", "previous") if h[0] == 0)  # the census's, in layer 0
    value, n = float(scores["previous"][prev]), _support("tiny", lesson_steps.TEXT_PARALLEL)["previous"]
    assert n >= measures.SUPPORT_FLOOR
    assert (f"{head_name(prev)}: {measures.get('previous').label} {value:.0%} over {n} queries (uniform attention: "
            f"{base['previous']:.0%}); the census's previous token head is {head_name(prev)}") in texts[1]
    off = model.run(lesson_steps.TEXT_PARALLEL, ablate={prev})
    later = float((off.attentions[1:] - run.attentions[1:]).abs().max())
    assert later > 0.01  # the later layers read its output
    assert "changed by at most 0.000 in any weight" in tried[1] and f"changed by up to {later:.3f}" in tried[1]


def test_step2_compares_one_token_in_two_heads(every_step):
    _, texts, _, _ = every_step
    model, run, scores, _ = _scores("tiny", lesson_steps.TEXT_PARALLEL)
    a = next(h for h in _named("tiny", "previous") if h[0] == 0)
    inside = model.inside_layer(lesson_steps.TEXT_PARALLEL, 0)
    query = len(run.tokens) - 1
    row = inside[a[1]].weights[query]
    top = int(row.argmax())
    assert f"{head_name(a)}'s query for" in texts[2] and f"key {top}" in texts[2]
    assert f"weight {float(row[top]):.2f}" in texts[2]


def _figures(at) -> list[dict]:
    """Every plotly figure of the page as sent to the browser."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.proto.spec]


def _trace(at, name: str) -> dict:
    return next(t for f in _figures(at) for t in f["data"] if t.get("name") == name)


def test_step2_draws_each_heads_queries_keys_scores_and_softmax_from_the_run():
    """Step 2's mechanism: for the census's previous token head of layer 0 (marked) and the head reading the last
    token most differently, the drawn Q, K, scaled scores (masked keys left blank) and softmax are the run's own,
    and the drawn softmax is the run's attention for that head; every token is labelled."""
    at = _lesson({"lesson": "2"})
    model, text = load_model("tiny"), lesson_steps.TEXT_PARALLEL
    run, inside = model.run(text), model.inside_layer(text, 0)
    a = next(h for h in _named("tiny", "previous") if h[0] == 0)
    query = len(run.tokens) - 1
    rows = [h.weights[query] for h in inside]
    b = max((h for h in range(len(inside)) if h != a[1]), key=lambda h: float((rows[h] - rows[a[1]]).abs().sum()))
    for head in (a[1], b):
        name = head_name((0, head))
        soft = heatmap_z(_trace(at, f"{name} · softmax"))
        assert np.allclose(soft, run.attentions[0, head].numpy(), atol=1e-6), name
        scores = heatmap_z(_trace(at, f"{name} · q·k scaled"))
        finite = torch.isfinite(inside[head].scores).numpy()
        assert np.isnan(scores[~finite]).all() and (~finite).any()  # the causal mask, drawn as blank cells
        assert np.allclose(scores[finite], inside[head].scores.numpy()[finite], atol=1e-5)
        assert np.allclose(torch.softmax(torch.tensor(np.nan_to_num(scores, nan=-np.inf)), -1).numpy(), soft,
                           atol=1e-5)  # the softmax of the drawn scores is the drawn pattern
        assert np.allclose(heatmap_z(_trace(at, f"{name} · K")), inside[head].k.numpy(), atol=1e-6)
        # The values and the weighted sum: each query's output is its softmax row times V.
        assert np.allclose(heatmap_z(_trace(at, f"{name} · V")), inside[head].v.numpy(), atol=1e-6)
        assert np.allclose(heatmap_z(_trace(at, f"{name} · weights × V")),
                           (inside[head].weights @ inside[head].v).numpy(), atol=1e-5)
    assert np.allclose(heatmap_z(_trace(at, f"{head_name(a)} · Q")), inside[a[1]].q.numpy(), atol=1e-6)
    mech = next(f for f in _figures(at) if any(t.get("name") == f"{head_name(a)} · K" for t in f["data"]))
    marked = [x["text"] for x in mech["layout"]["annotations"] if x["text"].startswith("<b>▶")]
    assert marked and all(head_name(a) in x for x in marked)
    assert len(mech["layout"]["yaxis"]["tickvals"]) == len(run.tokens)  # every token labelled
    assert "The scores are q·k times " in _saw(at)


def test_step2_picking_another_token_names_that_tokens_keys():
    at = _lesson({"lesson": "2"})
    model, run, scores, _ = _scores("tiny", lesson_steps.TEXT_PARALLEL)
    a = next(h for h in _named("tiny", "previous") if h[0] == 0)
    inside = model.inside_layer(lesson_steps.TEXT_PARALLEL, 0)
    query = 5
    _query_box(at).set_value(query).run()
    assert not at.exception, at.exception
    row = inside[a[1]].weights[query]
    top = int(row.argmax())
    assert top == query - 1  # a previous-token head: the token before
    assert f"{head_name(a)}'s query for" in _saw(at) and f"scores key {top}," in _saw(at)
    assert f"weight {float(row[top]):.2f}" in _saw(at)


def _query_box(at):
    """Step 2's "follow another query token" box (its key carries the input it was drawn for)."""
    return next(b for b in at.selectbox if (b.key or "").startswith("lesson_try_2"))


def _input_check(name: str, role: str, text: str) -> str:
    """What the page must say of this input for a role: the census's heads against this input's reading, in the
    words every view uses (`analysis.agreement`)."""
    _, _, scores, _ = _scores(name, text)
    return agreement(head_census(load_model(name)), role, scores, _support(name, text))


def test_step3_names_the_census_head_of_each_role_and_says_where_this_input_disagrees(every_step):
    _, texts, _, _ = every_step
    text = lesson_steps.TEXT_REPEAT
    for m in ROLES:
        assert _input_check("tiny", m, text) in texts[3], m
    # The prepared sentence repeats two names: induction averages over 4 queries. A head that reads higher there
    # than the census's induction heads is said to, never named; one the census names (tiny's L1 H2 and L1 H3 tie
    # on induction under the paired rule) is not said to beat "the census's induction head" it is one of.
    _, _, scores, _ = _scores("tiny", text)
    best = _argmax(scores["induction"])
    if best in _named("tiny", "induction"):
        assert "scores higher on induction" not in texts[3]
    else:
        assert f"On this input {head_name(best)} scores higher on induction" in texts[3]
        assert f"than the census's induction head {head_name(_named('tiny', 'induction')[0])}" in texts[3]
    # A head the census names for two roles is said to be, with why; a tie is said as a tie.
    for role in ROLES:
        if len(_named("tiny", role)) > 1:
            assert f"{_heads(_named('tiny', role))} tie on {measures.get(role).label}" in texts[3]
    for h in set(_named("tiny", "induction")) & set(_named("tiny", "first")):
        assert f"{head_name(h)} is named for both induction and first token: the census reads each" in texts[3]
        c = head_census(load_model("tiny"))  # with the evidence for each name: its interval and its control
        assert c.evidence("induction", h) in texts[3] and c.evidence("first", h) in texts[3]


def test_step4_the_heads_shares_add_up_to_the_layer_output(every_step):
    _, texts, tried, _ = every_step
    model = load_model("tiny")
    text, layer = lesson_steps.TEXT_PARALLEL, model.n_layers // 2
    inside = model.inside_layer(text, layer)
    combo = combine_heads(torch.stack([h.contribution[-1] for h in inside]), inside[0].bias)
    biggest = (layer, int(combo.along.argmax()))
    assert f"the total's length is {combo.total_norm:.3f}" in texts[4]
    assert (f"{head_name(biggest)} adds the most along the total with every head on: "
            f"{float(combo.along[biggest[1]]):.3f}") in texts[4]
    after = model.inside_layer(text, layer, {biggest})
    total = torch.stack([h.contribution[-1] for h in after]).sum(0) + after[0].bias
    assert f"has length {float(total.norm()):.3f}" in tried[4]
    # The lines follow the figure shown: with the head off, the sum is the new total's, not the old one's.
    assert f"the total's length is {float(total.norm()):.3f}: the layer's output is the heads' outputs" in tried[4]


def test_a_long_input_labels_every_kth_token_and_the_step_says_which():
    """Where the column cannot hold every token's label (here 80 tokens), the figure labels every k-th, from
    position 0, and the caption under it says so."""
    text = " ".join(["the keys to the old cabinet are on the table"] * 8)
    at = _lesson({"lesson": "2"})
    at.text_input(key="lesson_text_2").set_value(text).run()
    _answer(at)
    assert not at.exception, at.exception
    mech = next(f for f in _figures(at) if any(t.get("name", "").endswith(" · K") for t in f["data"]))
    labels, shown = mech["data"][0]["y"], mech["layout"]["yaxis"]["tickvals"]
    step = -(-len(labels) // len(shown))
    assert len(labels) > 60 and shown == labels[::step] and step > 1
    nth = {2: "2nd", 3: "3rd"}.get(step, f"{step}th")
    assert f"{len(labels)} tokens: every {nth} is labelled on the axes (from position 0)" in _captions(at)


def _bars(at) -> dict[str, float]:
    """Step 4's bar figure: the dark bars by label (each head, "bias", "total")."""
    trace = _trace(at, "its share along the total")
    ys = trace["y"] if isinstance(trace["y"], list) else heatmap_z({"z": trace["y"]}).tolist()
    return dict(zip(trace["x"], ys))


def test_step4_draws_the_concatenation_projected_and_summed_and_its_words_follow_the_figure():
    """Step 4 draws each head's output in the concatenation, its contribution, the bias and their sum, on one
    colour range and one y axis with the head off; the numbers in its lines are the figure's."""
    at = _lesson({"lesson": "4"})
    model, text = load_model("tiny"), lesson_steps.TEXT_PARALLEL
    layer = model.n_layers // 2
    states = {}
    for switch in (False, True):
        if switch:
            at.toggle(key="lesson_try_4").set_value(True).run()
            assert not at.exception, at.exception
        concat, projected = _trace(at, "concatenation z"), _trace(at, "projected")
        rows = heatmap_z(projected)  # (H + 2, D): the contributions, the bias, their sum
        assert np.allclose(rows[:-2].sum(0) + rows[-2], rows[-1], atol=1e-5)  # the sum row is their sum
        bars = _bars(at)
        total = float(np.linalg.norm(rows[-1]))
        assert abs(bars["total"] - total) < 1e-4  # the bar is the sum row's length
        saw = _saw(at)
        assert f"the total's length is {total:.3f}" in saw  # the words read the figure shown
        summed = sum(v for k, v in bars.items() if k != "total")
        assert f"sum to {summed:.3f}" in saw
        fig = next(f for f in _figures(at) if any(t.get("name") == "its share along the total" for t in f["data"]))
        states[switch] = (concat["zmin"], concat["zmax"], projected["zmin"], projected["zmax"],
                          tuple(fig["layout"]["yaxis"]["range"]), heatmap_z(concat), rows)
    inside = model.inside_layer(text, layer)
    position = len(inside[0].tokens) - 1
    outputs = np.concatenate([(h.weights[position] @ h.v).numpy() for h in inside])
    assert np.allclose(states[False][5].ravel(), outputs, atol=1e-5)  # the concatenation is the heads' outputs
    assert np.allclose(states[False][6][:-2], torch.stack([h.contribution[position] for h in inside]).numpy(),
                       atol=1e-5)
    assert states[False][:5] == states[True][:5]  # one colour range and one axis before and after the switch
    off = np.abs(states[True][5].reshape(len(inside), -1)).sum(1) == 0
    assert off.sum() == 1 and np.abs(states[True][6][int(off.argmax())]).sum() == 0  # the head off adds nothing


def test_step5_the_written_heads_measure_as_written_and_the_output_changes(every_step):
    _, texts, tried, _ = every_step
    model = load_model(lesson_steps.WRITTEN)
    run = model.run(lesson_steps.TEXT_WRITTEN)
    scores, base = run_scores(run, model.info.causal)
    written = model.written_heads()
    for head, wrote in written.items():
        if wrote.pattern:
            label = measures.get(wrote.pattern).label
            assert f"{head_name(head)}: the program wrote that {wrote.selects}; its {label} " \
                   f"score on this input is {float(scores[wrote.pattern][head]):.2f}" in texts[5]
    prev = next(h for h, w in written.items() if w.pattern == "previous")
    before, after = model.program_output(run), model.program_output(model.run(lesson_steps.TEXT_WRITTEN, ablate={prev}))
    changed = sum(x != y for x, y in zip(before, after))
    assert changed > 0 and f"changed at {changed} of {len(before)} positions" in tried[5]


def test_step5_keeps_its_figure_when_a_word_is_out_of_vocabulary_and_puts_the_prepared_input_back():
    """A word the program does not know is marked, the step runs on the input without it (its figure stays), and
    a button puts the prepared input back."""
    at = _lesson({"lesson": "5"})
    at.text_input(key="lesson_text_5").set_value("b x a b").run()
    _answer(at)
    assert not at.exception, at.exception
    warning = " ".join(w.value for w in at.warning)
    assert "**x** ⚠" in warning and "The step runs on “b a b”" in warning
    model = load_model(lesson_steps.WRITTEN)
    run = model.run("b a b")
    prev = next(h for h, w in model.written_heads().items() if w.pattern == "previous")
    drawn = heatmap_z(_trace(at, f"{head_name(prev)} · {measures.get('previous').label}"))
    assert np.allclose(drawn, run.attentions[prev].numpy(), atol=1e-6)  # the figure, on the input without "x"
    at.button(key="lesson_restore_5").click().run()
    _answer(at)
    assert not at.exception, at.exception
    assert at.text_input(key="lesson_text_5").value == lesson_steps.TEXT_WRITTEN and not at.warning
    assert "lesson_text_5" not in at.query_params  # the link no longer carries the typed input


def _quiet_and_loud(name: str, text: str):
    model, run, scores, base = _scores(name, text)
    importance = head_importance(model, text)
    support = _support(name, text)
    kept = [m for m in measures.BADGES if support[m] >= measures.SUPPORT_FLOOR]  # a one-query reading is no pattern
    excess = torch.stack([scores[m] - base[m] for m in kept]).nan_to_num(float("-inf")).amax(0)
    pool = importance.masked_fill(excess < lesson_steps.PATTERNED, float("inf"))
    return _argmax(-pool), _argmax(importance), importance


def test_step6_seeds_place_roles_apart_and_a_patterned_head_matters_little(every_step):
    _, texts, tried, _ = every_step
    text = lesson_steps.TEXT_PREDICT
    assert _support("tiny", text)["induction"] < measures.SUPPORT_FLOOR  # one repeated word: one query
    for seed in seeds("tiny"):
        line = next(line for line in texts[6].splitlines() if line.startswith(f"- {seed}: "))
        assert _input_check(seed, "previous", text) in line and _input_check(seed, "induction", text) in line
        assert not re.search(r"induction \d+%|highest at", line), line
        for role in ("previous", "induction"):
            if len(_named(seed, role)) > 1:  # a tie is said as one
                assert f"{_heads(_named(seed, role))} tie on {measures.get(role).label} in the census" in line, line
    quiet, loud, importance = _quiet_and_loud("tiny", text)
    assert importance[quiet] < 0.1 * importance[loud]  # the claim the step makes holds on this model
    assert (f"{head_name(quiet)} of tiny has a strong pattern" in texts[6]
            and f"KL {float(importance[quiet]):.3f}, against {float(importance[loud]):.3f} for {head_name(loud)}"
            in texts[6])
    assert "Switched off here" in tried[6]


def test_step6_contrasts_a_written_model_with_its_learned_twin_measured(every_step):
    """Step 6 sets written-induction beside learned-induction: for each written head the learned head(s) that took
    its role and what switching each side off does, the numbers of `compare_twins` on the same held-out inputs."""
    from mha_viz.analysis.twins import compare_twins
    from mha_viz.models.twin_records import held_out_texts

    _, texts, _, _ = every_step
    written, learned = load_model("written-induction"), load_model("learned-induction")
    cmp = compare_twins(written, learned, held_out_texts(written, 100, 0), head_census(written),
                        head_census(learned))
    assert "Written and learned, the same task" in texts[6]
    for row in cmp.heads:
        heads = _heads([h for h, _ in row.matches])
        took = f"in the twin {heads} took the role" if row.matched else "no learned head took the role"
        assert f"The program wrote {head_name(row.written)} as its" in texts[6] and took in texts[6]
        assert f"({row.matches[0][1]:.3f} bits)" in texts[6]
        assert (f"takes the program from {cmp.accuracy_written:.0%} to {row.written_off:.0%}; switching {heads} off "
                f"takes the twin from {cmp.accuracy_learned:.0%} to {row.learned_off:.0%}") in texts[6]


def test_the_named_heads_follow_the_lessons_model():
    """On tiny#seed2 the census's previous-token head is another head than on tiny: the steps name seed2's."""
    heads = {}
    for name in ("tiny", "tiny#seed2"):
        heads[name] = next(h for h in _named(name, "previous") if h[0] == 0)
    assert heads["tiny"] != heads["tiny#seed2"]
    at = _lesson({"lesson": "1", "lesson_model": "tiny#seed2"})
    assert f"Try: switch {head_name(heads['tiny#seed2'])} off" in [t.label for t in at.toggle]
    at.selectbox(key="lesson_model_pick").set_value("tiny").run()
    assert not at.exception, at.exception
    _answer(at)  # another model asks another question
    assert f"Try: switch {head_name(heads['tiny'])} off" in [t.label for t in at.toggle]
    assert "lesson_model" not in at.query_params  # tiny is the default: the link stays short
    quiet, loud, importance = _quiet_and_loud("tiny#seed2", lesson_steps.TEXT_PREDICT)
    at = _lesson({"lesson": "6", "lesson_model": "tiny#seed2"})
    assert f"{head_name(quiet)} of tiny#seed2 has a strong pattern" in _saw(at)
    assert f"for {head_name(loud)}, the head whose removal matters most" in _saw(at)


def test_a_typed_sentence_is_measured_instead():
    text = "mia frost saw leo hart . later mia frost met leo hart ."
    at = _lesson({"lesson": "3"})
    at.text_input(key="lesson_text_3").set_value(text).run()
    assert not at.exception, at.exception
    _answer(at)  # a new sentence asks its own question
    assert _input_check("tiny", "induction", text) in _saw(at)
    assert "On the prepared sentence: " + _input_check("tiny", "previous", lesson_steps.TEXT_REPEAT) in _saw(at)


def _captions(at) -> str:
    return "\n".join(c.value for c in at.caption)


def _tick_labels(at) -> list[str]:
    """The x-axis categories of the step's first figure (a heads row: the keys, left to right, "3 the")."""
    spec = json.loads(next(c.proto.spec for c in at.get("plotly_chart") if c.proto.spec))
    return list(spec["data"][0]["x"])


def test_script_tags_are_unknown_words_and_give_no_induction_reading():
    """`<script>alert(1)</script>`: every position is tiny's unknown token. Counted as one token repeated, it made
    step 1 say "L0 H3: induction 86%"; the page now counts them as unknown, and no reading comes from them."""
    at = _lesson({"lesson": "1"})
    at.text_input(key="lesson_text_1").set_value("<script>alert(1)</script>").run()
    assert not at.exception, at.exception
    _answer(at)
    assert "11 of 11 words are unknown to tiny" in _captions(at)
    assert not re.search(r"(induction|same token earlier) \d+%", _saw(at)), _saw(at)
    for line in _saw(at).splitlines()[2:-1]:  # each head's line: its reading says how many queries it averaged
        assert re.search(r"over \d+ quer|no measured pattern", line), line
    labels = _tick_labels(at)
    assert all(label.rstrip("\u200b").endswith(UNKNOWN_MARK) for label in labels[1:]), labels  # all but <bos>


def test_unknown_words_are_counted_marked_and_make_no_role_in_step3():
    """The fox sentence: 9 of its 14 words are unknown to tiny. Counted as repeats they gave L0 H2, the census's
    previous-token head, "induction 0.56"; now two queries are left for induction, too few for a reading."""
    text = "the quick brown fox jumps over the lazy dog near the quick brown fox"
    at = _lesson({"lesson": "3"})
    at.text_input(key="lesson_text_3").set_value(text).run()
    assert not at.exception, at.exception
    _answer(at)
    assert "9 of 14 words are unknown to tiny" in _captions(at)
    saw = _saw(at)
    assert _support("tiny", text)["induction"] < measures.SUPPORT_FLOOR
    assert f"{measures.TOO_FEW} for induction ({measures.queries_words(_support('tiny', text)['induction'])}" in saw
    assert not re.search(r"L0 H2[^.;]*induction", saw), saw  # the previous-token head gets no second role
    assert _roles_named(saw)["induction"] == {frozenset(head_name(h) for h in _named("tiny", "induction"))}
    labels = _tick_labels(at)
    assert [i for i, label in enumerate(labels) if label.rstrip("\u200b").endswith(UNKNOWN_MARK)] == \
        list(load_model("tiny").run(text).unknown)
    assert f"4 fox{UNKNOWN_MARK}" in labels and "1 the" in labels  # each key labelled with its position


def test_the_default_input_counts_its_unknown_word():
    at = _lesson({"lesson": "1"})
    run = load_model("tiny").run(lesson_steps.TEXT_PARALLEL)
    words = len(run.tokens) - len(run.special)
    assert len(run.unknown) == 1
    title = load_model("tiny").info.title
    assert f"1 of {words} words is unknown to {title}: “{run.tokens[run.unknown[0]]}”" in _captions(at)


@pytest.mark.parametrize("name", seeds("tiny"))
def test_steps_3_and_6_name_the_same_head_for_each_role(name):
    """Step 3 on `name` and step 6 (every seed's line) name each role's heads from the census: the same heads."""
    step3 = _saw(_lesson({"lesson": "3", "lesson_model": name}))
    step6 = _saw(_lesson({"lesson": "6", "lesson_model": name}))
    line6 = next(line for line in step6.splitlines() if line.startswith(f"- {name}: "))
    for role in ("previous", "induction"):
        label, want = measures.get(role).label, {frozenset(head_name(h) for h in _named(name, role))}
        assert _roles_named(step3)[label] == want, (role, step3)
        assert _roles_named(line6)[label] == want, (role, line6)
    assert _roles_named(step3)["first token"] == {frozenset(head_name(h) for h in _named(name, "first"))}


def test_next_back_and_the_link_keep_the_place():
    at = _lesson({"lesson": "3"})
    assert f"Step 3 of {N_STEPS}" in _text(at)
    at.button(key="lesson_back").click().run()
    assert f"Step 2 of {N_STEPS}" in _text(at) and at.query_params["lesson"] in ("2", ["2"])
    at.button(key="lesson_next").click().run()
    at.button(key="lesson_next").click().run()
    assert f"Step 4 of {N_STEPS}" in _text(at) and at.query_params["lesson"] in ("4", ["4"])
    last = _lesson({"lesson": str(N_STEPS)})
    assert last.button(key="lesson_next").disabled and not last.button(key="lesson_back").disabled
    assert _lesson({"lesson": "1"}).button(key="lesson_back").disabled


def test_a_next_click_that_reaches_a_rebuilt_session_first_moves_one_step():
    """A session rebuilt from the link (`?lesson=2`) whose first run carries a Next click: the buttons are not drawn
    yet, so their callback is not called, and the button's own value moves the step, to 3 and not further."""
    before = _lesson({"lesson": "2"})  # the old session, whose browser sends the click
    before.button(key="lesson_next").click()
    clicked = before._tree.get_widget_states()  # what the browser sends: every widget's value, the click's trigger
    rebuilt = AppTest.from_file(APP, default_timeout=240)
    rebuilt.query_params.update({"model": "tiny", "view": "Lesson", "lesson": "2"})
    rebuilt._run(clicked)
    assert not rebuilt.exception, rebuilt.exception
    assert f"Step 3 of {N_STEPS}" in _text(rebuilt) and rebuilt.query_params["lesson"] in ("3", ["3"])
    rebuilt.run()  # the next event: nothing clicked, the step stays
    assert f"Step 3 of {N_STEPS}" in _text(rebuilt) and rebuilt.query_params["lesson"] in ("3", ["3"])
    rebuilt.button(key="lesson_next").click().run()  # now drawn: the callback moves it, and only it
    assert f"Step 4 of {N_STEPS}" in _text(rebuilt) and rebuilt.query_params["lesson"] in ("4", ["4"])
    rebuilt.button(key="lesson_back").click().run()
    assert f"Step 3 of {N_STEPS}" in _text(rebuilt) and rebuilt.query_params["lesson"] in ("3", ["3"])


def test_a_back_click_that_reaches_a_rebuilt_session_first_moves_one_step_back():
    before = _lesson({"lesson": "4"})
    before.button(key="lesson_back").click()
    rebuilt = AppTest.from_file(APP, default_timeout=240)
    rebuilt.query_params.update({"model": "tiny", "view": "Lesson", "lesson": "4"})
    rebuilt._run(before._tree.get_widget_states())
    assert not rebuilt.exception, rebuilt.exception
    assert f"Step 3 of {N_STEPS}" in _text(rebuilt) and rebuilt.query_params["lesson"] in ("3", ["3"])


def test_each_step_has_one_box_to_type_into_and_the_page_has_no_sentence_box(every_step):
    """The page's sentence box is not drawn above the Lesson: the step's own input is the only box (the closing
    step has none)."""
    _, _, _, typed_into = every_step
    for n, keys in typed_into.items():
        assert keys == ([f"lesson_text_{n}"] if lesson_steps.STEPS[n - 1].text else []), (n, keys)


def test_the_other_views_keep_the_pages_sentence_box_and_its_sentence():
    """Back from the Lesson, the Layer view draws the page's box again, with the sentence the page had."""
    from page_steps import open_view

    sentence = "mia frost saw leo hart ."
    at = AppTest.from_file(APP, default_timeout=240)
    at.query_params.update({"model": "tiny", "text": sentence})
    at.run()
    assert not at.exception, at.exception
    assert at.text_area(key="text_box").value == sentence
    open_view(at, "Lesson")
    assert "text_box" not in _typed_into(at)
    assert at.query_params["text"] in (sentence, [sentence])  # the link keeps the page's sentence meanwhile
    open_view(at, "Layer")
    # The only sentence box is the page's: the Layer view's other boxes are the Continue panel's settings (a seed).
    from mha_viz.app.continue_link import N_KEY, SEED_KEY, TEMP_KEY

    sentences = [k for k in _typed_into(at) if k not in (N_KEY, SEED_KEY, TEMP_KEY)]
    assert sentences == ["text_box"] and at.text_area(key="text_box").value == sentence


@pytest.mark.parametrize("params, notice", [({"lesson": "99"}, "does not exist"), ({"lesson": "two"}, "not a step"),
                                            ({"lesson_model": "gpt5"}, "is not one of")])
def test_a_bad_lesson_link_says_so_and_opens_step_1(params, notice):
    at = _lesson(params, answer=False)  # the link's notice is said on the first run
    assert f"Step 1 of {N_STEPS}" in _text(at)
    assert any(notice in w.value for w in at.warning), [w.value for w in at.warning]


def test_the_lesson_is_first_in_the_navigation_and_a_plain_visit_still_opens_the_layer_view():
    from mha_viz.app.components.nav import FIRST_VISIT, HINT_VIEW
    from mha_viz.app.views import VIEWS, navigation

    assert next(iter(navigation().values())) == ["Lesson"] and HINT_VIEW == "Lesson"
    assert "Lesson" in FIRST_VISIT[0]
    assert next(iter(VIEWS)) == "Layer"


def test_visitors_get_the_viewer_toolbar():
    """No Deploy button and no developer menu: `streamlit run` in the checkout reads client.toolbarMode = viewer, and
    `mha-viz` passes it from any folder."""
    from streamlit import config

    from mha_viz.cli import streamlit_argv

    here = os.getcwd()
    try:
        os.chdir(REPO)
        config.get_config_options(force_reparse=True)
        assert config.get_option("client.toolbarMode") == "viewer"
    finally:
        os.chdir(here)
        config.get_config_options(force_reparse=True)
    argv = streamlit_argv(8501, None, [])
    assert argv[argv.index("--client.toolbarMode") + 1] == "viewer"


# -- A student alone: one input and one query, the whole mechanism, words before use, what moved, first picks, a
#    relation of grammar, figures from the column, one shared box. Heads and words are read from the census and the
#    model, never typed, so these hold when tiny's tokenizer or training changes.

def _content(run) -> list[int]:
    return [i for i in range(len(run.tokens)) if i not in set(run.special)]


def test_step2_a_new_sentence_starts_its_query_box_on_the_questions_token():
    """A query picked on one sentence does not carry to the next: the box, the question, the figure's outlined
    row and the lines all follow the new sentence's last token."""
    at = _lesson({"lesson": "2"})
    _query_box(at).set_value(3).run()
    text = "the red fox and the red fox saw anna at the park again ."
    at.text_input(key="lesson_text_2").input(text).run()
    _answer(at)
    assert not at.exception, at.exception
    run = load_model("tiny").run(text)
    last = _content(run)[-1]
    box = _query_box(at)
    assert box.value == last and len(box.options) == len(_content(run)), (box.value, box.options)
    kept = next(r for r in at.radio if r.key == "lesson_q_2_kept")
    assert f"Token {last}, “{run.tokens[last]}”" in kept.label
    mech = next(f for f in _figures(at) if any(t.get("name", "").endswith(" · K") for t in f["data"]))
    outlined = {s.get("name", "") for s in mech["layout"]["shapes"] if "(query" in s.get("name", "")}
    assert outlined and all(name.endswith(f"(query {last})") for name in outlined), outlined
    assert f"query for “{run.tokens[last]}”" in _saw(at)


def test_step2_explains_the_scale_factor_where_it_is_not_one_over_root_d():
    at = _lesson({"lesson": "2"})
    model, text = load_model("tiny"), lesson_steps.TEXT_PARALLEL
    inside = model.inside_layer(text, 0)
    query = _content(model.run(text))[-1]
    dh = inside[0].q.shape[-1]
    assert f"1/√{dh} = {dh ** -0.5:.3f}" in _saw(at)
    if inside[0].query_scale is not None and abs(float(inside[0].query_scale[query]) - 1) > 1e-4:
        assert f"ln {query + 1} = {float(inside[0].query_scale[query]):.3f}" in _saw(at), _saw(at)


def test_step4_draws_each_heads_slice_of_w_o_and_each_contribution_is_its_part_times_its_slice():
    at = _lesson({"lesson": "4"})
    model, text = load_model("tiny"), lesson_steps.TEXT_PARALLEL
    layer = model.n_layers // 2
    w_o = model.readout(text).w_o[layer]  # (H, dh, D)
    n_heads, dh, d = w_o.shape
    drawn = heatmap_z(_trace(at, "W_O"))
    assert drawn.shape == (n_heads * dh, d) and np.allclose(drawn, w_o.reshape(-1, d).numpy(), atol=1e-6)
    z = heatmap_z(_trace(at, "concatenation z")).reshape(n_heads, dh)
    rows = heatmap_z(_trace(at, "projected"))
    for h in range(n_heads):
        assert np.allclose(z[h] @ w_o[h].numpy(), rows[h], atol=1e-4), h
    fig = next(f for f in _figures(at) if any(t.get("name") == "W_O" for t in f["data"]))
    assert "output dimension" in fig["layout"]["xaxis2"]["title"]["text"]
    assert fig["layout"]["yaxis"]["ticktext"][0].endswith(head_name((layer, 0)))  # z's rows named by head


def test_the_first_screen_says_what_attention_is_and_every_term_is_in_the_glossary():
    at = _lesson({"lesson": "1"}, answer=False)
    block = next(m.value for m in at.markdown if m.value.startswith("1. The model reads the input as **tokens**"))
    assert len(re.findall(r"^\d\. ", block, flags=re.M)) == 3
    prev = next(h for h in _named("tiny", "previous") if h[0] == 0)
    assert f"{head_name(prev)} is head {prev[1]} of layer {prev[0]}" in block  # a head's name, before its use
    intro = next(json.loads(c.proto.spec) for c in at.get("plotly_chart") if c.key == "lesson_intro")
    run = load_model("tiny").run(lesson_steps.TEXT_PARALLEL)
    assert np.allclose(heatmap_z({"z": intro["data"][0]["y"]}).ravel(), run.attentions[prev][-1].numpy(), atol=1e-6)
    at = _lesson({"lesson": "1"})
    assert "The **census** is this app's measurement" in _text(at)  # said on the step that first uses it
    used = ("census", "query", "key", "value", "softmax", "causal mask", "special token", "uniform attention",
            "total variation", "KL", "nats", "Jensen-Shannon", "concatenation", "output projection", "contribution",
            "fixed offset", "seed", "induction", "previous token", "first token", "queries", "bits", "nearby",
            "itself", "special tokens")
    assert [t for t in used if t not in lesson_steps.GLOSSARY] == []


def test_step1_draws_the_later_layer_head_that_moved_before_and_after():
    at = _lesson({"lesson": "1"})
    at.toggle(key="lesson_try_1").set_value(True).run()
    assert not at.exception, at.exception
    model, text = load_model("tiny"), lesson_steps.TEXT_PARALLEL
    prev = next(h for h in _named("tiny", "previous") if h[0] == 0)
    run, off = model.run(text), model.run(text, ablate={prev})
    moved = (off.attentions[1:] - run.attentions[1:]).abs().amax((-1, -2))  # (L - 1, H)
    layer, head = divmod(int(moved.flatten().argmax()), moved.shape[1])
    head = (layer + 1, head)
    before = heatmap_z(_trace(at, f"{head_name(head)} · before"))
    after = heatmap_z(_trace(at, f"{head_name(head)} · {head_name(prev)} off"))
    assert np.allclose(before, run.attentions[head].numpy(), atol=1e-6)
    assert np.allclose(after, off.attentions[head].numpy(), atol=1e-6)
    change = float((off.attentions[head] - run.attentions[head]).abs().max())
    assert f"{head_name(head)} moved most: its largest change of one weight is {change:.3f}" in _saw(at)


def test_a_prediction_is_the_first_pick_kept_beside_the_answer_and_across_a_link():
    at = _lesson({"lesson": "1"}, answer=False)
    question = next(r for r in at.radio if r.key == "lesson_q_1")
    first = question.options[0]
    question.set_value(first).run()
    assert not at.exception, at.exception
    kept = next(r for r in at.radio if r.key == "lesson_q_1_kept")
    assert kept.disabled and kept.value == first
    assert not [r for r in at.radio if r.key == "lesson_q_1"]  # not offered again: a later pick changes nothing
    assert f"**Your prediction:** {first}" in _text(at) and "**Measured:** " in _text(at)
    pick = at.query_params["lesson_pick_1"]
    pick = pick[0] if isinstance(pick, list) else pick
    again = AppTest.from_file(APP, default_timeout=240)  # a reload, or the link sent to someone
    again.query_params.update({"model": "tiny", "view": "Lesson", "lesson": "1", "lesson_pick_1": pick})
    again.run()
    assert not again.exception, again.exception
    assert next(r for r in again.radio if r.key == "lesson_q_1_kept").value == first
    assert again.get("plotly_chart") and not [r for r in again.radio if r.key == "lesson_q_1"]


def test_no_question_that_asks_where_a_head_looks_names_its_role():
    """Steps 2 and 3 ask where a head puts its weight: the question names the head, never its role (the answer)."""
    labels = [measures.get(m).label for m in ROLES]
    for n in (2, 3):
        at = _lesson({"lesson": str(n)}, answer=False)
        ask = next(r for r in at.radio if r.key == f"lesson_q_{n}").label
        assert not [label for label in labels if label in ask], (n, ask)
        assert "the census" not in ask, (n, ask)


def test_check_yourself_choices_carry_no_answer_and_no_figure_is_promised():
    for model in seeds("tiny"):
        at = _lesson({"lesson": str(N_STEPS), "lesson_model": model}, answer=False)
        options = [o for r in at.radio if (r.key or "").startswith("lesson_q_check") for o in r.options]
        claims = ("each head picks its own", "attention is not importance", "they run side by side")
        assert options and not [o for o in options if any(c in o for c in claims)], (model, options)
        assert "the figure" not in _captions(at), model


def test_step3_teaches_a_relation_of_grammar_against_the_fixed_offset():
    model = load_model("tiny")
    census = head_census(model)
    beats = [(r, census.named(r)[0][0]) for r in measures.RELATIONS if r in census.scores and census.named(r)
             and float(census.scores[r][census.named(r)[0][0]]) > census.baseline(r)]
    assert beats, "tiny's census names no head for a relation: the step has nothing to teach"
    at = _lesson({"lesson": "3"})
    text = _text(at)
    assert "##### A relation of grammar" in text
    rel, head = next((r, h) for r, h in beats if f"{head_name(h)} · {r}" in
                     {t.get("name") for f in _figures(at) for t in f["data"]})
    best = int(census.offset[rel][0])
    item, q, k = next((it, q, k) for it in census_inputs(model)["templates"] for q, k in it.pairs.get(rel, ())
                      if k != q - 1 and k - q != best)
    run = model.run(item.text)
    words = _content(run)
    z = heatmap_z(_trace(at, f"{head_name(head)} · {rel}"))
    assert np.allclose(z, run.attentions[head].numpy(), atol=1e-6)
    q, k = words[q], words[k]
    assert k != q - 1  # the relation and the nearest word disagree
    assert f"puts {float(run.attentions[head][q, k]):.0%} of query {q}'s weight on the word the relation" in text
    assert f"the best fixed offset, always the word {-best} back, scores {float(census.offset[rel][1]):.0%}" in text
    assert "The census's caveat" in text


def test_figures_are_planned_from_the_column_with_square_cells_and_labels_of_10px():
    """At a 1140 px column (1600x1000), no token figure leaves more than a third of it empty, and every token
    label is 10 px or more."""
    for n in (1, 2, 3, 4, 6):
        at = AppTest.from_file(APP, default_timeout=240)
        at.query_params.update({"model": "tiny", "view": "Lesson", "lesson": str(n)})
        at.session_state["_lesson_column"] = 1140
        at.run()
        _answer(at)
        assert not at.exception, at.exception
        for c in at.get("plotly_chart"):
            spec = json.loads(c.proto.spec) if c.proto.spec else {}
            layout = spec.get("layout", {})
            if not any(t.get("type") == "heatmap" for t in spec.get("data", [])):
                continue
            assert layout.get("width", 0) >= 1140 * 2 / 3, (n, c.key, layout.get("width"))
            fonts = [a.get("tickfont", {}).get("size", 10) for k, a in layout.items() if k[1:5] == "axis"]
            assert min(fonts) >= 10, (n, c.key, fonts)


def test_one_sentence_box_the_steps_share_with_each_steps_prepared_input_beside_it():
    text = "anna saw ben at the park . ben saw anna ."
    at = _lesson({"lesson": "1"})
    at.text_input(key="lesson_text_1").input(text).run()
    at.button(key="lesson_next").click().run()
    _answer(at)
    assert at.text_input(key="lesson_text_2").value == text
    run = load_model("tiny").run(text)
    assert f"Token {_content(run)[-1]}, “{run.tokens[-1]}”" in _text(at) + "".join(r.label for r in at.radio)
    at.button(key="lesson_prepared_2").click().run()
    assert at.text_input(key="lesson_text_2").value == lesson_steps.STEPS[1].text
    assert "lesson_text_0" not in at.query_params


def test_the_sidebar_note_follows_the_step_written_or_learned():
    """Step 5 runs a written model: the sidebar's note says its heads are labeled modules, and the page's note
    about learned heads ("not labeled modules") is hidden on the Lesson; the other steps keep the learned note."""
    from mha_viz.app.common import LEARNED_NOTE, WRITTEN_NOTE
    for n, note, other in ((5, WRITTEN_NOTE, LEARNED_NOTE), (1, LEARNED_NOTE, WRITTEN_NOTE)):
        at = _lesson({"lesson": str(n)})
        notes = [m.value for m in at.sidebar.markdown if 'class="lesson-note"' in m.value]
        assert len(notes) == 1 and note.split(".")[0].replace("**", "") in notes[0].replace("<b>", "").replace(
            "</b>", ""), (n, notes)
        assert other.split(".")[0].replace("**", "") not in notes[0].replace("<b>", "").replace("</b>", "")
        assert any('[data-testid="stAlert"]' in h.proto.body and "display:none" in h.proto.body
                   for h in at.get("html")), n


def test_step5_says_why_no_measure_names_a_head_written_to_read_index_0():
    """A written head whose line selects `k == 0` (the first word, one after the added start token) is said to
    attend there, and why the first token measure (position 0) does not name it."""
    model = load_model(lesson_steps.WRITTEN)
    written = model.written_heads()
    heads = [h for h, w in written.items() if not w.pattern and "k == 0" in w.source_line]
    if not heads:
        pytest.skip("the written model has no head whose line selects index 0")
    at = _lesson({"lesson": "5"})
    run = model.run(lesson_steps.STEPS[4].text)
    for h in heads:
        top = int(run.attentions[h][-1].argmax())
        line = next(x for x in _saw(at).splitlines() if x.startswith(f"- {head_name(h)}:"))
        assert f"every query puts its weight on position {top}" in line, line
        assert "counts its indices from the first word" in line and "first token measure reads position 0" in line
