"""Timed page steps for the benchmarks, on the one browser harness (tests/e2e/harness.py: server, Chromium, idle).

Every step is timed from the user's action until the expected content is drawn AND Streamlit is idle (no
running status widget, no stale element), like tests/e2e. Bytes received on the websocket during a step are
counted too: that is what the update really cost on the wire.
"""
from __future__ import annotations

import sys
import time

from _common import OUT, REPO

sys.path.insert(0, str(REPO / "tests" / "e2e"))
import harness  # noqa: E402  (the one browser harness, shared with tests/e2e)
from harness import IDLE, chromium  # noqa: E402,F401  (re-exported for the bench scripts)

STEP_TIMEOUT_MS = 180_000

SMOLLM2_LABEL = "SmolLM2-135M-Instruct"
# The probes below read both layer grids, so one run can time the app before and after the change side by side:
# the browser component (`.mhv-grid`, mha_viz/app/components/head_grid) and the plotly row figures it replaced
# (one figure per row of heads, each head's title an annotation above its subplot).
HEATMAPS = """() => document.querySelectorAll('.js-plotly-plot .heatmaplayer image').length
  + document.querySelectorAll('.mhv-grid .mhv-head canvas').length"""
# One title per drawn head in the layer view (a plotly plot without annotations contributes its figure title: the
# All-layers view's focused head).
TITLES = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .filter(p => p.querySelector('.heatmaplayer image'))
  .flatMap(p => { const a = [...p.querySelectorAll('.annotation-text')].map(t => t.textContent);
                  return a.length ? a : [p.querySelector('.gtitle')?.textContent ?? '']; })
  .concat([...document.querySelectorAll('.mhv-grid .mhv-title')].map(t => t.textContent))"""
# Per drawn head, the token labels it was drawn with: a plotly heatmap trace's x categories; for the component,
# its token strip (rebuilt in the same call that repaints every head).
ALL_LABELS = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .filter(p => p.querySelector('.heatmaplayer image'))
  .flatMap(p => (p.data || []).filter(t => t.type === 'heatmap').map(t => t.x ? Array.from(t.x).join(' ') : ''))
  .concat([...document.querySelectorAll('.mhv-grid .mhv-head')].map(h =>
     [...h.closest('.mhv').querySelectorAll('.mhv-strip .mhv-tok')].map(t => t.textContent).join(' ')))"""
# The all-layers view: one heatmap plot that also carries the transparent click scatter.
TILED_DRAWN = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .some(p => p.querySelector('.heatmaplayer image') && p.querySelector('.scatterlayer .trace'))"""
COMPONENT = "() => document.querySelector('.mhv-grid') !== null"


class Server(harness.Server):
    """The harness's server with its log in benchmarks/out/."""

    def __init__(self, log_name: str = "streamlit.log", extra_env: dict | None = None, repo=None):
        # A checkout from before app.py launched itself (it would run the page outside streamlit) starts the old way.
        old = repo is not None and "cli.main" not in (repo / "app.py").read_text()
        super().__init__(OUT / log_name, extra_env, **({"repo": repo} if repo else {}),
                         **({"launcher": ("-m", "streamlit", "run", "app.py")} if old else {}))


class Page:
    """A page with websocket byte counting and bounded waits."""

    def __init__(self, browser, width: int = 1400, height: int = 1000):
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.page = self.context.new_page()
        self.page.set_default_timeout(STEP_TIMEOUT_MS)
        self.ws_bytes = 0
        self.t_last_frame = 0.0  # monotonic time the last websocket frame arrived
        self.last_server = float("nan")  # of the last timed step: action -> last websocket frame, seconds
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("websocket", self._on_ws)

    def _on_ws(self, ws) -> None:
        def count(payload):
            self.ws_bytes += len(payload)
            self.t_last_frame = time.monotonic()

        ws.on("framereceived", count)

    def wait(self, js: str, arg=None) -> None:
        self.page.wait_for_function(js, arg=arg, timeout=STEP_TIMEOUT_MS, polling="raf")

    def wait_idle(self) -> None:
        self.wait(IDLE)

    def settle(self) -> None:
        harness.settle(self.page)

    def timed(self, action, js: str, arg=None) -> tuple[float, int]:
        """(seconds from action to `js` true and idle and painted, websocket bytes received meanwhile)."""
        b0 = self.ws_bytes
        t0 = time.monotonic()
        action()
        self.wait(js, arg)
        self.wait_idle()
        self.wait(js, arg)  # still true after the rerun finished (not an old frame's content)
        self.settle()
        # Server part of the step: until the last frame the server sent for it (the script's "finished" message
        # comes last); the rest, until drawn and idle, is the browser (Streamlit's frontend and plotly.js).
        self.last_server = self.t_last_frame - t0 if self.t_last_frame > t0 else float("nan")
        return time.monotonic() - t0, self.ws_bytes - b0

    def close(self) -> None:
        self.context.close()


# -- the app's controls ---------------------------------------------------------------------------------------
def select_option(page, label: str, option: str, exact: bool = True) -> None:
    """A Streamlit selectbox (sidebar or main): open it, click the option (exact name, or containing `option`)."""
    page.get_by_role("combobox", name=label, exact=True).click()  # Streamlit 1.67: a react-aria combobox
    if exact:
        page.get_by_role("option", name=option, exact=True).click()
    else:
        page.locator('[role="option"]').filter(has_text=option).first.click()


def type_sentence(page, text: str) -> None:
    box = page.get_by_label("Sentence", exact=True)
    box.fill(text)
    page.get_by_role("button", name="Show attention").click()


def click_toggle(page, name: str) -> None:
    """A head's switch: in the component's head corner when the grid is the component, else its Streamlit toggle."""
    if page.evaluate(COMPONENT):
        page.locator(f'.mhv-grid .mhv-switch[aria-label="{name}"]').click()
        return
    switch = page.get_by_role("switch", name=name, exact=True)
    page.locator('[data-testid="stCheckbox"]').filter(has=switch).locator("label").first.click()


def switch_layer(page, layer: int) -> None:
    """Another layer: the component's layer tab (drawn in the browser), else the sidebar's Layer select."""
    if page.evaluate(COMPONENT):
        page.locator(f'.mhv-tab[data-layer="{layer}"]').click()
        return
    select_option(page, "Layer", f"L{layer}")


HOVER_MS = """async ([q]) => {
  // Time from a mouse move over a head's row q until the next frame is painted with that row lit in every head.
  const grid = document.querySelector('.mhv-grid'), wrap = grid.querySelector('.mhv-wrap');
  const r = wrap.querySelector('canvas').getBoundingClientRect(), T = Number(grid.closest('.mhv')
    .querySelectorAll('.mhv-strip .mhv-tok').length);
  const t0 = performance.now();
  wrap.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.left + r.width / 2,
                                                  clientY: r.top + (q + 0.5) / T * r.height}));
  await new Promise(res => requestAnimationFrame(() => requestAnimationFrame(res)));
  const lit = grid.dataset.row === String(q) && [...grid.querySelectorAll('.mhv-row')].every(e => !e.hidden);
  return lit ? performance.now() - t0 : -1;
}"""


def click_view(page, view: str) -> None:
    page.locator('[data-testid="stRadio"]').get_by_text(view, exact=True).first.click()


def drawn_with(word: str, n: int) -> tuple[str, list]:
    """JS + arg: at least n heatmap images drawn (one per head), and every heatmap trace shows `word` in its labels."""
    js = f"""([w, n]) => {{ const l = ({ALL_LABELS})();
        return ({HEATMAPS})() >= n && l.length >= n && l.every(s => s.includes(w)); }}"""
    return js, [word, n]


def layer_drawn(layer: int, n: int) -> tuple[str, list]:
    js = f"""([layer, n]) => {{ const t = ({TITLES})();
        return t.length >= n && t.every(s => s.startsWith('L' + layer + ' ')); }}"""
    return js, [layer, n]


def toggled(name: str, off: bool, effect_label: str) -> tuple[str, list]:
    js = f"""([name, off, label]) => {{
        const titles = ({TITLES})();
        const has = titles.includes(name + ' (off)');
        const panel = [...document.querySelectorAll('[data-testid="stMetricLabel"]')]
          .some(e => e.innerText.includes(label));
        return off ? (has && panel) : (!has && titles.includes(name) && !panel);
    }}"""
    return js, [name, off, effect_label]


COSINE = "Cosine similarity of sentence embedding"
KL = "KL(before"

# ~30-token sentences, each with its own marker word (one token in WordPiece and in SmolLM2's BPE).
MARKERS = ("apple", "river", "garden", "window", "doctor", "market", "winter", "silver", "forest", "captain",
           "engine", "pocket")


def sentence(marker: str) -> str:
    return (f"Yesterday the tired {marker} near the old station waited while my sister carried three heavy boxes "
            f"up the narrow stairs before the evening train left for the city.")
