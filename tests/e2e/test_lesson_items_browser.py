"""Issue 52's nine items, each checked in a real browser (Chromium at 1000x800 and 1600x1000) through what a student
sees: the page's text, its figures' titles and boxes, the boxes and choices they use.

Each (size, model) pair, tiny and each of its seeds, is walked once per session (`walk`): every step opened by its
link, its question asked and answered, its text and figures read; step 1's switch is flipped, and step 2's first
pick is changed and the page reloaded. The item tests read those walks, so eight walks serve items 2-9; the two
items that need typing (1 and the shared box of 9) type on tiny at both sizes. Which of these failed on the code
before the fixes, and with what message, is in docs/lesson.md."""
from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from test_browser import _assert_no_exception
from test_lesson_browser import role_problems

from mha_viz import seeds

from harness import STEP_DRAWN, answer_predictions, new_page, settle, wait, wait_idle

SIZES = [(1000, 800), (1600, 1000)]
MODELS = seeds("tiny") or ["tiny"]
N = 7  # the Lesson's steps; the walk checks the page says so
HEADING = """(n) => [...document.querySelectorAll('[data-testid="stMain"] h4')]
  .some(h => h.innerText.startsWith(`Step ${n} of`))"""
MAIN_TEXT = "() => document.querySelector('[data-testid=\"stMain\"]').innerText"
SIDEBAR_TEXT = "() => document.querySelector('[data-testid=\"stSidebarUserContent\"]').innerText"
FIGURE = "() => document.querySelectorAll('[data-testid=\"stMain\"] .js-plotly-plot .main-svg').length > 0"
N_FIGURES = "() => document.querySelectorAll('[data-testid=\"stMain\"] .js-plotly-plot').length"
# Each figure's titles as the student reads them: panel titles (annotations), the figure's title and axis titles.
TITLES = """() => [...document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')].map(gd =>
  [...gd.querySelectorAll('.annotation-text, .infolayer .gtitle, .infolayer g[class$="title"] text')]
    .map(t => t.textContent))"""
# The questions in the main column: each radio's label, its choices, the checked one (or null) and whether it can
# still be changed.
RADIOS = """() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stRadio"]')].map(r => ({
  label: (r.querySelector('[data-testid="stWidgetLabel"]') || r).innerText,
  choices: [...r.querySelectorAll('[data-testid="stRadioOption"]')].map(o => o.innerText.trim()),
  checked: (() => { const i = r.querySelector('input:checked');
                    return i ? i.closest('label').innerText.trim() : null; })(),
  enabled: [...r.querySelectorAll('input')].some(i => !i.disabled)}))"""
# The select boxes of the main column but the lesson's model: (label, what it shows).
SELECTS = """() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stSelectbox"]')].map(s => {
  const label = (s.querySelector('[data-testid="stWidgetLabel"]') || {innerText: ''}).innerText;
  const input = s.querySelector('input');
  return [label, input ? input.value : s.innerText.replace(label, '').trim()];
}).filter(s => !s[0].includes('Learned model'))"""
BOX = '[data-testid="stMain"] [data-testid="stTextInput"] input'

# Every text box of every Lesson figure in the main column: the titles (panel titles are annotations, the figure's
# title, axis titles), the tick labels and the legend's, each with the axis or group it belongs to and its box.
TEXT_BOXES = """() => [...document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')].map((gd, i) => {
  const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const items = [];
  const add = (el, kind, group) => {
    if (!el.textContent.trim()) return;
    const b = box(el);
    if (b[2] - b[0] < 1 || b[3] - b[1] < 1) return;
    items.push({kind, group, text: el.textContent.slice(0, 60), box: b});
  };
  gd.querySelectorAll('.annotation-text').forEach(el => add(el, 'title', 'annotation'));
  gd.querySelectorAll('.infolayer .gtitle').forEach(el => add(el, 'title', 'figure'));
  gd.querySelectorAll('.infolayer g[class^="g-"][class$="title"]:not(.g-gtitle) text')
    .forEach(el => add(el, 'title', 'axis'));
  gd.querySelectorAll('[class$="tick"] text').forEach(el => add(el, 'tick', el.parentNode.getAttribute('class')));
  gd.querySelectorAll('.legend .legendtext').forEach(el => add(el, 'legend', 'legend'));
  return {figure: i, items};
})"""


def overlaps(figures: list[dict]) -> list[str]:
    """Pairs of text boxes that cross by more than a pixel each way, in one figure, where one is a title (a panel's,
    the figure's or an axis's) or the two are labels of different axes; labels of one axis are left to plotly."""
    found = []
    for fig in figures:
        items = fig["items"]
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                if a["kind"] != "title" and b["kind"] != "title" and a["group"] == b["group"]:
                    continue
                w = min(a["box"][2], b["box"][2]) - max(a["box"][0], b["box"][0])
                h = min(a["box"][3], b["box"][3]) - max(a["box"][1], b["box"][1])
                if w > 1 and h > 1:
                    found.append(f"figure {fig['figure']}: {a['text']!r} ({a['kind']}) over {b['text']!r} "
                                 f"({b['kind']})")
    return found


# Each Lesson figure in the main column: its width beside the column's, its smallest tick label font, and for its
# heatmaps with token axes the size of a cell across and down.
FIGURE_SIZES = """() => {
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  const cs = getComputedStyle(main);
  const column = main.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  return [...document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot')].map(gd => {
    const fl = gd._fullLayout;
    const fonts = [...gd.querySelectorAll('[class$="tick"] text')].map(t => parseFloat(t.style.fontSize || '10'));
    const cells = gd.data.map((d, i) => {
      if (d.type !== 'heatmap' || !Array.isArray(d.z) || !d.z.length) return null;
      const xa = fl[d.xaxis ? 'xaxis' + d.xaxis.slice(1) : 'xaxis'];
      const ya = fl[d.yaxis ? 'yaxis' + d.yaxis.slice(1) : 'yaxis'];
      if (!xa || !ya || typeof d.x?.[0] !== 'string' || typeof d.y?.[0] !== 'string') return null;
      return [xa._length / d.z[0].length, ya._length / d.z.length];
    }).filter(Boolean);
    return {name: (gd.data[0] || {}).name || '', width: gd.getBoundingClientRect().width, column,
            heatmap: gd.data.some(d => d.type === 'heatmap'), font: Math.min(...fonts, 99), cells};
  });
}"""


def answer(page) -> None:
    """Pick the first choice of each open question, so the step draws what its pick reveals."""
    answer_predictions(page, wait_idle)


def _open(page, url: str, n: int, model: str, **params) -> None:
    query = urlencode({"model": "tiny", "view": "Lesson", "lesson": n, "lesson_model": model, **params})
    page.goto(f"{url}/?{query}", wait_until="domcontentloaded")
    wait(page, HEADING, f"step {n}'s heading", arg=n)
    wait(page, STEP_DRAWN, f"step {n} drawn to its foot")
    wait_idle(page)


def _drawn(page, n: int) -> None:
    """After the answers: the step's figure (steps 1-6) and plotly's relayout, settled."""
    if n < N:
        wait(page, FIGURE, f"step {n}'s figure")
    wait_idle(page)
    page.wait_for_timeout(400)  # plotly's relayout once the chart box settles
    settle(page)


def _pick(page, choice: str) -> None:
    """Click `choice` of the first question that offers it, and wait for the run it starts to end."""
    option = page.locator('[data-testid="stMain"] [data-testid="stRadioOption"]', has_text=choice).first
    option.locator("div").last.click(force=True, timeout=5_000)
    page.wait_for_timeout(300)
    wait_idle(page)
    page.wait_for_timeout(500)  # a run that changed nothing leaves the page as it was
    wait_idle(page)


def _checked(page, asks: str) -> str | None:
    """The checked choice of the question whose label holds `asks` (the first such shown)."""
    for radio in page.evaluate(RADIOS):
        if asks in radio["label"] and radio["checked"]:
            return radio["checked"]
    return None


def _record(page) -> dict:
    return {"text": page.evaluate(MAIN_TEXT), "titles": page.evaluate(TITLES), "boxes": page.evaluate(TEXT_BOXES),
            "sizes": page.evaluate(FIGURE_SIZES), "radios": page.evaluate(RADIOS),
            "sidebar": page.evaluate(SIDEBAR_TEXT), "figures": page.evaluate(N_FIGURES)}


_WALKS: dict[tuple, dict] = {}


def walk(browser, url: str, size: tuple[int, int], model: str) -> dict:
    """Every step of the lesson on `model` at `size`, opened by its link, as the student sees it: before the
    question is answered ("before") and after ("after"); step 1 again with its switch flipped ("switched"); step 2's
    first pick, a second pick and a reload ("picks"). Made once per session for each (size, model)."""
    if (size, model) in _WALKS:
        return _WALKS[size, model]
    context, page = new_page(browser, *size)
    steps: dict[int, dict] = {}
    try:
        for n in range(1, N + 1):
            _open(page, url, n, model)
            if n == 1:
                heading = page.locator('[data-testid="stMain"] h4').first.inner_text()
                assert heading.startswith(f"Step 1 of {N}:"), heading
            rec = steps[n] = {"before": _record(page)}
            if n == 2:
                rec["picks"] = _first_pick(page)
            answer(page)
            _drawn(page, n)
            _assert_no_exception(page, f"step {n} at {size} on {model}")
            rec["after"] = _record(page)
            if n == 1:
                page.locator('[data-testid="stMain"] [data-testid="stCheckbox"]', has_text="switch").first.click()
                wait_idle(page)
                _drawn(page, n)
                rec["switched"] = _record(page)
        assert not page.js_errors, page.js_errors
    finally:
        context.close()
    _WALKS[size, model] = steps
    return steps


STEP2_ASKS = "Which key will"


def _first_pick(page) -> dict:
    """Step 2: pick a choice that is not the first, try to pick another, then reload (the link keeps the picks)."""
    radio = next(r for r in page.evaluate(RADIOS) if STEP2_ASKS in r["label"])
    first, second = radio["choices"][1], radio["choices"][2]
    _pick(page, first)
    after_first = _checked(page, STEP2_ASKS)
    text_first = page.evaluate(MAIN_TEXT)
    _pick(page, second)
    after_second = _checked(page, STEP2_ASKS)
    text_second = page.evaluate(MAIN_TEXT)
    page.reload(wait_until="domcontentloaded")
    wait(page, HEADING, "step 2 after a reload", arg=2)
    wait(page, STEP_DRAWN, "step 2 drawn after a reload")
    wait_idle(page)
    page.wait_for_timeout(400)
    wait_idle(page)
    return {"first": first, "second": second, "after_first": after_first, "after_second": after_second,
            "text_first": text_first, "text_second": text_second, "after_reload": _checked(page, STEP2_ASKS),
            "text_reload": page.evaluate(MAIN_TEXT)}


WALKS = [pytest.param(size, model, id=f"{size[0]}x{size[1]}-{model}") for size in SIZES for model in MODELS]


def _section(text: str, start: str, end: str | None = None) -> str:
    """The part of `text` from `start` to `end` (or its end); '' if `start` is not there."""
    i = text.find(start)
    if i < 0:
        return ""
    j = text.find(end, i + len(start)) if end else -1
    return text[i:j] if j >= 0 else text[i:]


def _type(page, text: str, expect: str) -> None:
    """Type `text` into the step's sentence box and press Enter; wait until the page shows `expect`."""
    box = page.locator(BOX).first
    box.fill(text)
    box.press("Enter")
    wait(page, f"() => ({MAIN_TEXT})().includes({expect!r})", f"the page to show {expect!r} after typing")
    wait_idle(page)


# -- item 1: every figure and sentence of a step describes the same input and query --------------------------------

@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_item1_a_new_sentence_moves_step2_to_its_own_last_token(browser, streamlit_url, size):
    """Step 2 on "the red fox and the red fox", then on a longer sentence: the question, the query box, the bar
    chart's title and the lines under the figure all follow the new sentence's last token (the box kept "7: fox")."""
    context, page = new_page(browser, *size)
    try:
        _open(page, streamlit_url, 2, "tiny")
        _type(page, "the red fox and the red fox", "Token 7,")
        answer(page)
        _drawn(page, 2)
        _type(page, "the red fox and the red fox ran home again", "Token 10,")
        answer(page)
        _drawn(page, 2)
        text = page.evaluate(MAIN_TEXT)
        asked = re.search(r"Token (\d+), “([^”]+)”", text)
        assert asked and asked.group(1) == "10", text[:1500]
        selects = page.evaluate(SELECTS)
        assert selects, "step 2 draws no query box"
        assert selects[0][1].startswith("10: again"), (
            f"the question asks about token 10, “again”, but the query box shows {selects[0][1]!r}")
        titles = [t for fig in page.evaluate(TITLES) for t in fig]
        assert any(t.startswith("Query 10:") for t in titles), f"the figures follow another query: {titles}"
        saw = _section(text, "What you just saw")
        assert "output for query 10" in saw or "query for “again”" in saw, saw[:800]
        assert not re.search(r"\bquery 7\b|“fox”", saw), f"'What you just saw' describes query 7: {saw[:800]}"
        _assert_no_exception(page, f"step 2 at {size}")
    finally:
        context.close()


# -- item 2: titles and labels never overlap ----------------------------------------------------------------------

@pytest.mark.parametrize("size, model", WALKS)
def test_item2_no_title_or_label_of_any_step_overlaps_another(browser, streamlit_url, size, model):
    """Step 3 printed "L0 H2 · previous token" into "▶ L1 H3 · induction · first token", step 5 three titles on one
    spot, step 2 "queries Q" over a tick: on every step, the box of every title and label, after the answer and with
    step 1's switch on."""
    steps = walk(browser, streamlit_url, size, model)
    problems = [f"step {n} ({when}): {p}" for n, rec in steps.items() for when in ("after", "switched")
                if when in rec for p in overlaps(rec[when]["boxes"])]
    assert problems == [], "\n".join(problems[:20])


# -- item 3: the whole mechanism drawn ------------------------------------------------------------------------------

MECHANISM = ("Q", "K", "q·k scaled", "softmax", "V", "weights × V")  # step 2's panels, for each of its two heads


@pytest.mark.parametrize("size, model", WALKS)
def test_item3_the_whole_mechanism_is_drawn_with_the_scale_explained(browser, streamlit_url, size, model):
    """Step 2 drew Q, K, the scores and the softmax but no V and no weighted sum, and its scale "0.749 (1/√16 = 0.250,
    times the model's factor…)" was not explained; step 4 wrote "× its slice of the output projection" without the
    matrix and called the concatenation "the layer's 64 output dimensions"."""
    steps = walk(browser, streamlit_url, size, model)
    two = steps[2]["after"]
    panels = {t.split(" · ", 1)[1] for fig in two["titles"] for t in fig if " · " in t}
    assert set(MECHANISM) <= panels, f"step 2 draws {sorted(panels)}; missing {set(MECHANISM) - panels}"
    assert "causal mask" in two["text"], "step 2 does not name the mask it draws"
    scale = re.search(r"The scores are q·k times ([\d.]+)[^\n]*", two["text"])
    assert scale, two["text"][-2500:]
    textbook = re.search(r"1/√(\d+) = ([\d.]+)", scale.group(0))
    assert textbook, scale.group(0)
    if abs(float(scale.group(1)) - float(textbook.group(2))) > 0.001:  # a factor beyond 1/√d: said what and why
        assert "because" in scale.group(0) and "model's factor" not in scale.group(0), scale.group(0)
    four = " | ".join(t for fig in steps[4]["after"]["titles"] for t in fig)
    for part in ("W_O", "concatenation", "contribution", "bias", "sum"):
        assert part in four, f"step 4's figure has no {part!r}: {four}"
    assert "the layer's 64 output dimensions" not in four, four


# -- item 4: a first screen that says what attention is; each term where it first appears --------------------------

@pytest.mark.parametrize("size, model", WALKS)
def test_item4_the_first_screen_says_what_attention_is_and_terms_come_before_use(browser, streamlit_url, size, model):
    """Nothing on the first screen said what attention is; "L0 H2" was explained on step 6 and "census" on step 3,
    both used from step 1 on."""
    steps = walk(browser, streamlit_url, size, model)
    before = steps[1]["before"]
    intro = _section(before["text"], "What attention is", "Predict first")
    assert intro, f"step 1 says nothing of what attention is before its question: {before['text'][:1500]}"
    assert before["figures"] >= 1, "step 1 draws no figure before its question"
    for term in ("tokens", "query", "keys", "weight", "head", "layer"):
        assert term in intro, f"step 1's first screen does not introduce {term!r}"
    name = re.search(r"(L(\d+) H(\d+)) is head (\d+) of layer (\d+)", intro)
    assert name and name.group(2, 3) == name.group(5, 4), f"step 1 does not say how a head is named: {intro}"
    first_use = next(n for n in steps if "census" in steps[n]["after"]["text"].lower())
    assert re.search(r"[Tt]he census is ", steps[first_use]["after"]["text"]), (
        f"“census” is used on step {first_use} but not said there")


# -- item 5: step 1 draws what moved ---------------------------------------------------------------------------------

@pytest.mark.parametrize("size, model", WALKS)
def test_item5_switching_step1s_head_off_draws_the_later_head_that_moved(browser, streamlit_url, size, model):
    """Step 1's switch greyed its own head and said "later layers changed by up to 0.932"; no later head was drawn.
    With the switch on, a head of a later layer is drawn before and after, and its change is said in numbers."""
    steps = walk(browser, streamlit_url, size, model)
    on = steps[1]["switched"]
    titles = [t for fig in on["titles"] for t in fig]
    before = [t for t in titles if re.match(r"L[1-9]\d* H\d+ · before", t)]
    after = [t for t in titles if re.match(r"L[1-9]\d* H\d+ · L0 H\d+ off", t)]
    assert before and after, f"no later-layer head drawn before and after: {titles}"
    head = before[0].split(" · ")[0]
    assert after[0].startswith(head), (before, after)
    moved = rf"{head} moved most: its largest change of one weight is \d\.\d{{3}}"
    assert re.search(moved, on["text"]), on["text"][-1500:]


# -- item 6: a prediction is the student's first pick --------------------------------------------------------------

@pytest.mark.parametrize("size, model", WALKS)
def test_item6_the_first_pick_is_kept_shown_beside_the_answer_and_survives_a_reload(
        browser, streamlit_url, size, model):
    """After the reveal the student could re-pick until it said "matches", and a reload dropped the predictions;
    step 2's question said "the census's previous token head", its answer."""
    steps = walk(browser, streamlit_url, size, model)
    picks = steps[2]["picks"]
    assert picks["after_first"] == picks["first"], picks
    assert picks["after_second"] == picks["first"], (
        f"picked {picks['first']!r}, then {picks['second']!r}: the page now shows {picks['after_second']!r}")
    assert f"Your prediction: {picks['first']}" in picks["text_second"], picks["text_second"][-2000:]
    assert "Measured: " in picks["text_second"]
    assert picks["after_reload"] == picks["first"], f"after a reload the pick is {picks['after_reload']!r}"
    assert "Pick an answer" not in picks["text_reload"]
    # No question's answer in its wording: step 2 asks where a head looks without giving its role; step 3 asks an
    # induction head's target without naming it; step 7's choices carry no reason.
    two = next(r["label"] for r in steps[2]["before"]["radios"] if STEP2_ASKS in r["label"])
    assert "previous token" not in two, two
    three = steps[3]["before"]["radios"][0]["label"]
    assert "induction" not in three, three
    choices = [c for r in steps[7]["after"]["radios"] for c in r["choices"]]
    for reason in ("side by side", "picks its own", "attention is not importance", "means the head matters",
                   "read the result"):
        assert not any(reason in c for c in choices), (reason, choices)


# -- item 7: a relation of grammar -----------------------------------------------------------------------------------

@pytest.mark.parametrize("size, model", WALKS)
def test_item7_step3_shows_a_head_following_a_relation_of_grammar(browser, streamlit_url, size, model):
    """Claim 4's structural dependency was not taught: step 3 showed previous token, induction and first token only.
    Now a head the census names for a relation, on a sentence where the relation and the nearest word disagree,
    against the best fixed offset, with the census's caveat."""
    text = walk(browser, streamlit_url, size, model)[3]["after"]["text"]
    part = _section(text, "A relation of grammar")
    assert part, f"step 3 has no relation of grammar: {text[-1500:]}"
    none = re.search(r"The census of \S+ names no head whose attention follows a grammatical relation[^\n]*", part)
    if none:  # a seed that grew no such head (tiny#seed3): said so, with the seeds to pick that did
        assert re.search(r"On (tiny\S*)(, tiny\S*)*( and tiny\S*)? the census names one", none.group(0)), none.group(0)
        return
    titles = [t for fig in walk(browser, streamlit_url, size, model)[3]["after"]["titles"] for t in fig]
    assert any("→" in t for t in titles), titles
    back = re.search(r"points to “[^”]+” at \d+, (\d+) back; the nearest word is “[^”]+”, 1 back", part)
    assert back and int(back.group(1)) > 1, f"the relation and the nearest word agree: {part[:1500]}"
    rates = re.search(r"relation's word in (\d+)% of them; the best fixed offset, [^,]+, scores (\d+)%", part)
    assert rates and int(rates.group(1)) > int(rates.group(2)), part[:2000]
    assert "The census's caveat" in part


# -- item 8: figures sized from the column --------------------------------------------------------------------------

@pytest.mark.parametrize("size, model", WALKS)
def test_item8_figures_are_sized_from_the_column(browser, streamlit_url, size, model):
    """At 1600x1000 the heatmaps stayed 520-540 px wide in an 1140 px column, token labels 8 px, step 6's cells
    55 x 35 px: token cells square and labels 10 px or more at both sizes; at 1600 no heatmap figure leaves more
    than a third of the column empty."""
    problems = []
    for n, rec in walk(browser, streamlit_url, size, model).items():
        for fig in [f for when in ("after", "switched") if when in rec for f in rec[when]["sizes"] if f["heatmap"]]:
            if fig["font"] < 10:
                problems.append(f"step {n}: labels {fig['font']} px in {fig['name']!r}")
            if not all(0.8 <= w / h <= 1.25 for w, h in fig["cells"]):
                problems.append(f"step {n}: cells {fig['cells'][:2]} in {fig['name']!r}")
            if size[0] >= 1600 and fig["width"] < fig["column"] * 2 / 3:
                problems.append(f"step {n}: {fig['width']:.0f} px in a {fig['column']:.0f} px column "
                                f"({fig['name']!r})")
    assert problems == [], "\n".join(problems)


# -- item 9: the smaller items ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("size, model", WALKS)
def test_item9_check_yourself_figure_notes_step5_and_its_sidebar(browser, streamlit_url, size, model):
    """On tiny#seed1 and #seed3 check-yourself question 2 accepted "No: each head picks its own" while 3 of 4 heads
    picked one key; "the figure appears once you have made your prediction" showed where no figure comes; step 5
    did not say why no measure names the `k == 0` head; step 5's sidebar said "Heads are not labeled modules"."""
    steps = walk(browser, streamlit_url, size, model)
    seven = steps[7]["after"]["text"]
    two = _section(seven, "Question 2", "Question 3")
    keys = re.findall(r"L0 H\d+ key (\d+)", two)
    assert keys, two
    measured = re.search(r"Measured: ([^\n]+)|the answer is “([^”]+)”", two)
    answer_ = (measured.group(1) or measured.group(2)) if measured else steps[7]["after"]["radios"][1]["checked"]
    if len(set(keys)) < len(keys):  # heads share a key: the answer must not say each picks its own
        assert "picks its own" not in answer_, f"measured {answer_!r} while heads share keys {keys}"
    for n, rec in steps.items():
        if "Pick an answer: the figure" in rec["before"]["text"]:
            assert rec["after"]["figures"] >= 1, f"step {n} promises a figure and draws none"
    five = _section(steps[5]["after"]["text"], "What you just saw")
    line = next((ln for ln in five.splitlines() if "no census measure describes" in ln), "")
    assert re.search(r"one after “[^”]+”", line) and "no measure names this head" in line, line
    side = steps[5]["after"]["sidebar"]
    assert "Heads are not labeled modules" not in side, side[-800:]
    assert "labeled module" in side, side[-800:]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_item9_a_sentence_typed_on_step1_reaches_steps_2_and_4(browser, streamlit_url, size):
    """A sentence typed in step 1 did not reach steps 2 and 4, which read the same prepared sentence. One box the
    steps share, with each step's own prepared input offered beside it."""
    sentence = "the keys to the cabinet are on the table"
    context, page = new_page(browser, *size)
    try:
        _open(page, streamlit_url, 1, "tiny")
        _type(page, sentence, "query 9,")
        answer(page)
        _drawn(page, 1)
        for n in (2, 4):
            page.get_by_role("button", name="Next →").last.click()
            wait(page, HEADING, f"step {n}'s heading", arg=n)
            wait(page, STEP_DRAWN, f"step {n} drawn")
            wait_idle(page)
            value = page.locator(BOX).first.input_value()
            assert value == sentence, f"step {n}'s box holds {value!r}, not the sentence typed on step 1"
            asked = " ".join(r["label"] for r in page.evaluate(RADIOS))
            assert "“table”" in asked, f"step {n} asks about another sentence: {asked}"
            assert page.get_by_role("button", name="Use this step's prepared input").count() == 1
            answer(page)
            _drawn(page, n)
            if n == 2:
                page.get_by_role("button", name="Next →").last.click()
                wait(page, HEADING, "step 3's heading", arg=3)
                wait(page, STEP_DRAWN, "step 3 drawn")
                wait_idle(page)
                answer(page)
                _drawn(page, 3)
        _assert_no_exception(page, f"steps 1-4 at {size}")
    finally:
        context.close()


@pytest.mark.parametrize("size, model", WALKS)
def test_every_step_gives_each_role_one_head_or_a_tie_said_as_one(browser, streamlit_url, size, model):
    """Read off the same walks: every step together gives each role one head, or a tie said as a tie
    (test_lesson_browser.role_problems), on tiny and each seed."""
    steps = walk(browser, streamlit_url, size, model)
    assert f"Model: {model} " in steps[1]["after"]["text"]  # the link's model, not the default
    assert role_problems(model, {n: rec["after"]["text"] for n, rec in steps.items()}) == []
