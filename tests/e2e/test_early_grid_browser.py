"""The grid's first message sent while the run still computes (web/grid/layers.js, `completed`), in Chromium on the
bundle both hosts load: a message that names the layers above the one on screen by None draws that layer at once,
and the second message (the Streamlit page's grid_rest, handed to layers.js's `deliver`) completes it: the grid then
draws from every layer of the run, as from one whole message. Whichever comes first: the second message after the
grid has drawn the first, or before (the first still inflating)."""
from __future__ import annotations

import base64
import json

import pytest
import torch

from mha_viz import web
from mha_viz.web.payload import deflate, early_data, grid_data, layer_codes, layer_part

from harness import files_page

ORIGIN = "http://grid.test"

# A message's `att` as the page gets it: an Arrow-like table, one column "z<l>" per layer carried (deflated codes).
TABLE = """  const table = (layers) => {
    const bytes = (b64) => Uint8Array.from(atob(b64), c => c.charCodeAt(0));
    const cells = new Map(Object.entries(layers).map(([l, b64]) => ["z" + l, bytes(b64)]));
    return { schema: { fields: [...cells.keys()].map(name => ({ name })) },
             getChild: name => ({ get: () => cells.get(name) }) };
  };
"""
# Mount the bundle on `first` (its layers as base64 by layer), hand `second` to the page's store (`deliver`) before or
# after the grid drew, then read back what the grid draws from and the pixels of the layer on screen.
EARLY = """async ([url, first, firstLayers, second, secondLayers, secondFirst]) => {
  const mod = await import(url);
""" + TABLE + """  const sleep = (ms) => new Promise(r => setTimeout(r, ms));
  const root = document.createElement("div");
  document.body.append(root);
  const pixels = () => [...root.querySelectorAll(".mhv-head canvas")].map(c =>
    Array.from(c.getContext("2d").getImageData(0, 0, c.width, c.height).data));
  mod.default({ data: { ...first, att: table(firstLayers) }, parentElement: root, setTriggerValue: () => {} });
  let early = null;
  if (!secondFirst) {
    for (let i = 0; i < 100 && !root.querySelector(".mhv-grid[data-layer]"); i++) await sleep(20);
    early = { pixels: pixels(), drawn: root.querySelector(".mhv").mhvDrawnFrom() };
  }
  globalThis.__mhvLayers.deliver({ ...second, att: table(secondLayers) });
  const box = () => root.querySelector(".mhv");
  for (let i = 0; i < 200; i++) {
    const d = box() && box().mhvDrawnFrom();
    if (d && d.waiting.length === 0 && d.codes.every(c => c !== null)
        && root.querySelector(".mhv-grid[data-layer]")) break;
    await sleep(20);
  }
  const drawn = box().mhvDrawnFrom();
  const out = { early, drawn, pixels: pixels() };
  root.remove();
  return out;
}"""


WHOLE = """async ([url, data, layers]) => {
  const mod = await import(url);
""" + TABLE + """  const root = document.createElement("div");
  document.body.append(root);
  mod.default({ data: { ...data, att: table(layers) }, parentElement: root, setTriggerValue: () => {} });
  for (let i = 0; i < 100 && !root.querySelector(".mhv-grid[data-layer]"); i++) {
    await new Promise(r => setTimeout(r, 20));
  }
  return [...root.querySelectorAll(".mhv-head canvas")].map(c =>
    Array.from(c.getContext("2d").getImageData(0, 0, c.width, c.height).data));
}"""


def _b64(codes: bytes) -> str:
    return base64.b64encode(deflate(codes)).decode()


@pytest.mark.parametrize("second_first", [False, True], ids=["drawn-then-completed", "completed-before-drawn"])
def test_an_early_message_completed_draws_the_whole_run(browser, second_first):
    torch.manual_seed(0)
    att = torch.softmax(torch.randn(3, 2, 5, 5), dim=-1)  # (L, H, T, T)
    tokens = ["a", "b", "c", "d", "e"]
    whole, codes = grid_data(tokens, att, 1, (), 2, False, {})
    parts = {l: layer_part(att[l], False) for l in range(2)}  # the forward has made layers 0 and 1
    first = early_data(tokens, (3, 2, 5, 5), parts, 1, (), 2, False, {}, ())
    first["rest"] = [0, 2]
    second = {"digest": whole["digest"], "digests": whole["digests"], "scale": whole["scale"],
              "completes": first["digest"], "badges": {}}
    files = {"/bundle.js": web.grid_js()}
    context, page = files_page(browser, files, ORIGIN)
    try:
        got = page.evaluate(EARLY, [f"{ORIGIN}/bundle.js", json.loads(json.dumps(first)),
                                    {"1": _b64(parts[1][0])}, json.loads(json.dumps(second)),
                                    {str(l): _b64(layer_codes(codes, whole, l)) for l in (0, 2)}, second_first])
        # The same run sent whole, in one message: what the grid draws the layer on screen from.
        whole_drawn = page.evaluate(WHOLE, [f"{ORIGIN}/bundle.js", json.loads(json.dumps(whole)),
                                            {str(l): _b64(layer_codes(codes, whole, l)) for l in range(3)}])
    finally:
        context.close()
    assert not page.js_errors, page.js_errors
    if got["early"] is not None:  # the layer on screen drawn from the first message alone, as the whole run draws it
        assert got["early"]["drawn"]["digests"] == first["digests"] and got["early"]["pixels"] == whole_drawn
    assert got["drawn"]["digests"] == whole["digests"] and got["drawn"]["waiting"] == []
    assert [base64.b64decode(c) for c in got["drawn"]["codes"]] == [layer_codes(codes, whole, l) for l in range(3)]
    assert got["pixels"] == whole_drawn
