// The entry: the state a grid keeps across updates, and an update applied (new codes inflated, then drawn).
// Each concern is its own module; mha_viz/web/__init__.py bundles them from this one for both hosts.
//
// The layer grid, drawn in the browser: every head of every layer arrives once as uint8 codes, so hovering a
// token, opening a head large, changing the contrast and saving a picture never ask the server. A head switched on
// or off (that needs the model) and a layer tab (the page's one layer state: heading, bulk switches, other views
// and the URL follow it) are trigger events; the tab is drawn at once, before the server answers.
//
// data = {digest, tokens[T], L, H, T, att: Arrow table whose one binary cell "z" is the zlib-deflated (L, H, T, T)
//         uint8 codes (layers.js), scale[L*H], off: [[l, h]...], layer, cols, badges: {"l,h": text}, shared,
//         names: {layers: ["L0", ...], heads: [["L0 H0", ...], ...]}, unknown: [positions],
//         colours: {on: [stops], off: [stops], heads: [one per head], head_off, paper, ink, label, frame, mark},
//         lines_up_to}   (names and colours come from Python, mha_viz/names.py and mha_viz/web/palette.py: one
//         spelling, one palette)
//        att may hold a second binary column "font": the saved figures' WOFF, family and licence in its metadata
//        optional: controls: {bulk: true, link: true} (the Streamlit page): the layer's heading and its bulk
//         switches are drawn here, so every layer control shows the one layer at once, and a tab writes the
//         link's `layer` itself (the server's next run writes the same value)
// The host (the Streamlit component, or the notebook widget's wrapper) receives the triggers "toggle" and "layer"
// (and "bulk": {layer, action: "off" | "on" | "only" | "reset", head}, with controls.bulk).
import { CONTRASTS, DEFAULT_CONTRAST, legend, lutFor } from "./colour.js";
import { buildControls } from "./controls.js";
import { el } from "./dom.js";
import { save } from "./export.js";
import { drawFocus, openFocus } from "./focus.js";
import { buildHeads, buildStrip, drawLayer, layoutGrid } from "./heads.js";
import { HINT } from "./hover.js";
import { decode } from "./layers.js";
import { showDraw } from "./lines.js";
import { buildTabs, layerFor } from "./tabs.js";

function drawnAs(d) {  // everything of an update the grid draws from, but the weights (their digest) and the layer
  const { att, layer, ...rest } = d;
  return JSON.stringify(rest);
}

const STATES = new WeakMap();  // parentElement -> this instance's state, kept across reruns

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  let s = STATES.get(parentElement);
  if (!s) {
    s = build(parentElement, setTriggerValue);
    STATES.set(parentElement, s);
  }
  s.setTrigger = setTriggerValue;
  // Updates apply in arrival order; one that a newer update overtook while its bytes were inflating is skipped.
  s.latest = data;
  s.chain = s.chain.then(() => update(s, data)).catch(err => failed(s, err));
}

function failed(s, err) {
  s.info.textContent = typeof DecompressionStream === "undefined"
    ? "This browser cannot unpack the heads' weights (it has no DecompressionStream): use Chrome 80, Firefox 113, "
      + "Safari 16.4 or later."
    : "Could not draw the heads: " + err;
}

function build(root, setTrigger) {
  const s = { root, setTrigger, chain: Promise.resolve(), latest: null, digest: null, layer: 0, askedLayer: null,
              localLayer: null, tells: 0, codes: [],
              hoverQ: null, pinQ: null, focus: null, zoom: 1, pending: new Set() };
  const box = el("div", "mhv");
  const bar = el("div", "mhv-bar");
  s.tabs = el("div", "mhv-tabs");
  s.tabs.setAttribute("role", "tablist");
  s.info = el("div", "mhv-info", HINT);
  s.info.setAttribute("data-testid", "mhv-info");
  const tools = el("div", "mhv-tools");
  const label = el("label", "mhv-control", "Contrast ");
  s.contrastPick = el("select", "mhv-select");
  s.contrastPick.setAttribute("data-testid", "mhv-contrast");
  for (const [key, c] of Object.entries(CONTRASTS)) {
    const o = el("option", null, c.label);
    o.value = key;
    s.contrastPick.append(o);
  }
  s.contrast = DEFAULT_CONTRAST;
  s.contrastPick.value = s.contrast;
  s.contrastPick.addEventListener("change", () => { s.contrast = s.contrastPick.value; drawLayer(s); if (s.focus) drawFocus(s); });
  label.append(s.contrastPick);
  s.legend = el("span", "mhv-legend");
  s.legend.setAttribute("data-testid", "mhv-legend");
  s.note = el("span", "mhv-note");
  s.note.setAttribute("data-testid", "mhv-cols-note");
  const svg = el("button", "mhv-btn", "SVG"), png = el("button", "mhv-btn", "PNG");
  svg.dataset.save = "svg"; png.dataset.save = "png";
  svg.title = "This layer's heads as a vector picture: labels, colour legend, which heads are off";
  png.title = "This layer's heads as a PNG at twice the screen's size, with labels and legend";
  svg.addEventListener("click", () => save(s, "svg"));
  png.addEventListener("click", () => save(s, "png"));
  const axes = el("span", "mhv-axes", "query ↓ key →");
  axes.title = "Each heatmap: one row per query token (top to bottom), one column per key token (left to right)";
  const drawLabel = el("label", "mhv-control", "Draw ");
  s.drawPick = el("select", "mhv-select");
  s.drawPick.setAttribute("data-testid", "mhv-draw");
  for (const [key, text] of [["grid", "heatmaps"], ["lines", "lines (BertViz style)"]]) {
    const o = el("option", null, text);
    o.value = key;
    s.drawPick.append(o);
  }
  s.draw = "grid";
  s.drawPick.addEventListener("change", () => { s.draw = s.drawPick.value; showDraw(s); });
  drawLabel.append(s.drawPick);
  tools.append(drawLabel, label, s.legend, axes, el("span", "mhv-control", "Save"), svg, png);
  bar.append(s.tabs, tools);
  s.strip = el("div", "mhv-strip");
  s.strip.setAttribute("data-testid", "token-strip");  // the page's one token strip in this view
  s.focusBox = el("div", "mhv-focus");
  s.focusBox.hidden = true;
  s.grid = el("div", "mhv-grid");
  s.lines = el("div", "mhv-lines");
  s.lines.hidden = true;
  s.controls = el("div", "mhv-controls");
  s.controls.hidden = true;
  box.append(s.controls, bar, s.info, s.note, s.strip, s.focusBox, s.grid, s.lines);
  root.append(box);
  s.box = box;
  // Column count follows the width the page gives us, and the text length (`cols`).
  s.resize = new ResizeObserver(() => layoutGrid(s));
  s.resize.observe(box);
  return s;
}

async function update(s, d) {
  if (d !== s.latest) return;
  const fresh = d.digest !== s.digest;
  if (fresh) {
    const codes = await decode(d);
    if (d !== s.latest) return;
    s.codes = codes;
  }
  const layer = layerFor(s, d);
  // A rerun that changes nothing drawn (the view's other widgets, the page catching up with a tab) leaves the grid
  // as it is: no second drawing of every head.
  const same = drawnAs(d);
  if (!fresh && same === s.drawn && layer === s.layer && s.pending.size === 0) {
    s.d = d;
    return;
  }
  s.drawn = same;
  s.d = d;
  if (fresh) {
    s.digest = d.digest;
    // The saved figures' font (figure_font.py): WOFF bytes in the same Arrow blob, when the host sent one.
    // Its family and licence ride in the column's metadata; the notebook's host sends no such column.
    const field = d.att.schema && d.att.schema.fields ? d.att.schema.fields.find(f => f.name === "font") : null;
    const meta = field && field.metadata ? field.metadata : new Map();
    s.font = field ? d.att.getChild("font").get(0) : null;
    s.fontInfo = { family: meta.get("family") || "DejaVu Sans", licence: meta.get("licence") || "" };
    s.fontFace = null;
    s.box.dataset.font = s.font ? s.fontInfo.family : "";  // the saved figures embed it (else: the font stack)
    s.pending.clear();
    s.pinQ = s.pinQ !== null && s.pinQ < d.T ? s.pinQ : null;
    buildStrip(s);
  }
  s.layer = layer;
  s.on = lutFor(d.colours.on);
  s.offLut = lutFor(d.colours.off);
  legend(s);
  s.off = new Set(d.off.map(([l, h]) => l + "," + h));
  s.pending.clear();
  buildTabs(s);
  buildControls(s);
  buildHeads(s);
  if (fresh) s.labelsFor = null;  // new tokens: the tiles' labels are drawn again
  layoutGrid(s);
  drawLayer(s);
  if (s.focus) openFocus(s, s.focus[0], s.focus[1]);
}
