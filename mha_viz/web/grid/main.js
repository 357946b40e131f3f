// The entry: the state a grid keeps across updates, and an update applied (the layers it carries inflated, then
// drawn). Each concern is its own module; mha_viz/web/__init__.py bundles them from this one for both hosts.
//
// The layer grid, drawn in the browser: every head of every layer is held in the page as uint8 codes, so hovering
// a token, opening a head large, changing the contrast and saving a picture never ask the server. A head switched
// on or off (that needs the model) and a layer tab (the page's one layer state: heading, bulk switches, other views
// and the URL follow it) are trigger events; the tab is drawn at once, before the server answers.
//
// data = {digest, text, digests[L], tokens[T], L, H, T, att: Arrow table, one binary column "z<l>" per layer it
//         carries (layers.js), scale[L*H], off: [[l, h]...], layer, cols, badges: {"l,h": text} (every head's, or
//         the layer on screen's: the rest come in the second message below), shared,
//         names: {layers: ["L0", ...], heads: [["L0 H0", ...], ...]}, unknown: [positions],
//         colours: {on: [stops], off: [stops], heads: [one per head], head_off, paper, ink, label, frame, mark},
//         lines_up_to}   (names and colours come from Python, mha_viz/names.py and mha_viz/web/palette.py: one
//         spelling, one palette; digest: the run's codes, text: the tokens and shape, digests: each layer's codes)
//        att may hold a binary column "font": the saved figures' WOFF, family and licence in its metadata, kept
//         under the digest `font` (layers.js): a message sends it where the page does not hold it
//        optional: rest: [layers] a second message brings ({digest, digests, att, badges}: the Streamlit page's
//         grid_rest.js hands it to layers.js), which the first drawing does not wait for; a first message sent
//         while the run still computes names the layers not yet known by null digests, and the second completes
//         it ({completes: its digest, scale}: layers.js, completed)
//        optional: steps: {from, lit, tokens, chosen, top} (a continuation's steps, written.js: the step on screen's
//         row lit in every head, its top-5 in the info line; hovering a written token shows the same)
//        optional: controls: {bulk: true, link: true} (the Streamlit page): the layer's heading and its bulk
//         switches are drawn here, so every layer control shows the one layer at once, and a tab writes the
//         link's `layer` itself (the server's next run writes the same value)
// The host (the Streamlit component, or the notebook widget's wrapper) receives the triggers "toggle" and "layer"
// (and "bulk": {layer, action: "off" | "on" | "only" | "reset", head}, with controls.bulk; "resend": [layers],
// when the page lacks layers that no message brings: a message it never saw).
import { CONTRASTS, DEFAULT_CONTRAST, legend, lutFor } from "./colour.js";
import { buildControls } from "./controls.js";
import { el } from "./dom.js";
import { base64, save } from "./export.js";
import { drawFocus, openFocus } from "./focus.js";
import { buildHeads, buildStrip, drawBadges, drawLayer, layoutGrid } from "./heads.js";
import { HINT, hover } from "./hover.js";
import { completed, fontOf, gather, receive, waitFor } from "./layers.js";
import { showDraw } from "./lines.js";
import { buildTabs, layerFor } from "./tabs.js";

// Everything of an update the grid draws from, but the weights (their digest), the layer and the captions: a run's
// captions are the same in every message (the page sends the layer on screen's with it, and every layer's apart).
function drawnAs(d) {
  const { att, layer, rest, badges, ...drawn } = d;
  return JSON.stringify(drawn);
}

// The rows: Q queries labelled qtokens, where they are not the T keys (cross-attention: the target's tokens reading
// the source's); by default the keys themselves.
function withRows(d) {
  if (!d.Q) { d.Q = d.T; d.qtokens = d.tokens; }
  return d;
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
  // Updates apply in arrival order; one that a newer update overtook while its bytes were inflating is skipped
  // (its layers are kept all the same: the next message does not carry them again).
  s.latest = withRows(data);
  const received = receive(data);
  s.chain = s.chain.then(() => update(s, data, received)).catch(err => failed(s, err));
}

function failed(s, err) {
  s.info.textContent = typeof DecompressionStream === "undefined"
    ? "This browser cannot unpack the heads' weights (it has no DecompressionStream): use Chrome 80, Firefox 113, "
      + "Safari 16.4 or later."
    : "Could not draw the heads: " + err;
}

function build(root, setTrigger) {
  const s = { root, setTrigger, chain: Promise.resolve(), latest: null, digest: null, text: null, layer: 0,
              fontEntry: undefined,
              askedLayer: null, localLayer: null, tells: 0, codes: [], waiting: [], asked: null,
              hoverQ: null, pinQ: null, focus: null, zoom: 1, pending: new Set() };
  // Layers another message brings, in: gathered again, and drawn where they are the ones on screen.
  s.arrived = () => { s.chain = s.chain.then(() => arrived(s)).catch(err => failed(s, err)); };
  // The run of an early first message completed by the second (layers.js, completed). Drawn already: it takes the
  // run's names and draws nothing again (what it lacked is drawn as it comes in, `arrived`); else an update of its
  // own, which overtakes the early one still inflating.
  s.complete = (early) => {
    const d = s.latest;
    if (!d || d.digest !== early) return;
    const c = completed(d);
    s.latest = c;
    if (s.d === d) {
      s.d = c;
      s.digest = c.digest;
      s.drawn = drawnAs(c);
    } else {
      s.chain = s.chain.then(() => update(s, c, Promise.resolve())).catch(err => failed(s, err));
    }
  };
  // Captions another message brought for the run on screen (layers.js, deposit).
  document.addEventListener("mhv-badges", (e) => { if (s.d && s.d.digest === e.detail) drawBadges(s); });
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
  // What the grid draws from, for browser tests: each layer's codes (null where still on its way) and digests.
  box.mhvDrawnFrom = () => ({ layer: s.layer, digests: s.d ? s.d.digests : [], waiting: [...s.waiting],
                              codes: s.codes.map(c => (c ? base64(c) : null)) });
  // Column count follows the width the page gives us, and the text length (`cols`).
  s.resize = new ResizeObserver(() => layoutGrid(s));
  s.resize.observe(box);
  return s;
}

// The layers of `d` the page holds, as s.codes; those still missing are waited for when a second message brings
// them (d.rest), else asked of the host once per update.
async function collect(s, d) {
  const { codes, missing, inflating } = await gather(d);
  s.codes = codes;
  s.waiting = missing;
  waitFor(s, missing.length > 0);
  const coming = new Set([...(d.rest || []), ...inflating]), lost = missing.filter(l => !coming.has(l));
  if (lost.length && s.asked !== d) {
    s.asked = d;
    s.setTrigger("resend", lost);
  }
}

async function arrived(s) {
  const d = s.d;
  if (!d || !s.waiting.length || d !== s.latest) return;
  const was = s.codes[s.layer];
  await collect(s, d);
  if (d !== s.latest) return;
  if (!was && s.codes[s.layer]) {
    drawLayer(s);
    if (s.focus) drawFocus(s);
  }
}

async function update(s, d, received) {
  await received;
  if (d !== s.latest) return;
  const c = completed(d);  // an early first message whose completion came first
  if (c !== d) {
    s.latest = c;
    d = c;
  }
  const fresh = d.digest !== s.digest, newText = d.text !== s.text;
  if (fresh) await collect(s, d);
  if (d !== s.latest) return;
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
  s.digest = d.digest;
  // The saved figures' font (figure_font.py), kept by the page once a message brought it (layers.js); the
  // notebook's host sends none.
  const font = fontOf(d.font);
  if (font !== s.fontEntry) {
    s.fontEntry = font;
    s.font = font ? font.bytes : null;
    s.fontInfo = { family: font ? font.family : "DejaVu Sans", licence: font ? font.licence : "" };
    s.fontFace = null;
    s.box.dataset.font = s.font ? s.fontInfo.family : "";  // the saved figures embed it (else: the font stack)
  }
  if (newText) {
    s.text = d.text;
    s.pinQ = s.pinQ !== null && s.pinQ < s.d.Q ? s.pinQ : null;
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
  if (newText) s.labelsFor = null;  // new tokens: the tiles' labels are drawn again
  layoutGrid(s);
  drawLayer(s);
  if (d.steps && s.hoverQ === null) hover(s, null, null, null);  // the step on screen's words in the info line
  if (s.focus) openFocus(s, s.focus[0], s.focus[1]);
}
