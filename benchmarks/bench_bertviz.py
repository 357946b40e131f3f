"""Peer: BertViz's model_view and head_view against our app, same model (MiniLM), same sentence, same Chromium,
same run.

BertViz (`pip install --no-deps bertviz`; its own imports need only IPython) returns HTML with
`html_action="return"`; the HTML loads require.js, d3 5.7.0 and jQuery from cdnjs. We serve local copies from
the npm registry (`npm pack`, into benchmarks/out/npm/, gitignored) on a loopback HTTP server and rewrite the CDN
URLs (jQuery 2.0.0 is not on npm; 2.1.0 is the nearest release there).

Measured:
  BertViz "new sentence -> drawn" = forward with output_attentions (Python) + model_view/head_view HTML
      + page load until every thumbnail's lines are in the SVG (model_view) / the layer's lines (head_view);
  BertViz "switch layer" = head_view's layer <select> change until the new SVG is drawn;
  ours: type -> all heads of the layer drawn, and switch layer (sidebar), interleaved with BertViz's;
  "new sentence, in-page (ms)": the same step on the pages' own clocks, without Playwright's round trips (ours:
      click on "Show attention" -> drawn and idle; head_view: its Python + navigation start -> drawn).

    python benchmarks/bench_bertviz.py [--reps 5]
"""
from __future__ import annotations

import argparse
import functools
import http.server
import subprocess
import threading
import time
from pathlib import Path

import _app as A
from _common import OUT, REPO, load_avg, machine, median, table, text_of_tokens

NPM = OUT / "npm"
PACKAGES = {"d3@5.7.0": "d3-5.7.0/package/dist/d3.min.js", "jquery@2.1.0": "jquery-2.1.0/package/dist/jquery.min.js",
            "requirejs@2.3.6": "requirejs-2.3.6/package/require.js"}
CDN = {
    "https://cdnjs.cloudflare.com/ajax/libs/require.js/2.3.6/require.min.js": "require.js",
    "https://cdnjs.cloudflare.com/ajax/libs/d3/5.7.0/d3.min": "d3.min",  # require.js paths: no .js
    "https://cdnjs.cloudflare.com/ajax/libs/jquery/2.0.0/jquery.min": "jquery.min",
}
MODEL_VIEW_DRAWN = """([n]) => document.querySelectorAll('#vis svg [id^="attn_background_"]').length >= n
  && document.querySelectorAll('#vis svg line').length > 0"""
HEAD_VIEW_DRAWN = """() => { const s = document.querySelector('#vis svg');
  return !!s && !s.dataset.old && s.querySelectorAll('line').length > 0; }"""


def fetch_libs() -> None:
    """npm pack the exact versions into benchmarks/out/npm and copy the three files next to the HTML."""
    NPM.mkdir(parents=True, exist_ok=True)
    for spec, path in PACKAGES.items():
        if not (NPM / path).exists():
            name, version = spec.split("@")
            subprocess.run(["npm", "pack", spec, "--silent"], cwd=NPM, check=True, capture_output=True)
            folder = NPM / f"{name}-{version}"
            folder.mkdir(exist_ok=True)
            subprocess.run(["tar", "xzf", f"{name}-{version}.tgz", "-C", str(folder)], cwd=NPM, check=True)
    site = OUT / "bertviz_site"
    site.mkdir(parents=True, exist_ok=True)
    for path in PACKAGES.values():
        (site / path.rsplit("/", 1)[1]).write_bytes((NPM / path).read_bytes())


def serve(folder) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def end_headers(self):
            self.send_header("Cache-Control", "no-store")  # every load fetches, like a fresh page
            super().end_headers()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


# From the start of every head_view page: the first animation frame on which it is drawn, on the page's clock
# (ms since its navigation started). Polled from before any of the page's own scripts run, so it is never late.
DRAWN_AT = """(() => { const check = () => { const s = document.querySelector('#vis svg');
  if (s && s.querySelectorAll('line').length > 0) { window.__drawnAt = performance.now(); return; }
  requestAnimationFrame(check); }; requestAnimationFrame(check); })()"""

# Ours, timed inside the page: put the text in the box, click "Show attention", and poll every animation frame until
# the grid's token strip holds `word` and Streamlit is idle (no running status, nothing stale). No Playwright round
# trip in the window, as head_view's in-page time has none.
TYPE_IN_PAGE = """async ([text, word]) => {
  const frame = () => new Promise(r => requestAnimationFrame(r));
  const strip = () => [...document.querySelectorAll('.mhv-strip .mhv-tok')].map(t => t.textContent);
  const before = strip().join(' ');
  const box = document.querySelector('textarea[aria-label="Sentence"]') || document.querySelector('textarea');
  Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set.call(box, text);
  box.dispatchEvent(new Event('input', {bubbles: true}));
  await frame();
  const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Show attention');
  const t0 = performance.now();
  button.click();
  for (;;) {  // the strip must have changed (this sentence's run arrived), hold the word, and the page be idle
    const now = strip();
    const running = [...document.querySelectorAll('[data-testid="stStatusWidget"]')]
      .some(el => el.getClientRects().length > 0);
    // The word inside a token's label (a BPE's shows its leading space); bounded: a step never drawn is NaN.
    if (now.join(' ') !== before && now.some(t => t.includes(word)) && !running
        && document.querySelectorAll('[data-stale="true"]').length === 0) break;
    if (performance.now() - t0 > 120000) return NaN;
    await frame();
  }
  return performance.now() - t0; }"""


ONE_LAYER_STATE = """async ([layer]) => {
  const frame = () => new Promise(r => requestAnimationFrame(r));
  const t0 = performance.now();
  document.querySelector(`.mhv-tab[data-layer="${layer}"]`).click();
  for (;;) {
    const titles = [...document.querySelectorAll('.mhv-grid .mhv-title')].map(e => e.textContent);
    const headings = [...document.querySelectorAll('p')].map(p => p.innerText).filter(t => /^Layer \\d+:/.test(t));
    if (titles.length && titles.every(x => x.startsWith('L' + layer + ' '))
        && headings.length && headings.every(t => t.startsWith('Layer ' + layer + ':'))
        && new URLSearchParams(location.search).get('layer') === String(layer)) break;
    await frame();
  }
  return performance.now() - t0; }"""


class BertVizPage:
    def __init__(self, browser, base_url: str, model, ref):
        self.pg = A.Page(browser)
        self.pg.page.add_init_script(DRAWN_AT)
        self.base = base_url
        self.model, self.ref = model, ref
        self.n = 0

    def _html(self, text: str, view: str) -> str:
        import torch
        from bertviz import head_view, model_view

        enc = self.model._encode(text)[0]
        with torch.no_grad():
            out = self.ref(**enc, output_attentions=True)
        tokens = self.model._tokenizer.convert_ids_to_tokens(enc["input_ids"][0].tolist())
        fn = model_view if view == "model" else head_view
        html = fn(out.attentions, tokens, html_action="return").data
        for url, local in CDN.items():
            html = html.replace(url, f"{self.base}/{local}")
        return "<!doctype html><html><head><meta charset='utf-8'></head><body>" + html + "</body></html>"

    def new_sentence(self, text: str, view: str) -> tuple[float, float]:
        """(python seconds: forward + HTML, browser seconds: navigate -> drawn)."""
        t0 = time.monotonic()
        html = self._html(text, view)
        self.n += 1
        name = f"{view}_view_{self.n}.html"
        (OUT / "bertviz_site" / name).write_text(html)
        t1 = time.monotonic()
        self.pg.page.goto(f"{self.base}/{name}", wait_until="commit")
        layers, heads = self.model.n_layers, self.model.n_heads
        if view == "model":
            self.pg.wait(MODEL_VIEW_DRAWN, [layers * heads])
        else:
            self.pg.wait(HEAD_VIEW_DRAWN)
        self.pg.settle()
        return t1 - t0, time.monotonic() - t1

    def new_sentence_in_page(self, text: str) -> float:
        """ms: Python (forward + HTML), then the page's own clock from navigation start to head_view drawn."""
        t0 = time.monotonic()
        html = self._html(text, "head")
        self.n += 1
        name = f"head_view_{self.n}.html"
        (OUT / "bertviz_site" / name).write_text(html)
        python_ms = (time.monotonic() - t0) * 1000
        self.pg.page.goto(f"{self.base}/{name}", wait_until="commit")
        self.pg.wait("() => window.__drawnAt !== undefined")
        return python_ms + self.pg.page.evaluate("() => window.__drawnAt")

    def switch_layer_in_page(self, layer: int) -> float:
        """ms from the <select>'s change event to the second painted frame with the new layer's lines, timed inside
        the page (no Playwright round trips in the window)."""
        return self.pg.page.evaluate("""async ([layer]) => {
          const frame = () => new Promise(r => requestAnimationFrame(r));
          document.querySelector('#vis svg').dataset.old = '1';
          const t0 = performance.now(), sel = document.querySelector('#layer');
          sel.value = String(layer);
          sel.dispatchEvent(new Event('change', {bubbles: true}));
          for (;;) { const s = document.querySelector('#vis svg');
                     if (s && !s.dataset.old && s.querySelectorAll('line').length > 0) break;
                     await frame(); }
          await frame(); await frame();
          return performance.now() - t0; }""", [layer])

    def switch_layer(self, layer: int) -> float:
        self.pg.page.evaluate("() => { document.querySelector('#vis svg').dataset.old = '1'; }")
        t0 = time.monotonic()
        self.pg.page.select_option("#layer", str(layer))
        self.pg.wait(HEAD_VIEW_DRAWN)
        self.pg.settle()
        return time.monotonic() - t0


def export(commit: str) -> Path:  # also used by bench_browser
    """The app as of `commit`, unpacked (git archive, no worktree) into out/before-<commit>, for a side-by-side run."""
    sha = subprocess.run(["git", "rev-parse", "--short", commit], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout.strip()
    folder = OUT / f"before-{sha}"
    if not folder.exists():
        folder.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", sha], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "x", "-C", str(folder)], input=archive, check=True)
    return folder


def sized_sentence(model, word: str, n_tokens: int) -> str:
    """`word` after "The " (so a BPE gives it its leading-space piece, one token) and filler, as close to n_tokens
    tokens (specials included) as the words allow."""
    count = model.token_count  # the contract: any adapter
    filler = text_of_tokens(lambda t: count(f"The {word} {t}"), n_tokens)
    return f"The {word} {filler}"


class OurApp:
    """One app server and its page: type, switch layer, toggle a head, hover, each timed to drawn + idle."""

    def __init__(self, browser, label: str, repo=None):
        self.label = label
        self.server = A.Server(f"streamlit-bertviz-{label}.log", repo=repo)
        self.pg = A.Page(browser)
        self.pg.page.goto(self.server.url)
        self.pg.wait(f"() => ({A.HEATMAPS})() >= 12")
        self.pg.wait_idle()

    def type(self, text: str, word: str) -> float:
        js, arg = A.drawn_with(word, 12)
        return self.pg.timed(lambda: A.type_sentence(self.pg.page, text), js, arg)[0]

    def layer(self, layer: int) -> float:
        js, arg = A.layer_drawn(layer, 12)
        return self.pg.timed(lambda: A.switch_layer(self.pg.page, layer), js, arg)[0]

    def toggle(self, name: str, off: bool) -> float:
        js, arg = A.toggled(name, off, A.COSINE)
        return self.pg.timed(lambda: A.click_toggle(self.pg.page, name), js, arg)[0]

    def type_in_page(self, text: str, word: str) -> float:
        """ms from a click on "Show attention" to the new sentence drawn and Streamlit idle, on the page's clock."""
        if not self.pg.page.evaluate(A.COMPONENT):
            return float("nan")
        return self.pg.page.evaluate(TYPE_IN_PAGE, [text, word])

    def layer_in_page(self, layer: int) -> float:
        """ms from a click on the grid's layer tab to the second painted frame showing that layer, timed inside the
        page like head_view's (the plotly app before has no in-page switch: nan)."""
        if not self.pg.page.evaluate(A.COMPONENT):
            return float("nan")
        return self.pg.page.evaluate("""async ([layer]) => {
          const frame = () => new Promise(r => requestAnimationFrame(r));
          const t0 = performance.now();
          document.querySelector(`.mhv-tab[data-layer="${layer}"]`).click();
          for (;;) { const t = [...document.querySelectorAll('.mhv-grid .mhv-title')].map(e => e.textContent);
                     if (t.length && t.every(x => x.startsWith('L' + layer + ' '))) break;
                     await frame(); }
          await frame(); await frame();
          return performance.now() - t0; }""", [layer])

    def layer_state_in_page(self, layer: int) -> float:
        """ms from a click on the grid's layer tab until the page holds one layer everywhere: every head of the
        grid, the layer's heading ("Layer N: ...", and no other) and the link's `layer` (issue 19: before, the
        heading and link waited for the server's rerun)."""
        if not self.pg.page.evaluate(A.COMPONENT):
            return float("nan")
        return self.pg.page.evaluate(ONE_LAYER_STATE, [layer])

    def hover_ms(self, q: int) -> float:
        return self.pg.page.evaluate(A.HOVER_MS, [q]) if self.pg.page.evaluate(A.COMPONENT) else float("nan")

    def stop(self) -> None:
        self.server.stop()  # its page closes with the browser


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", default="16,64,128", help="sentence lengths in tokens, specials included")
    ap.add_argument("--before", default="", help="also time the app as of this commit, interleaved (e.g. 05ba8f3)")
    ap.add_argument("--model-view", action="store_true", help="also time BertViz model_view (slow past 64 tokens)")
    ap.add_argument("--no-toggle", action="store_true", help="skip the toggle and hover steps (ours only)")
    args = ap.parse_args()
    import copy

    from mha_viz.models.hf import load_minilm_hf

    print(f"# bench_bertviz | {machine()} | reps {args.reps} | tokens {args.tokens} | before {args.before or '-'}",
          flush=True)
    fetch_libs()
    httpd, base = serve(OUT / "bertviz_site")
    # MiniLM through transformers (the app runs it on the in-repo encoder, the same numbers): BertViz and the
    # sentence sizes use transformers' tokenizer and model.
    model = load_minilm_hf()
    ref = copy.deepcopy(model._model)
    ref.set_attn_implementation("eager")  # BertViz gets transformers' own attentions, none of our hooks
    times: dict[tuple, list[float]] = {}
    def add(n, who, step, secs):
        return times.setdefault((n, who, step), []).append(secs)

    apps: list[OurApp] = []
    try:
        with A.chromium() as browser:
            apps.append(OurApp(browser, "after"))
            if args.before:
                apps.append(OurApp(browser, f"before {args.before}", repo=export(args.before)))
            bv = BertVizPage(browser, base, model, ref)
            for app in apps:  # warm: one uncached run each, outside the timings
                app.type(A.sentence("pocket"), "pocket")
            bv.new_sentence(A.sentence("pocket"), "head")  # warm the browser's JS caches equally
            for n in [int(x) for x in args.tokens.split(",")]:
                for i in range(args.reps):  # interleaved: every contender per sentence
                    word = A.MARKERS[(i + n) % len(A.MARKERS)]
                    text = sized_sentence(model, word, n)
                    # The last rep's layer tab tells its server 150 ms after its paint (web/grid/tabs.js, TELL_MS):
                    # each page's rerun for it finishes first, or it lands in the step of the app timed first (with
                    # the same commit twice: 0.30 s first, 0.22 s second).
                    for app in apps:
                        app.pg.page.wait_for_timeout(300)
                        app.pg.wait_idle()
                    for app in apps:
                        add(n, app.label, "new sentence -> drawn", app.type(text, word))
                    if args.model_view:
                        py, br = bv.new_sentence(text, "model")
                        add(n, "BertViz model_view", "new sentence -> drawn", py + br)
                    py, br = bv.new_sentence(text, "head")
                    add(n, "BertViz head_view", "new sentence -> drawn", py + br)
                    # The same step on the pages' own clocks, on a sentence no step has used (a repeated one would
                    # be a cache hit): the marker word once more at its end.
                    text2, word2 = f"{text} {word}", word
                    for app in apps:
                        ms = app.type_in_page(text2, word2)
                        if ms == ms:
                            add(n, app.label, "new sentence, in-page (ms)", ms)
                    add(n, "BertViz head_view", "new sentence, in-page (ms)", bv.new_sentence_in_page(text2))
                    layer = 1 + i % 5
                    for app in apps:
                        add(n, app.label, "switch layer", app.layer(layer))
                    add(n, "BertViz head_view", "switch layer", bv.switch_layer(layer))
                    # The same switch timed inside the page, both sides: what the browser itself takes (ms).
                    other = 1 + (i + 2) % 5
                    for app in apps:
                        ms = app.layer_in_page(other)
                        if ms == ms:
                            add(n, app.label, "switch layer, in-page (ms)", ms)
                    add(n, "BertViz head_view", "switch layer, in-page (ms)", bv.switch_layer_in_page(other))
                    for app in apps:  # click -> grid, heading and link on one layer (ours only: head_view has one)
                        ms = app.layer_state_in_page(layer)
                        if ms == ms:
                            add(n, app.label, "switch layer: tab -> grid, heading and link agree, in-page (ms)", ms)
                        app.pg.wait_idle()
                    for app in apps if not args.no_toggle else []:
                        head = f"L{layer} H{i % 12}"
                        add(n, app.label, "toggle a head off -> updated", app.toggle(head, True))
                        app.toggle(head, False)
                        hover = app.hover_ms(i % n)
                        if hover == hover:
                            add(n, app.label, "hover a token -> its row lit in every head (ms)", hover)
                    for app in apps:
                        app.layer(0)
                    print(f"[bertviz] {n} tokens rep {i + 1}: " + ", ".join(
                        f"{who}/{step[:12]} {v[-1]:.2f}" for (m, who, step), v in times.items() if m == n)
                        + f" (load avg {load_avg()})", flush=True)
    finally:
        for app in apps:
            app.stop()
        httpd.shutdown()
    rows = []
    for (n, who, step), values in times.items():
        peer = times.get((n, "BertViz head_view", step))
        ratio = f"{median(values) / median(peer):.2f}" if peer and not who.startswith("BertViz") else ""
        rows.append([n, step, who, f"{median(values):.3f}", f"{min(values):.3f}", f"{max(values):.3f}", ratio])
    print()
    print(f"MiniLM (6 x 12), median of {args.reps}, seconds unless marked ms, load avg at end {load_avg()}")
    print(table(["tokens", "step", "who", "median", "min", "max", "/ BertViz head_view"], rows))


if __name__ == "__main__":
    main()
