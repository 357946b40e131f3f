"""Browser: the app as a user drives it, Playwright in headless Chromium against `streamlit run app.py` (loopback).

Steps, each timed from the user's action until the expected content is drawn and Streamlit is idle:
  (a) cold start: a fresh server process -> the first 12 heatmaps drawn (and: page open -> drawn);
      SmolLM2: pick it in the sidebar on a fresh server -> its first heatmaps drawn (model load);
  (b) type a new ~30-token sentence -> all heads of the layer drawn with the new words (model warm, run uncached);
  (c) switch one head off -> the head's title says "(off)" and the effect panel shows; (c') switch it back on;
  (d) switch layer in the sidebar -> all heads of the new layer drawn;
  (e) "All layers" view drawn from the layer view; (e') a new sentence typed while in the All-layers view.
Median of --reps (>= 5) for each; MB is what the websocket delivered during the step; "server s" is the time
from the action to the last websocket frame of the step (the script's rerun and the wire), so the rest of the
step, "browser s", is Streamlit's frontend and plotly.js drawing.
--pyspy N samples the (warm) server with py-spy for N seconds at 25 Hz into out/pyspy-browser.txt (raw stacks).

    python benchmarks/bench_browser.py [--reps 5] [--cold 5] [--models minilm,smollm2]
"""
from __future__ import annotations

import argparse
import time

import _app as A
from _common import load_avg, machine, median, table
from bench_bertviz import export

N_HEADS = {"minilm": 12, "smollm2": 9}
EFFECT = {"minilm": A.COSINE, "smollm2": A.KL}
TARGETS = {  # (model, step) -> seconds
    ("minilm", "toggle head off"): 0.4,
    ("smollm2", "toggle head off"): 1.0,
    ("minilm", "type -> drawn"): 1.0,
    ("smollm2", "all layers drawn"): 2.5,
    ("smollm2", "all layers: type -> drawn"): 1.0,
    ("smollm2", "all layers: type 128 tokens -> drawn"): 1.5,
    ("minilm", "cold: process start -> drawn"): 5.0,
}


def open_app(browser, server) -> tuple[A.Page, float]:
    pg = A.Page(browser)
    t0 = time.monotonic()
    pg.page.goto(server.url, wait_until="domcontentloaded")
    pg.wait(f"() => ({A.HEATMAPS})() >= {N_HEADS['minilm']}")
    pg.wait_idle()
    pg.settle()
    return pg, time.monotonic() - t0


def pick_model(pg: A.Page, name: str) -> float:
    if name == "minilm":
        return 0.0
    js, arg = A.layer_drawn(0, N_HEADS[name])
    js2 = f"([l, n]) => ({js})([l, n]) && ({A.TITLES})().length === n"
    secs, _ = pg.timed(lambda: A.select_option(pg.page, "Model", A.SMOLLM2_LABEL, exact=False), js2, arg)
    return secs


def all_layers_with(word: str) -> tuple[str, list]:
    js = f"""([w]) => ({A.TILED_DRAWN})() && ({A.ALL_LABELS})().some(s => s.includes(w))"""
    return js, [word]


def exercise(pg: A.Page, name: str, reps: int, results: dict, markers: list[str], long_texts=None) -> None:
    """Steps (b)-(e) on an open page with `name` selected; appends (seconds, bytes) to results[(name, step)]."""
    n = N_HEADS[name]
    def add(step, r):
        return results.setdefault((name, step), []).append((*r, pg.last_server))

    # warm: one uncached run outside the timings
    js, arg = A.drawn_with("pocket", n)
    pg.timed(lambda: A.type_sentence(pg.page, A.sentence("pocket")), js, arg)
    for i in range(reps):  # (b)
        word = markers[i % len(markers)]
        js, arg = A.drawn_with(word, n)
        add("type -> drawn", pg.timed(lambda: A.type_sentence(pg.page, A.sentence(word)), js, arg))
    for i in range(reps):  # (c), (c')
        head = f"L0 H{i % n}"
        js, arg = A.toggled(head, True, EFFECT[name])
        add("toggle head off", pg.timed(lambda: A.click_toggle(pg.page, head), js, arg))
        js, arg = A.toggled(head, False, EFFECT[name])
        add("toggle back on (cached run)", pg.timed(lambda: A.click_toggle(pg.page, head), js, arg))
    for i in range(reps):  # (d)
        layer = i + 1 if i + 1 < (6 if name == "minilm" else 30) else 0
        js, arg = A.layer_drawn(layer, n)
        add("switch layer", pg.timed(lambda: A.switch_layer(pg.page, layer), js, arg))
    js, arg = A.layer_drawn(0, n)
    pg.timed(lambda: A.switch_layer(pg.page, 0), js, arg)
    for i in range(reps):  # (e)
        add("all layers drawn", pg.timed(lambda: A.click_view(pg.page, "All layers"), A.TILED_DRAWN))
        js, arg = A.layer_drawn(0, n)
        add("back to layer view", pg.timed(lambda: A.click_view(pg.page, "Layer"), js, arg))
    A.click_view(pg.page, "All layers")
    pg.wait(A.TILED_DRAWN)
    pg.wait_idle()
    for i in range(reps):  # (e')
        word = markers[(i + reps) % len(markers)]
        js, arg = all_layers_with(word)
        add("all layers: type -> drawn", pg.timed(lambda: A.type_sentence(pg.page, A.sentence(word)), js, arg))
    if long_texts:  # (e'') the same at 128 tokens: SmolLM2's 270 heads are the issue's target
        for i in range(reps):
            word = markers[(i + 2 * reps) % len(markers)]
            js, arg = all_layers_with(word)
            add("all layers: type 128 tokens -> drawn",
                pg.timed(lambda: A.type_sentence(pg.page, long_texts(word)), js, arg))
    js, arg = A.layer_drawn(0, n)
    pg.timed(lambda: A.click_view(pg.page, "Layer"), js, arg)


def cold_start(browser, models: list[str], results: dict, extra_env: dict | None = None, repo=None,
               label: str = "") -> None:
    server = A.Server("streamlit-cold.log", extra_env, repo=repo)
    try:
        pg, goto = open_app(browser, server)
        results.setdefault(("minilm", "cold: process start -> drawn" + label), []).append(
            (time.monotonic() - server.t_spawn, 0))
        results.setdefault(("minilm", "cold: page open -> drawn" + label), []).append((goto, 0))
        if "smollm2" in models:
            results.setdefault(("smollm2", "cold: pick model -> drawn"), []).append((pick_model(pg, "smollm2"), 0))
        pg.close()
    finally:
        server.stop()


def report(results: dict, title: str) -> str:
    rows = []
    for (name, step), values in results.items():
        secs = [v[0] for v in values]
        mb = [v[1] / 1e6 for v in values]
        server = [v[2] for v in values if len(v) > 2 and v[2] == v[2]]
        target = TARGETS.get((name, step))
        med = median(secs)
        srv = f"{median(server):.2f}" if server else ""
        rows.append([name, step, len(secs), f"{med:.2f}", f"{min(secs):.2f}", f"{max(secs):.2f}", srv,
                     f"{med - median(server):.2f}" if server else "", f"{median(mb):.3f}",
                     f"{target:.1f}" if target else "", f"{med / target:.2f}" if target else "",
                     ("met" if med <= target else "MISSED") if target else ""])
    return title + "\n" + table(["model", "step", "n", "median s", "min s", "max s", "server s (median)",
                                 "browser s (median - server)", "MB on websocket (median)",
                                 "target s", "median / target", "verdict"], rows)


def sized_texts(name: str, n_tokens: int):
    """marker word -> a text of about n_tokens tokens of model `name` that contains it."""
    from mha_viz import load_model

    from bench_bertviz import sized_sentence

    model = load_model(name)
    return lambda word: sized_sentence(model, word, n_tokens)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cold", type=int, default=5)
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--before", default="", help="also cold-start the app as of this commit, interleaved")
    ap.add_argument("--pyspy", type=int, default=0, help="py-spy the warm server for this many seconds")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra environment for the server, e.g. STREAMLIT_RUNNER_POST_SCRIPT_GC=false to try a "
                         "Streamlit setting without editing the app")
    args = ap.parse_args()
    models = args.models.split(",")
    extra_env = dict(kv.split("=", 1) for kv in args.env)
    print(f"# bench_browser | {machine()} | reps {args.reps} | cold starts {args.cold} | server env {extra_env}",
          flush=True)
    results: dict = {}
    with A.chromium() as browser:
        before = export(args.before) if args.before else None
        for i in range(args.cold):
            cold_start(browser, models, results, extra_env)
            if before:
                cold_start(browser, [], results, extra_env, repo=before, label=f" (before, {args.before})")
            print(f"[browser] cold start {i + 1}/{args.cold} done (load avg {load_avg()})", flush=True)
        server = A.Server(extra_env=extra_env)
        spy = None
        try:
            pg, _ = open_app(browser, server)
            if args.pyspy:
                import subprocess

                from _common import OUT
                spy = subprocess.Popen(["py-spy", "record", "--pid", str(server.proc.pid), "--rate", "25",
                                        "--duration", str(args.pyspy), "--format", "raw", "--nonblocking",
                                        "-o", str(OUT / "pyspy-browser.txt")],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for name in models:
                if name != "minilm":
                    print(report(results, f"(so far) load avg {load_avg()}"), flush=True)  # kept if a later step fails
                pick_model(pg, name)
                long_texts = sized_texts(name, 128) if name == "smollm2" else None
                exercise(pg, name, args.reps, results, list(A.MARKERS), long_texts)
                print(f"[browser] {name} done (load avg {load_avg()}); JS errors: {pg.errors[:3]}", flush=True)
            pg.close()
            print(f"[browser] server peak RSS {server.peak_rss() / 1e9:.2f} GB")
        finally:
            if spy is not None and spy.poll() is None:
                spy.wait(timeout=args.pyspy + 30)
            server.stop()
    print()
    print(report(results, f"load avg at end: {load_avg()}"))


if __name__ == "__main__":
    main()
