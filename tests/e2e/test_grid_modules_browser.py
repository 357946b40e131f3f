"""The grid's files are real ES modules: Chromium loads them one by one from a folder (every import resolved by
the browser itself), and the grid they draw is the one the bundle both hosts load draws (mha_viz.web.grid_js)."""
from __future__ import annotations

import base64
import json

import torch

from mha_viz import web
from mha_viz.web.payload import deflate, grid_data, layer_codes

from harness import files_page

ORIGIN = "http://grid.test"

# Mount the grid from module `url` on the payload `data` (its layers as base64 in `layers`, every one carried) and
# read back what it drew: each head's title, its heatmap's pixels, and the tabs.
MOUNT = """async ([url, data, layers]) => {
  const mod = await import(url);
  const cells = new Map(layers.map((b64, l) => ["z" + l, Uint8Array.from(atob(b64), c => c.charCodeAt(0))]));
  const att = { schema: { fields: [...cells.keys()].map(name => ({ name })) },
                getChild: name => ({ get: () => cells.get(name) }) };
  const root = document.createElement("div");
  document.body.append(root);
  mod.default({ data: { ...data, att }, parentElement: root, setTriggerValue: () => {} });
  for (let i = 0; i < 100 && !root.querySelector(".mhv-grid[data-layer]"); i++) {
    await new Promise(r => setTimeout(r, 20));
  }
  const heads = [...root.querySelectorAll(".mhv-head")].map(h => {
    const c = h.querySelector("canvas");
    const pixels = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
    return [h.querySelector(".mhv-title").textContent, Array.from(pixels)];
  });
  root.remove();
  return { heads, tabs: [...root.querySelectorAll(".mhv-tab")].map(t => t.textContent) };
}"""


def test_the_modules_load_one_by_one_and_draw_what_the_bundle_draws(browser):
    torch.manual_seed(0)
    att = torch.softmax(torch.randn(2, 3, 5, 5), dim=-1)  # (L, H, T, T)
    tokens = ["a", "b", "c", "d", "e"]
    data, codes = grid_data(tokens, att, 1, {(1, 2)}, 3, False, {(1, 0): "measured"})
    layers = [base64.b64encode(deflate(layer_codes(codes, data, l))).decode() for l in range(2)]
    files = {f"/grid/{p.name}": p.read_text() for p in web.GRID.glob("*.js")}
    files["/bundle.js"] = web.grid_js()
    context, page = files_page(browser, files, ORIGIN)
    try:
        from_modules = page.evaluate(MOUNT, [f"{ORIGIN}/grid/{web.ENTRY}", json.loads(json.dumps(data)), layers])
        requested = set(page.evaluate("() => performance.getEntriesByType('resource').map(e => e.name)"))
        from_bundle = page.evaluate(MOUNT, [f"{ORIGIN}/bundle.js", json.loads(json.dumps(data)), layers])
    finally:
        context.close()
    assert not page.js_errors, page.js_errors
    assert {f"{ORIGIN}/grid/{name}" for name in web.GRID_FILES} <= requested, "each module is fetched by its import"
    assert [t for t, _ in from_modules["heads"]] == ["L1 H0", "L1 H1", "L1 H2 (off)"]
    assert from_modules == from_bundle
    pixels = from_modules["heads"][0][1]
    assert len(set(pixels)) > 2, "the heatmap is drawn, not blank"
