"""The page in a real browser, as a user uses it, with the default model (all-MiniLM-L6-v2, 6 layers x 12 heads).

Open the page -> 12 heatmaps of layer 0 are drawn -> type a new sentence and press "Show attention" -> the
heatmaps redraw with the new words -> switch head L0 H0 off -> the effect panel shows a cosine similarity below
1 and the head's title says "(off)". No Streamlit exception appears at any step. Timings print with `pytest -s`.

Waits: Streamlit reruns asynchronously, so every step waits for its expected content AND for the page to be
idle (no running/"Stop" status widget, no element greyed as stale), each bounded by the page's timeout
(harness.wait).
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from harness import GRID_DRAWN, GRID_TITLES, GRID_TOKENS, grid_switch, page_problems, wait, wait_idle

REPO = Path(__file__).resolve().parents[2]
N_HEADS = 12  # all-MiniLM-L6-v2: 12 heads per layer
# Words that are single WordPiece tokens and absent from the default sentence, so seeing them proves a redraw.
NEW_SENTENCE = "Seven purple giraffes played chess beside the quiet river."
NEW_WORDS = ("purple", "chess", "river")
OLD_WORD = "cabinet"  # in the default sentence, not in NEW_SENTENCE
COSINE_LABEL = "Cosine similarity of sentence embedding (before vs after)"
SCREENSHOT_MAX_BYTES = 400_000

# -- page probes (run in the browser) -------------------------------------------------------------------------
# The effect panel's bar charts are plotly figures too (above the grid), so heatmap probes pick heatmap plots only.
# A heatmap counts as drawn when plotly has painted its heatmap layer (plotly draws the cells as one <image>).
# The Layer view's heads are drawn by the browser component (mha_viz/app/components/head_grid): one canvas and one
# title per head; its token strip holds the labels every head was drawn with.
_DRAWN_HEATMAPS = GRID_DRAWN
_TITLES = GRID_TITLES


def _settle(page) -> None:
    """Two animation frames, so plotly's last redraw is on screen before a screenshot."""
    page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def _full_page_screenshot(page, path: Path) -> None:
    """Streamlit scrolls inside its main container, so `full_page=True` alone captures one viewport.

    Grow the viewport to the container's scroll height for the shot, then put it back.
    """
    size = page.viewport_size
    height = page.evaluate("""() => Math.max(...['stMain', 'stAppViewContainer', 'stSidebarContent']
        .map(id => document.querySelector(`[data-testid="${id}"]`))
        .filter(Boolean).map(el => el.scrollHeight), document.documentElement.scrollHeight)""")
    page.set_viewport_size({"width": size["width"], "height": min(int(height) + 40, 12_000)})
    try:
        wait_idle(page)
        _settle(page)
        page.screenshot(path=str(path), full_page=True)
    finally:
        page.set_viewport_size(size)
        _settle(page)


def _assert_no_exception(page, step: str) -> None:
    n = page.locator('[data-testid="stException"]').count()
    assert n == 0, f"Streamlit exception on the page after {step}:\n{page_problems(page)}"


def _metric_value(page, label: str) -> float:
    metric = page.locator('[data-testid="stMetric"]').filter(
        has=page.locator('[data-testid="stMetricLabel"]', has_text=label))
    assert metric.count() == 1, f"expected one metric labelled {label!r}, found {metric.count()}"
    text = metric.locator('[data-testid="stMetricValue"]').inner_text().strip()
    match = re.search(r"-?\d+(?:\.\d+)?", text)
    assert match, f"metric {label!r} shows {text!r}, not a number"
    return float(match.group())


def test_toggle_head_off_shows_effect(browser, streamlit_url, page, artifacts):
    # `browser` first: pytest sets up session fixtures before function ones, in argument order, so a missing
    # Chromium skips (or fails under CI) before the server is started for nothing.
    timings: dict[str, float] = {}

    # 1. Open the page; the first visit loads the model, so this is the slow step.
    t0 = time.monotonic()
    page.goto(streamlit_url, wait_until="domcontentloaded")
    wait(page, f"() => ({_DRAWN_HEATMAPS})() >= {N_HEADS}", f"{N_HEADS} drawn heatmaps of layer 0")
    wait_idle(page)
    timings["page load -> first heatmaps"] = time.monotonic() - t0
    _assert_no_exception(page, "the first load")
    assert page.evaluate(_DRAWN_HEATMAPS) == N_HEADS
    titles = page.evaluate(_TITLES)
    assert [f"L0 H{h}" for h in range(N_HEADS)] == sorted(titles, key=lambda t: int(t.split("H")[1])), titles
    assert OLD_WORD in page.evaluate(GRID_TOKENS), "the default sentence should be drawn"

    # 2. A new sentence through the form.
    box = page.get_by_label("Sentence", exact=True)
    box.fill(NEW_SENTENCE)
    t0 = time.monotonic()
    page.get_by_role("button", name="Show attention").click()
    wait(
        page,
        f"""([words, n]) => {{ const toks = ({GRID_TOKENS})();
            return words.every(w => toks.includes(w)) && ({GRID_DRAWN})() >= n; }}""",
        "the heads to redraw with the new sentence's words",
        arg=[list(NEW_WORDS), N_HEADS],
    )
    wait_idle(page)
    timings["submit sentence -> heatmaps redrawn"] = time.monotonic() - t0
    _assert_no_exception(page, "submitting a new sentence")
    labels = page.evaluate(GRID_TOKENS)
    assert all(w in labels for w in NEW_WORDS) and OLD_WORD not in labels, labels
    assert page.evaluate(_DRAWN_HEATMAPS) == N_HEADS
    strip = page.locator('[data-testid="token-strip"]').inner_text()
    assert all(w in strip for w in NEW_WORDS), f"token strip does not show the new words: {strip!r}"
    assert page.get_by_text("What changed with these heads off").count() == 0, "no head is off yet"

    # 3. Switch head L0 H0 off with the switch in its corner of the grid.
    switch = grid_switch(page, "L0 H0")
    assert switch.is_checked(), "every head starts on"
    t0 = time.monotonic()
    switch.click()
    wait(
        page,
        """(label) => [...document.querySelectorAll('[data-testid="stMetricLabel"]')]
             .some(e => e.innerText.includes(label))
           && [...document.querySelectorAll('.mhv-grid .mhv-title')].some(t => t.textContent === 'L0 H0 (off)')""",
        "the effect panel's cosine metric and the title 'L0 H0 (off)'",
        arg=COSINE_LABEL,
    )
    wait_idle(page)
    timings["toggle L0 H0 off -> effect panel + greyed head"] = time.monotonic() - t0
    _assert_no_exception(page, "switching L0 H0 off")

    assert page.get_by_role("heading", name="What changed with these heads off").count() == 1
    cosine = _metric_value(page, COSINE_LABEL)
    assert 0.0 < cosine < 1.0, f"switching a head off should move the embedding; cosine = {cosine}"
    titles = page.evaluate(_TITLES)
    assert titles.count("L0 H0 (off)") == 1 and sum("(off)" in t for t in titles) == 1, titles
    assert not switch.is_checked(), "the switch should now read off"
    # The keyboard/AppTest copy of the switch, a Streamlit toggle under the grid, follows the same state.
    copy = page.locator('[data-testid="stCheckbox"]').filter(has_text="L0 H0").locator("input")
    assert copy.count() == 1 and copy.is_checked() is False
    assert page.evaluate(_DRAWN_HEATMAPS) == N_HEADS
    # The new sentence survives the rerun the toggle caused.
    assert all(w in page.evaluate(GRID_TOKENS) for w in NEW_WORDS)

    # 4. Screenshots: the full page for the record, and one viewport for the README (the first-visit hint put away).
    page.locator(".mhn-hint button").click()
    _settle(page)
    full = artifacts / "page-L0H0-off-full.png"
    _full_page_screenshot(page, full)
    page.evaluate("() => window.scrollTo(0, 0)")  # the first screen: sentence box, effect summary, first heads
    _settle(page)
    readme_shot = artifacts / "page-L0H0-off-viewport.png"
    page.screenshot(path=str(readme_shot))
    size = readme_shot.stat().st_size
    assert size < SCREENSHOT_MAX_BYTES, f"README screenshot is {size:,} bytes; keep it under {SCREENSHOT_MAX_BYTES:,}"
    if os.environ.get("MHA_VIZ_UPDATE_SCREENSHOT") == "1":  # opt-in, so a plain test run leaves git clean
        shutil.copyfile(readme_shot, REPO / "assets" / "screenshot.png")

    _assert_no_exception(page, "the whole session")
    assert not page.js_errors, f"JavaScript errors in the page: {page.js_errors}"

    print(f"\n[e2e] cosine similarity with L0 H0 off: {cosine:.5f}")
    for step, seconds in timings.items():
        print(f"[e2e] {step}: {seconds:.2f} s")
    print(f"[e2e] screenshots: {full} and {readme_shot} ({size:,} bytes); "
          "MHA_VIZ_UPDATE_SCREENSHOT=1 copies the latter to assets/screenshot.png")
