"""Many users at once, and hostile text, in a real browser against one `streamlit run app.py` (loopback only).

* 8 browser contexts (8 separate Streamlit sessions) open the page at the same time and each switches off a
  different head, all clicks sent before any answer arrives: every page must show its own "Heads off" list and
  its own greyed head, and the server log must stay free of tracebacks. Bounded by SESSION_TIMEOUT_MS per wait.
* Text that looks like HTML, a Markdown link and LaTeX is typed into the page: the DOM must contain no element
  made from it (no <script> with alert, no <img src=x>/onerror, no javascript: link, no KaTeX, no dialog).
"""
from __future__ import annotations

import re
import time
from pathlib import Path

from harness import GRID_DRAWN, HEADS_OFF, grid_switch, page_problems, wait
from harness import IDLE as _IDLE

N_SESSIONS = 8
N_HEADS = 12  # all-MiniLM-L6-v2, the default model
SESSION_TIMEOUT_MS = 150_000  # each page's timeout (harness.wait): 8 sessions load and render on 2 shared cores
LOG_PROBLEMS = re.compile(r"Traceback|Exception|Error(?!s? in the page)", re.IGNORECASE)
_DRAWN = GRID_DRAWN
_OFF_TITLES = """() => [...document.querySelectorAll('.mhv-grid .mhv-title')]
  .map(t => t.textContent).filter(t => t.endsWith('(off)'))"""


def _log_since(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", errors="replace")


def test_eight_sessions_each_see_their_own_heads(browser, streamlit_url, artifacts):
    log_path = artifacts / "streamlit-server.log"
    log_start = log_path.stat().st_size
    contexts = [browser.new_context(viewport={"width": 1300, "height": 900}) for _ in range(N_SESSIONS)]
    timings = {}
    try:
        pages = []
        for ctx in contexts:
            page = ctx.new_page()
            page.set_default_timeout(SESSION_TIMEOUT_MS)
            page.js_errors = []
            page.on("pageerror", lambda exc, p=page: p.js_errors.append(str(exc)))
            pages.append(page)

        # 1. All sessions open the page at once.
        t0 = time.monotonic()
        for page in pages:
            page.goto(streamlit_url, wait_until="commit")
        for i, page in enumerate(pages):
            wait(page, f"() => ({_DRAWN})() >= {N_HEADS}", f"session {i}: {N_HEADS} heatmaps")
            wait(page, _IDLE, f"session {i}: the first run to finish")
        timings["8 sessions load"] = time.monotonic() - t0

        # 2. Each switches off a different head; every click goes out before any page is waited on.
        t0 = time.monotonic()
        for i, page in enumerate(pages):
            grid_switch(page, f"L0 H{i}").click()
        for i, page in enumerate(pages):
            wait(page, """(want) => {
                    const off = [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
                      .map(e => e.innerText).filter(t => t.startsWith('Heads off'));
                    const titles = [...document.querySelectorAll('.mhv-grid .mhv-title')].map(t => t.textContent);
                    return off.length === 1 && off[0].includes(want) && titles.includes(want + ' (off)');
                 }""", f"session {i}: 'Heads off: L0 H{i}'", arg=f"L0 H{i}")
            wait(page, _IDLE, f"session {i}: the toggle's rerun to finish")
        timings["8 concurrent toggles"] = time.monotonic() - t0

        # 3. Each page shows exactly its own head, nobody else's.
        for i, page in enumerate(pages):
            heads_off = page.evaluate(HEADS_OFF)
            others = [f"L0 H{j}" for j in range(N_SESSIONS) if j != i and f"L0 H{j}" in heads_off]
            assert f"L0 H{i}" in heads_off and not others, f"session {i} shows {heads_off!r}"
            assert page.evaluate(_OFF_TITLES) == [f"L0 H{i} (off)"], f"session {i}: {page.evaluate(_OFF_TITLES)}"
            assert grid_switch(page, f"L0 H{i}").is_checked() is False
            assert page.locator('[data-testid="stException"]').count() == 0, page_problems(page)
            assert not page.js_errors, f"session {i}: JavaScript errors {page.js_errors}"
    finally:
        for ctx in contexts:
            ctx.close()
    log = _log_since(log_path, log_start)
    bad = [line for line in log.splitlines() if LOG_PROBLEMS.search(line)]
    assert not bad, "server log has errors:\n" + "\n".join(bad[:40])
    for step, seconds in timings.items():
        print(f"\n[e2e-sessions] {step}: {seconds:.1f} s")


HOSTILE = ("<script>alert(1)</script> <img src=x onerror=alert(1)> [x](javascript:alert(1)) "
           "<a href=javascript:alert(2)>y</a> **bold** price $x$ and $$y$$ end")
_INJECTED = """() => ({
  scripts: [...document.querySelectorAll('script')].filter(s => /alert\\(/.test(s.textContent)).length,
  imgs: document.querySelectorAll('img[src="x"], img[onerror], [onerror]').length,
  jsLinks: [...document.querySelectorAll('a')]
    .filter(a => /^\\s*javascript:/i.test(a.getAttribute('href') || '')).length,
  strip: document.querySelector('[data-testid="token-strip"]')?.innerText ?? '',
  katex: document.querySelectorAll('[data-testid="stMain"] .katex').length,
  stripElements: [...(document.querySelector('[data-testid="token-strip"]')?.querySelectorAll('*') ?? [])]
    .map(e => e.tagName.toLowerCase()).filter(t => t !== 'span'),
})"""


def _submit(page, text: str) -> None:
    page.get_by_label("Sentence", exact=True).fill(text)
    page.get_by_role("button", name="Show attention").click()


def test_hostile_text_makes_no_elements(browser, streamlit_url, page):
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(streamlit_url, wait_until="domcontentloaded")
    wait(page, f"() => ({_DRAWN})() >= {N_HEADS}", "the first heatmaps")
    _submit(page, HOSTILE)
    wait(page, """() => (document.querySelector('[data-testid="token-strip"]')?.innerText ?? '').includes('script')
                   && (document.querySelector('[data-testid="token-strip"]')?.innerText ?? '').includes('alert')""",
         "the token strip to show the hostile text")
    wait(page, _IDLE, "the rerun to finish")
    found = page.evaluate(_INJECTED)
    assert found["scripts"] == 0 and found["imgs"] == 0 and found["jsLinks"] == 0, found
    assert found["katex"] == 0, f"maths was rendered from the typed '$' text: {found}"
    assert found["stripElements"] == [], f"the token strip holds elements made from the text: {found}"
    for piece in ("<", "script", ">", "alert", "bold", "price"):  # word pieces: "img", "onerror" are split
        assert piece in found["strip"], f"{piece!r} should be shown as text in the strip: {found['strip']!r}"
    assert page.locator('[data-testid="stException"]').count() == 0, page_problems(page)
    assert not dialogs, f"a dialog opened: {dialogs}"
    assert not page.js_errors, page.js_errors
