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
  ours: type -> all heads of the layer drawn, and switch layer (sidebar), interleaved with BertViz's.
Target: our type -> drawn <= 0.5 x BertViz model_view.

    python benchmarks/bench_bertviz.py [--reps 5]
"""
from __future__ import annotations

import argparse
import functools
import http.server
import subprocess
import threading
import time

from _common import OUT, load_avg, machine, median, table

import _app as A

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


class BertVizPage:
    def __init__(self, browser, base_url: str, model, ref):
        self.pg = A.Page(browser)
        self.base = base_url
        self.model, self.ref = model, ref
        self.n = 0

    def _html(self, text: str, view: str) -> str:
        import torch
        from bertviz import head_view, model_view

        enc, _ = self.model._encode(text)
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

    def switch_layer(self, layer: int) -> float:
        self.pg.page.evaluate("() => { document.querySelector('#vis svg').dataset.old = '1'; }")
        t0 = time.monotonic()
        self.pg.page.select_option("#layer", str(layer))
        self.pg.wait(HEAD_VIEW_DRAWN)
        self.pg.settle()
        return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    import copy

    from mha_viz import load_model

    print(f"# bench_bertviz | {machine()} | reps {args.reps}", flush=True)
    fetch_libs()
    httpd, base = serve(OUT / "bertviz_site")
    model = load_model("minilm")
    ref = copy.deepcopy(model._model)
    ref.set_attn_implementation("eager")  # BertViz gets transformers' own attentions, none of our hooks
    server = A.Server("streamlit-bertviz.log")
    ours_type, ours_layer, mv_py, mv_br, hv_py, hv_br, hv_layer = [], [], [], [], [], [], []
    try:
        with A.chromium() as browser:
            app, _ = A.Page(browser), None
            app.page.goto(server.url)
            app.wait(f"() => ({A.HEATMAPS})() >= 12")
            app.wait_idle()
            js, arg = A.drawn_with("pocket", 12)
            app.timed(lambda: A.type_sentence(app.page, A.sentence("pocket")), js, arg)  # warm
            bv = BertVizPage(browser, base, model, ref)
            bv.new_sentence(A.sentence("pocket"), "model")  # warm the browser's JS caches equally
            for i in range(args.reps):  # interleaved: ours, model_view, head_view, per sentence
                word = A.MARKERS[i % len(A.MARKERS)]
                text = A.sentence(word)
                js, arg = A.drawn_with(word, 12)
                ours_type.append(app.timed(lambda: A.type_sentence(app.page, text), js, arg)[0])
                py, br = bv.new_sentence(text, "model")
                mv_py.append(py), mv_br.append(br)
                py, br = bv.new_sentence(text, "head")
                hv_py.append(py), hv_br.append(br)
                layer = 1 + i % 5
                js, arg = A.layer_drawn(layer, 12)
                ours_layer.append(app.timed(lambda: A.select_option(app.page, "Layer", f"L{layer}"), js, arg)[0])
                hv_layer.append(bv.switch_layer(layer))
                js, arg = A.layer_drawn(0, 12)
                app.timed(lambda: A.select_option(app.page, "Layer", "L0"), js, arg)
                print(f"[bertviz] rep {i + 1}: ours type {ours_type[-1]:.2f} s, model_view {mv_py[-1] + mv_br[-1]:.2f} s, "
                      f"head_view {hv_py[-1] + hv_br[-1]:.2f} s; layer ours {ours_layer[-1]:.2f} s, "
                      f"head_view {hv_layer[-1]:.2f} s (load avg {load_avg()})", flush=True)
    finally:
        server.stop()
        httpd.shutdown()
    m = median
    mv, hv = m([a + b for a, b in zip(mv_py, mv_br)]), m([a + b for a, b in zip(hv_py, hv_br)])
    rows = [
        ["new sentence -> drawn", f"{m(ours_type):.2f}", "model_view", f"{m(mv_py):.2f} + {m(mv_br):.2f} = {mv:.2f}",
         f"{m(ours_type) / mv:.2f}", f"{m(ours_type) / m(mv_br):.2f}",
         "met" if m(ours_type) <= 0.5 * mv else "MISSED"],
        ["new sentence -> drawn", f"{m(ours_type):.2f}", "head_view", f"{m(hv_py):.2f} + {m(hv_br):.2f} = {hv:.2f}",
         f"{m(ours_type) / hv:.2f}", f"{m(ours_type) / m(hv_br):.2f}", ""],
        ["switch layer", f"{m(ours_layer):.2f}", "head_view", f"{m(hv_layer):.2f}",
         f"{m(ours_layer) / m(hv_layer):.2f}", "", ""],
    ]
    print()
    print(f"MiniLM (6 x 12), ~30 tokens, median of {args.reps}, load avg at end {load_avg()}")
    print(table(["step", "ours s", "BertViz view", "BertViz s (python + browser)", "ours / BertViz",
                 "ours / BertViz browser only", "<= 0.5 x model_view"], rows))


if __name__ == "__main__":
    main()
