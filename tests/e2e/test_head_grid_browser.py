"""The Layer view's head grid is drawn in the browser (mha_viz/app/components/head_grid): switching layer, hovering
a token and opening a head large must work without the server; a long text must stay readable."""
from __future__ import annotations

from urllib.parse import urlencode

from test_browser import _assert_no_exception

from harness import GRID_DRAWN, GRID_TITLES, GRID_TOKENS, grid_switch, wait, wait_idle

N_HEADS = 12  # all-MiniLM-L6-v2
LONG_TEXT = " ".join(["the cat sat on the mat while anna gave the old keys to ben"] * 10)  # > 128 tokens


# The small heatmaps' label strips: the step between labels, their font, the px per token, the labels per strip.
LABELS = """() => { const g = document.querySelector('.mhv-grid');
  return {step: Number(g.dataset.labelStep), font: Number(g.dataset.labelFont), cell: Number(g.dataset.labelCell),
          shown: [...g.querySelectorAll('.mhv-labels')].filter(e => !e.hidden).map(e => Number(e.dataset.labels))}; }"""


def _count_frames(page, event: str = "framereceived") -> list[int]:
    """A live count of websocket frames the page receives (or sends, with event="framesent"): a browser-only step
    must add none."""
    frames = [0]
    page.on("websocket", lambda ws: ws.on(event, lambda _: frames.__setitem__(0, frames[0] + 1)))
    return frames


def test_layer_switch_hover_and_focus_stay_in_the_browser(browser, streamlit_url, page):
    frames = _count_frames(page)
    query = urlencode({"model": "minilm", "text": "The keys to the cabinet are on the table.", "view": "Layer"})
    page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
    wait(page, f"() => ({GRID_DRAWN})() === {N_HEADS}", "the grid of layer 0")
    wait_idle(page)
    _assert_no_exception(page, "opening the Layer view")
    assert page.evaluate(GRID_TITLES) == [f"L0 H{h}" for h in range(N_HEADS)]
    # A short text's small heatmaps carry every token on both axes, at 8 px or more.
    labels = page.evaluate(LABELS)
    n_tokens = page.locator(".mhv-strip .mhv-tok").count()
    assert labels["step"] == 1 and labels["font"] >= 8 and labels["shown"] == [n_tokens] * (2 * N_HEADS), labels

    # Layer switch: the tab redraws every head of layer 3 at once, in the click's own task, with the grid's heading
    # and the link (the page's own switches follow after it: the test below).
    titles = page.evaluate(f"""() => {{ document.querySelector('.mhv-tab[data-layer="3"]').click();
                                        return ({GRID_TITLES})(); }}""")
    assert all(t.startswith("L3 ") for t in titles), titles
    wait(page, "() => location.search.includes('layer=3')", "the link to follow the layer shown")
    wait(page, "() => [...document.querySelectorAll('p')].some(p => p.innerText.startsWith('Layer 3:'))",
         "the heading to follow the tab")
    _page_on_layer(page, 3)  # the page's rerun for the tab, done before the frames are counted
    wait_idle(page)
    page.wait_for_timeout(500)
    before = frames[0]

    # Hover: row 4 of one head lights row 4 in all twelve heads, and the weight under the pointer is named.
    canvas = page.locator('.mhv-grid .mhv-head[data-head="L3 H5"] canvas')
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    n_tokens = page.locator(".mhv-strip .mhv-tok").count()
    canvas.hover(position={"x": box["width"] * 0.5, "y": box["height"] * (4.5 / n_tokens)})
    lit = page.evaluate("""() => [...document.querySelectorAll('.mhv-grid .mhv-row')]
        .filter(r => !r.hidden).map(r => r.style.top)""")
    assert len(lit) == N_HEADS and len(set(lit)) == 1, lit
    assert page.locator(".mhv-grid").get_attribute("data-row") == "4"
    info = page.locator('[data-testid="mhv-info"]').inner_text()
    assert info.startswith("L3 H5 · query") and (": 0." in info or ": 1." in info), info
    # Hovering a token of the strip lights the same row.
    page.locator('.mhv-strip .mhv-tok[data-q="2"]').hover()
    assert page.locator(".mhv-grid").get_attribute("data-row") == "2"

    # Click-to-focus: the head opens large with its own title, still without the server.
    canvas.click()
    wait(page, "() => document.querySelector('.mhv-focus-title')?.textContent === 'L3 H5'", "L3 H5 opened large")
    assert frames[0] == before, "opening a head large should not talk to the server"

    # A toggle does go to the server, and comes back with the head off on the layer shown.
    grid_switch(page, "L3 H5").click()
    wait(page, f"() => ({GRID_TITLES})().includes('L3 H5 (off)')", "L3 H5 drawn as off")
    wait_idle(page)
    assert page.locator("p", has_text="Heads off:").inner_text().endswith("L3 H5")
    assert page.locator(".mhv-focus-title").inner_text() == "L3 H5 (off)"
    assert not page.js_errors, page.js_errors


def test_long_text_is_readable(browser, streamlit_url, page):
    query = urlencode({"model": "minilm", "text": LONG_TEXT, "view": "Layer"})
    page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
    wait(page, f"() => ({GRID_DRAWN})() === {N_HEADS}", "the grid of a 128-token text")
    wait_idle(page)
    _assert_no_exception(page, "a long text")
    n_tokens = page.locator(".mhv-strip .mhv-tok").count()
    assert n_tokens >= 128, n_tokens
    # The grid folds to fewer columns than the 4 asked for, so a token keeps at least 3 px in a tile.
    cols = int(page.locator(".mhv-grid").get_attribute("data-cols"))
    width = page.locator(".mhv-grid .mhv-head canvas").first.bounding_box()["width"]
    assert cols < 4 and width / n_tokens >= 3, (cols, width, n_tokens)
    # Labels thinned to every k-th token, never overlapping (k rows hold one label's height) and never under 8 px.
    labels = page.evaluate(LABELS)
    assert labels["step"] > 1 and labels["font"] >= 8, labels
    assert labels["step"] * labels["cell"] >= labels["font"] + 1, labels
    assert set(labels["shown"]) == {-(-n_tokens // labels["step"])}, labels
    # A focused head gives every token a row tall enough for its 11 px label; zoom makes it larger still.
    page.locator('.mhv-grid .mhv-head[data-head="L0 H1"] canvas').click()
    focus = page.locator(".mhv-focus-canvas")
    wait(page, "() => !!document.querySelector('.mhv-focus-canvas')?.dataset.cell", "the focused head")
    cell = int(focus.get_attribute("data-cell"))
    assert cell >= 14, cell
    assert focus.get_attribute("data-label-step") == "1"  # every token labelled at the fitted size
    page.locator(".mhv-focus .mhv-btn", has_text="−").click()
    page.locator(".mhv-focus .mhv-btn", has_text="−").click()
    page.locator(".mhv-focus .mhv-btn", has_text="−").click()  # zoomed out: thinned labels, still 8 px or more
    assert int(focus.get_attribute("data-label-step")) > 1 and int(focus.get_attribute("data-label-font")) >= 8
    page.locator(".mhv-focus .mhv-btn", has_text="fit").click()
    assert int(focus.get_attribute("data-cell")) == cell
    page.locator(".mhv-focus .mhv-btn", has_text="+").click()
    assert int(focus.get_attribute("data-cell")) > cell
    # ... and the box pans: it scrolls over a canvas larger than itself.
    scroll = page.evaluate("""() => { const s = document.querySelector('.mhv-focus-scroll');
        s.scrollLeft = 200; s.scrollTop = 200; return [s.scrollLeft, s.scrollTop]; }""")
    assert scroll[0] > 0 and scroll[1] > 0, scroll
    assert not page.js_errors, page.js_errors


HEADINGS = """() => [...document.querySelectorAll('p')].map(p => p.innerText).filter(t => /^Layer \\d+:/.test(t))"""
SWITCHES_OF = """() => [...document.querySelectorAll('[data-testid="stExpander"] summary')].map(s => s.innerText)
  .filter(t => t.includes('Switches for the heads of'))"""
# The page's own switches under the grid (Streamlit toggles, in the expander): their labels, in order.
PAGE_SWITCHES = """() => [...document.querySelectorAll('[data-testid="stExpander"] [data-testid="stCheckbox"]')]
  .map(e => e.textContent.trim())"""


def _page_on_layer(page, layer: int, timeout_ms: int = 10_000) -> None:
    """Wait, at most `timeout_ms`, for the expander under the grid to name `layer` and hold its heads' switches."""
    heads = [f"L{layer} H{h}" for h in range(N_HEADS)]
    page.set_default_timeout(timeout_ms)
    try:
        wait(page, f"""(heads) => {{ const label = ({SWITCHES_OF})();
                        return label.length === 1 && label[0].includes('of L{layer} ')
                            && JSON.stringify(({PAGE_SWITCHES})()) === JSON.stringify(heads); }}""",
             f"the switches under the grid to follow the tab to layer {layer}", arg=heads)
    finally:
        page.set_default_timeout(90_000)


def test_a_layer_tab_takes_the_switches_below_with_it(browser, streamlit_url, page):
    """A tab changes the grid, its heading and the link in the click's own task; then, with nothing else done, the
    page's own switches under the grid (their label, each switch, and what it switches off) follow it. Then the
    next event still runs on the layer on screen: another view, a head's switch in the grid."""
    query = urlencode({"model": "minilm", "text": "The keys to the cabinet are on the table.", "view": "Layer"})
    page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
    wait(page, f"() => ({GRID_DRAWN})() === {N_HEADS}", "the grid of layer 0")
    wait_idle(page)
    page.locator('[data-testid="stExpander"] summary', has_text="Switches for the heads of L0 ").click()
    titles = page.evaluate(f"""() => {{ document.querySelector('.mhv-tab[data-layer="3"]').click();
                                        return ({GRID_TITLES})(); }}""")
    assert all(t.startswith("L3 ") for t in titles), titles
    assert page.evaluate(HEADINGS) == ["Layer 3: all 12 heads"] and "layer=3" in page.url, page.url
    _page_on_layer(page, 3)
    page.locator('[data-testid="stExpander"] [data-testid="stCheckbox"]').filter(has_text="L3 H5").click()
    wait(page, f"() => ({GRID_TITLES})().includes('L3 H5 (off)')", "L3 H5 drawn as off by the page's switch")
    wait_idle(page)
    assert "off=L3H5" in page.url and "layer=3" in page.url, page.url
    assert sum("(off)" in t for t in page.evaluate(GRID_TITLES)) == 1

    # Another tab, then at once another view: the view opens on the layer that was on screen.
    page.locator('.mhv-tab[data-layer="4"]').click()
    page.locator('nav.mhn button[data-view="Inside a head"]').click()
    wait(page, "() => [...document.querySelectorAll('h2, h3')]"
               ".some(h => h.innerText.startsWith('Inside a head of layer 4'))", "Inside a head to open on layer 4")
    wait_idle(page)
    _assert_no_exception(page, "opening Inside a head after a tab")
    page.locator('nav.mhn button[data-view="Layer"]').click()
    wait(page, f"() => ({GRID_DRAWN})() === {N_HEADS} && ({GRID_TITLES})().every(t => t.startsWith('L4 '))",
         "the Layer view back on layer 4")
    wait_idle(page)

    # Another tab, then at once a head's switch in the grid: the head of the layer on screen goes off.
    page.locator('.mhv-tab[data-layer="2"]').click()
    grid_switch(page, "L2 H1").click()
    wait(page, f"() => ({GRID_TITLES})().includes('L2 H1 (off)') && ({SWITCHES_OF})()[0].includes('of L2 ')",
         "L2 H1 off and the page on layer 2")
    wait_idle(page)
    assert "layer=2" in page.url and "off=L2H1" in page.url, page.url
    _assert_no_exception(page, "a head switched off after a tab")
    assert not page.js_errors, page.js_errors


# -- the grid holds every layer of the run it shows, though a message carries only the layers that moved ---------
DRAWN_FROM = "() => document.querySelector('.mhv').mhvDrawnFrom()"
SETTLED = "() => { const g = document.querySelector('.mhv'); return !!g && g.mhvDrawnFrom().waiting.length === 0; }"


def _count_grid_bytes(page) -> list[int]:
    """A live count of the bytes of the grid's messages the page receives: the websocket frames that carry an
    element of the grid's component (each element's delta is a message of its own)."""
    got = [0]

    def frame(data) -> None:
        if isinstance(data, bytes) and b"mha_viz.head_grid" in data:
            got[0] += len(data)

    page.on("websocket", lambda ws: ws.on("framereceived", frame))
    return got


def _assert_holds(page, text: str, off: set) -> None:
    """The codes the grid draws every layer from are the run's (the page's text, those heads off), within one
    code (a reused run equals a fresh one to 1e-6, which may round a code the other way)."""
    import base64

    import numpy as np

    from mha_viz.app.common import display
    from mha_viz.web.payload import encode

    from helpers import loaded

    model = loaded("minilm")
    tokens, att = display(model, model.run(text, ablate=off), False, False)
    want = np.frombuffer(encode(att, False)[0], np.uint8).reshape(model.n_layers, -1)  # (L, H*T*T)
    got = page.evaluate(DRAWN_FROM)
    assert got["waiting"] == [] and len(got["codes"]) == model.n_layers
    for layer, codes in enumerate(got["codes"]):
        diff = np.abs(np.frombuffer(base64.b64decode(codes), np.uint8).astype(np.int16) - want[layer])
        assert diff.max() <= 1, (text, sorted(off), layer, int(diff.max()))
    assert page.evaluate(f"() => ({GRID_TITLES})()") == [
        f"L{got['layer']} H{h}" + (" (off)" if (got["layer"], h) in off else "") for h in range(N_HEADS)]
    # The captions under the heads are the run's measures (the layer on screen's come with the grid's message, the
    # others' with the second one).
    assert page.evaluate(BADGES) == _captions(text, off, got["layer"]), (text, sorted(off), got["layer"])


BADGES = "() => [...document.querySelectorAll('.mhv-grid .mhv-badge')].map(b => b.textContent)"


def _captions(text: str, off: set, layer: int) -> list[str]:
    """The captions of layer `layer`'s heads on MiniLM's run of `text` with `off` switched off."""
    from mha_viz import analysis

    from helpers import loaded

    model = loaded("minilm")
    run = model.run(text, ablate=off)
    whole = (*analysis.run_scores(run, model.causal), analysis.run_support(run, model.causal))
    return [analysis.badge_caption(*whole, layer, h, n=2) for h in range(N_HEADS)]


def test_the_page_keeps_layers_and_is_sent_only_what_moved(browser, streamlit_url, page):
    """After each kind of change (a tab, a toggle, a new sentence) the grid draws from the run the page shows, for
    every layer; a toggle in layer 4 of 6 sends only layer 5 (layer 4's weights come before its heads' outputs),
    so its messages are a fraction of a new sentence's; a tab sends no layer."""
    received = _count_grid_bytes(page)
    # Long enough (about 100 tokens) that the weights, not the code and JSON beside them, make most of a message.
    text = "The keys to the old cabinet are on the table by the door, and the cat sat on the mat. " * 5
    other = "A dog slept in the sun while the children played with a red ball in the garden. " * 5
    page.goto(f"{streamlit_url}/?{urlencode({'model': 'minilm', 'text': text, 'view': 'Layer'})}",
              wait_until="domcontentloaded")
    wait(page, f"() => ({GRID_DRAWN})() === {N_HEADS}", "the grid of layer 0")
    wait_idle(page)
    wait(page, SETTLED, "every layer in the page")
    _assert_holds(page, text, set())

    # A tab: drawn from what the page holds; the page's rerun for it carries no layer.
    page.locator('.mhv-tab[data-layer="4"]').click()
    _page_on_layer(page, 4)
    wait_idle(page)
    page.wait_for_timeout(300)
    _assert_holds(page, text, set())

    # A toggle in layer 4: the grid is drawn with L4 H2 off, from the ablated run.
    before = received[0]
    grid_switch(page, "L4 H2").click()
    wait(page, f"() => ({GRID_TITLES})().includes('L4 H2 (off)')", "L4 H2 drawn as off")
    wait_idle(page)
    wait(page, SETTLED, "every layer in the page")
    page.wait_for_timeout(300)
    toggle_bytes = received[0] - before
    _assert_holds(page, text, {(4, 2)})

    # A new sentence: the layer on screen first, then the others; the grid ends holding the new run.
    before = received[0]
    page.get_by_label("Sentence", exact=True).fill(other)
    page.get_by_role("button", name="Show attention").click()
    wait(page, f"""() => ({GRID_TOKENS})().includes('dog') && ({GRID_DRAWN})() === {N_HEADS}""",
         "the grid of the new sentence")
    wait_idle(page)
    wait(page, SETTLED, "every layer of the new sentence in the page")
    page.wait_for_timeout(300)
    sentence_bytes = received[0] - before
    _assert_holds(page, other, {(4, 2)})
    # Another layer of the new sentence, drawn in the tab's own click from what the page holds: its captions came
    # with the layers off screen, before the server hears of the tab.
    drawn = page.evaluate(f"""() => {{ document.querySelector('.mhv-tab[data-layer="1"]').click();
        return ({BADGES})(); }}""")
    assert drawn == _captions(other, {(4, 2)}, 1), drawn
    _page_on_layer(page, 1)
    wait_idle(page)
    _assert_holds(page, other, {(4, 2)})
    # Layer 5 of 6 against all six, with the component's code and JSON beside them in both (as before, when every
    # message carried every layer, a toggle's were a new sentence's size).
    print(f"\n[e2e] the grid's messages: a toggle in L4 {toggle_bytes} bytes, a new sentence {sentence_bytes} bytes")
    assert toggle_bytes < 0.5 * sentence_bytes, (toggle_bytes, sentence_bytes)
    _assert_no_exception(page, "a tab, a toggle and a new sentence")
    assert not page.js_errors, page.js_errors


def test_a_page_that_lost_its_layers_asks_for_them_and_draws_the_run(browser, streamlit_url, page):
    """Another view, then back: the grid mounts again and draws from the layers the page kept, with no layer sent.
    A page that lost them (cleared here) has its grid ask for them ("resend"), and is sent every layer."""
    received = _count_grid_bytes(page)
    text = "The keys to the cabinet are on the table."
    page.goto(f"{streamlit_url}/?{urlencode({'model': 'minilm', 'text': text, 'view': 'Layer'})}",
              wait_until="domcontentloaded")
    wait(page, f"() => ({GRID_DRAWN})() === {N_HEADS}", "the grid of layer 0")
    wait_idle(page)
    wait(page, SETTLED, "every layer in the page")
    for lost in (False, True):
        page.locator('nav.mhn button[data-view="Inside a head"]').click()
        wait(page, "() => !document.querySelector('.mhv')", "the grid to leave the page")
        wait_idle(page)
        if lost:
            page.evaluate("() => { globalThis.__mhvLayers.held.clear(); globalThis.__mhvLayers.sizes.clear(); }")
        before = received[0]
        page.locator('nav.mhn button[data-view="Layer"]').click()
        wait(page, f"() => ({GRID_DRAWN})() === {N_HEADS}", "the grid back")
        wait_idle(page)
        wait(page, SETTLED, "every layer in the page")
        _assert_holds(page, text, set())
        sent = received[0] - before
        if not lost:
            kept = sent
    print(f"\n[e2e] the grid's messages on return: {kept} bytes with the layers kept, {sent} bytes after losing them")
    assert sent > kept, "the page that lost its layers was sent them again"
    _assert_no_exception(page, "a grid mounted again")
    assert not page.js_errors, page.js_errors
