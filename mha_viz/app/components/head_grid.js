// The layer grid, drawn in the browser: every head of every layer arrives once as uint8 codes, so hovering a
// token, opening a head large, changing the contrast and saving a picture never ask the server. A head switched on
// or off (that needs the model) and a layer tab (the page's one layer state: heading, bulk switches, other views
// and the URL follow it) are trigger events; the tab is drawn at once, before the server answers.
//
// data = {digest, tokens[T], L, H, T, att: Arrow table whose one binary cell "z" is the zlib-deflated (L, H, T, T)
//         uint8 codes, scale[L*H], off: [[l, h]...], layer, cols, badges: {"l,h": text}, shared,
//         names: {layers: ["L0", ...], heads: [["L0 H0", ...], ...]}, unknown: [positions],
//         colours: {on: [stops], off: [stops]}}   (names and colours come from Python: one spelling, one scale)
//        att may hold a second binary column "font": the saved figures' WOFF, family and licence in its metadata
//        optional: controls: {bulk: true, link: true} (the Streamlit page): the layer's heading and its bulk
//         switches are drawn here, so every layer control shows the one layer at once, and a tab writes the
//         link's `layer` itself (the server's next run writes the same value)
// The host (the Streamlit component, or the notebook widget's wrapper) receives the triggers "toggle" and "layer"
// (and "bulk": {layer, action: "off" | "on" | "only" | "reset", head}, with controls.bulk).
// weight of cell (l, h, q, k) = codes[((l*H + h)*T + q)*T + k] / 255 * scale[l*H + h]
const HINT = "Hover a heatmap or a token: its row lights up in every head. Click a head to open it large.";
const MIN_CELL = 3;       // px per token in a grid tile: below this the columns of the grid fold into fewer
const LABEL_CELL = 14;    // px per token in the focused head: room for an 11 px label on every row and column
const FOCUS_MAX_CELL = 30;
const LABEL_FONT = "11px monospace";
// Token labels on the grid's small heatmaps: a font of TILE_FONT_MIN..TILE_FONT_MAX px, every k-th token where a
// row is thinner than the font (never overlapping, never smaller than TILE_FONT_MIN), in a gutter of at most
// TILE_GUTTER of the tile's width; none when that gutter is too narrow to hold a few characters.
const TILE_FONT_MIN = 8, TILE_FONT_MAX = 11, TILE_GUTTER = 0.28, TILE_GUTTER_MAX = 64, TILE_GUTTER_MIN = 22;

// Which tokens get a label on an axis of `n` rows `cell` px tall: the font size and the step between labels
// (every label at least font + 1 px from the next). Shared by the tiles, the enlarged head and the saved figure.
function labelPlan(cell, n, maxFont = TILE_FONT_MAX, minFont = TILE_FONT_MIN) {
  const font = Math.max(minFont, Math.min(maxFont, Math.floor(cell - 1)));
  const step = Math.max(1, Math.ceil((font + 1) / cell));
  return { font, step, shown: Math.ceil(n / step) };
}

// A label cut to `room` px at the context's font, with an ellipsis when it was cut.
function fitText(ctx, text, room) {
  if (ctx.measureText(text).width <= room) return text;
  let n = text.length;
  while (n > 1 && ctx.measureText(text.slice(0, n) + "…").width > room) n--;
  return text.slice(0, n) + "…";
}

function lut(colors) {  // 256 RGBA entries interpolated along the colour stops
  const rgb = colors.map(c => [1, 3, 5].map(i => parseInt(c.slice(i, i + 2), 16)));
  const out = new Uint8ClampedArray(256 * 4);
  for (let v = 0; v < 256; v++) {
    const x = v / 255 * (rgb.length - 1), i = Math.min(Math.floor(x), rgb.length - 2), f = x - i;
    for (let c = 0; c < 3; c++) out[v * 4 + c] = rgb[i][c] + (rgb[i + 1][c] - rgb[i][c]) * f;
    out[v * 4 + 3] = 255;
  }
  return out;
}
const LUTS = new Map();  // colour stops -> their LUT
function lutFor(colors) {
  const key = colors.join();
  if (!LUTS.has(key)) LUTS.set(key, lut(colors));
  return LUTS.get(key);
}

// Contrast: how a weight (as a share of the head's maximum, or of 1 on the shared scale) maps to colour. One
// outlier cell (a sink column) sets a head's maximum and leaves the rest near white under a linear map.
const CONTRASTS = {
  sqrt: { label: "√ square root", f: x => Math.sqrt(x) },
  linear: { label: "linear", f: x => x },
  log: { label: "log (1 + 99x)", f: x => Math.log1p(99 * x) / Math.log(100) },
  row: { label: "each row to its max", f: x => x },
};
const DEFAULT_CONTRAST = "sqrt";
const REMAPS = new Map();
function remap(name) {  // 256 codes -> 256 colour indices under a contrast
  if (!REMAPS.has(name)) {
    const out = new Uint8Array(256), f = CONTRASTS[name].f;
    for (let v = 0; v < 256; v++) out[v] = Math.round(Math.min(1, Math.max(0, f(v / 255))) * 255);
    REMAPS.set(name, out);
  }
  return REMAPS.get(name);
}

async function decode(att) {  // the Arrow cell's deflated bytes -> the codes, inflated natively by the browser
  const z = att.getChild("z").get(0);
  const stream = new Blob([z]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
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
  s.chain = s.chain.then(() => update(s, data)).catch((err) => {
    s.info.textContent = typeof DecompressionStream === "undefined"
      ? "This browser cannot unpack the heads' weights (it has no DecompressionStream): use Chrome 80, Firefox 113, "
        + "Safari 16.4 or later."
      : "Could not draw the heads: " + err;
  });
}

function build(root, setTrigger) {
  const s = { root, setTrigger, chain: Promise.resolve(), latest: null, digest: null, layer: 0, askedLayer: null,
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
    const codes = await decode(d.att);
    if (d !== s.latest) return;
    s.codes = codes;
  }
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
  // The page's layer is the one state; a tab clicked here is asked of the server and shown at once, so an answer
  // still on its way from before that click does not take the grid back.
  if (s.askedLayer === null || d.layer === s.askedLayer) {
    s.askedLayer = null;
    s.layer = Math.min(d.layer, d.L - 1);
  }
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

// The layer's heading and its bulk switches (the Streamlit page only: controls.bulk). They act on the layer shown,
// which travels with each request, so a switch never reaches heads that are not on screen.
function buildControls(s) {
  const d = s.d, want = !!(d.controls && d.controls.bulk);
  s.controls.hidden = !want;
  if (!want) return;
  if (!s.heading || s.controlsH !== d.H) {
    s.controls.replaceChildren();
    s.controlsH = d.H;
    s.heading = el("p", "mhv-heading");
    s.heading.setAttribute("data-testid", "mhv-heading");
    const button = (text, action, help) => {
      const b = el("button", "mhv-btn mhv-bulk", text);
      b.dataset.action = action;
      b.addEventListener("click", () => bulk(s, action, null));
      b.helpText = help;
      return b;
    };
    s.bulkOff = button("All off", "off", "Switch every head of ");
    s.bulkOn = button("All on", "on", "Switch every head of ");
    s.only = el("select", "mhv-select mhv-only");
    s.only.setAttribute("data-testid", "mhv-only");
    s.only.setAttribute("aria-label", "Only this head on");
    s.only.append(el("option", null, "Only one on…"));
    for (let h = 0; h < d.H; h++) {
      const o = el("option", null, "H" + h);
      o.value = String(h);
      s.only.append(o);
    }
    s.only.addEventListener("change", () => {
      const h = Number(s.only.value);
      s.only.selectedIndex = 0;
      if (Number.isInteger(h)) bulk(s, "only", h);
    });
    const reset = button("Reset", "reset", "");
    reset.title = "Every head of every layer on.";
    s.controls.append(s.heading, s.bulkOff, s.bulkOn, s.only, reset);
  }
  headingFor(s);
}

function headingFor(s) {
  if (!s.heading || s.controls.hidden) return;
  const d = s.d, name = d.names.layers[s.layer];
  s.heading.replaceChildren(el("strong", null, `Layer ${s.layer}: all ${d.H} heads`));
  s.heading.dataset.layer = s.layer;
  s.bulkOff.title = `Switch every head of ${name} off.`;
  s.bulkOn.title = `Switch every head of ${name} on.`;
  s.only.title = `Switch off every other head of ${name}.`;
}

function bulk(s, action, head) {
  const d = s.d, l = s.layer;
  for (let h = 0; h < d.H; h++) {
    const key = l + "," + h, off = s.off.has(key);
    const changes = action === "off" ? !off : action === "on" ? off : action === "only" ? off === (h === head) : off;
    if (changes || action === "reset") { s.pending.add(key); s.heads[h].cell.classList.add("mhv-pending"); }
  }
  s.setTrigger("bulk", { layer: l, action, head });
}

// The link's `layer`, written at once (the server's next run writes the same link: one value, never two).
function linkLayer(s, l) {
  if (!(s.d.controls && s.d.controls.link)) return;
  try {
    const url = new URL(window.location.href);
    if (url.searchParams.get("layer") === String(l)) return;
    url.searchParams.set("layer", String(l));
    window.history.replaceState(window.history.state, "", url.toString());
  } catch (err) { /* a page without a writable history (a sandboxed frame) keeps the server's link */ }
}

function buildTabs(s) {
  const d = s.d;
  if (s.tabs.childElementCount !== d.L) {
    s.tabs.replaceChildren();
    for (let l = 0; l < d.L; l++) {
      const b = el("button", "mhv-tab", d.names.layers[l]);
      b.setAttribute("role", "tab");
      b.dataset.layer = l;
      b.title = "Show layer " + l + " (the other views and the link follow)";
      b.addEventListener("click", () => setLayer(s, l));
      s.tabs.append(b);
    }
  }
  [...s.tabs.children].forEach((b, l) => b.setAttribute("aria-selected", String(l === s.layer)));
}

function setLayer(s, l) {
  if (l === s.layer) return;
  s.layer = l;
  [...s.tabs.children].forEach((b, i) => b.setAttribute("aria-selected", String(i === l)));
  drawLayer(s);
  if (s.focus) openFocus(s, l, s.focus[1]);
  linkLayer(s, l);
  s.askedLayer = l;
  s.setTrigger("layer", l);  // the page's layer state: the sidebar's summary and the other views follow
}

function buildStrip(s) {
  const d = s.d;
  s.strip.replaceChildren();
  d.tokens.forEach((t, i) => {
    const chip = el("span", "mhv-tok" + (d.unknown.includes(i) ? " mhv-tok-unk" : ""), t);
    chip.dataset.q = i;
    chip.title = "position " + i + ": hover to light this query's row in every head, click to keep it";
    chip.addEventListener("mouseenter", () => hover(s, i, null, null));
    chip.addEventListener("mouseleave", () => hover(s, null, null, null));
    chip.addEventListener("click", () => { s.pinQ = s.pinQ === i ? null : i; paintRows(s); });
    s.strip.append(chip);
  });
}

function buildHeads(s) {
  const d = s.d;
  if (!s.heads || s.heads.length !== d.H || s.headsT !== d.T) {
    s.grid.replaceChildren();
    s.heads = [];
    s.headsT = d.T;
    for (let h = 0; h < d.H; h++) {
      const cell = el("div", "mhv-head");
      const top = el("div", "mhv-top");
      const title = el("span", "mhv-title");
      const sw = el("button", "mhv-switch");
      sw.setAttribute("role", "switch");
      sw.addEventListener("click", (ev) => { ev.stopPropagation(); toggle(s, h); });
      top.append(title, sw);
      // The heatmap first (tests and benchmarks find it as the head's first canvas), then its token labels:
      // queries on the left, keys on top, placed by the wrap's grid areas.
      const wrap = el("div", "mhv-wrap");
      const heat = el("div", "mhv-heat");
      const canvas = el("canvas", "mhv-canvas");
      canvas.width = d.T;
      canvas.height = d.T;
      const row = el("div", "mhv-row");
      row.hidden = true;
      heat.append(canvas, row);
      // Label strips are divs showing one shared picture (drawn once per width and text), not canvases: a head's
      // only canvas is its heatmap.
      const qLabels = el("div", "mhv-labels mhv-labels-q"), kLabels = el("div", "mhv-labels mhv-labels-k");
      qLabels.hidden = kLabels.hidden = true;
      wrap.append(heat, qLabels, kLabels);
      const badge = el("div", "mhv-badge");
      cell.append(top, wrap, badge);
      s.grid.append(cell);
      wrap.addEventListener("mousemove", (ev) => {
        const r = canvas.getBoundingClientRect();
        const q = Math.floor((ev.clientY - r.top) / r.height * d.T), k = Math.floor((ev.clientX - r.left) / r.width * d.T);
        if (q >= 0 && q < d.T && k >= 0 && k < d.T) hover(s, q, k, h);
      });
      wrap.addEventListener("mouseleave", () => hover(s, null, null, null));
      wrap.addEventListener("click", () => openFocus(s, s.layer, h));
      s.heads.push({ cell, title, sw, canvas, ctx: canvas.getContext("2d"), row, badge, wrap, qLabels, kLabels,
                     img: new ImageData(d.T, d.T) });
    }
    s.labelsFor = null;
  }
}

function layoutGrid(s) {
  const d = s.d;
  if (!d) return;
  const width = s.box.clientWidth || 800;
  // The user's "heatmaps per row", but never so many that a token is less than MIN_CELL px wide.
  const fit = Math.max(1, Math.floor((width + 12) / (d.T * MIN_CELL + 12)));
  s.cols = Math.max(1, Math.min(d.cols, fit, d.H));
  s.grid.style.gridTemplateColumns = `repeat(${s.cols}, minmax(0, 1fr))`;
  s.grid.dataset.cols = s.cols;
  const asked = Math.min(d.cols, d.H);
  s.note.textContent = s.cols < asked
    ? `${s.cols} per row, not ${asked}: at ${d.T} tokens a heatmap needs ${d.T * MIN_CELL} px to give each token ${MIN_CELL} px`
    : "";
  tileLabels(s);
}

// The small heatmaps' token labels, for the tile width the grid gives: every token when a row is at least
// TILE_FONT_MIN + 1 px tall, every k-th otherwise; none when the gutter could not hold a few characters.
function tileLabels(s) {
  const d = s.d;
  if (!s.heads || !s.heads.length) return;
  const tile = s.heads[0].cell.clientWidth;
  if (!tile) return;
  const probe = (s.probe = s.probe || document.createElement("canvas").getContext("2d"));
  const cap = Math.min(TILE_GUTTER_MAX, Math.floor(tile * TILE_GUTTER));
  let gutter = cap, plan = labelPlan((tile - gutter) / d.T, d.T), longest = 0;
  for (let pass = 0; pass < 2; pass++) {  // the font depends on the gutter, the gutter on the font's widest label
    probe.font = `${plan.font}px monospace`;
    longest = 0;
    for (const t of d.tokens) longest = Math.max(longest, probe.measureText(t).width);
    gutter = Math.min(cap, Math.ceil(longest) + 8);
    plan = labelPlan((tile - gutter) / d.T, d.T);
  }
  const show = gutter >= TILE_GUTTER_MIN || longest + 4 <= gutter;
  const key = [tile, d.digest, show].join();
  if (s.labelsFor === key) return;
  s.labelsFor = key;
  const heat = tile - (show ? gutter : 0), cell = heat / d.T, dpr = window.devicePixelRatio || 1;
  s.grid.dataset.labelStep = show ? String(plan.step) : "";
  s.grid.dataset.labelFont = show ? String(plan.font) : "";
  s.grid.dataset.labelCell = cell.toFixed(2);
  s.grid.dataset.labelGutter = show ? String(gutter) : "";
  const pictures = {};
  if (show) {
    for (const side of ["q", "k"]) {
      const w = side === "q" ? gutter : heat, h = side === "q" ? heat : gutter;
      const c = document.createElement("canvas");
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
      const ctx = c.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.font = `${plan.font}px monospace`;
      ctx.fillStyle = "#444";
      ctx.textBaseline = "middle";
      // A label is centred on its row, but held inside the picture by its own measured height: on rows thinner
      // than the font, the first and last labels would otherwise be cut in half at its edge ("[CLS]" at the top).
      // Turned upright (keys), the same ascent and descent lie left and right of the anchor.
      const at = (i, text) => {
        const m = ctx.measureText(text);
        const up = m.actualBoundingBoxAscent + 1, down = m.actualBoundingBoxDescent + 1;
        return Math.min(heat - down, Math.max(up, (i + 0.5) * cell));
      };
      for (let i = 0; i < d.T; i += plan.step) {
        const text = fitText(ctx, d.tokens[i], gutter - 5);
        if (side === "q") {
          ctx.textAlign = "right";
          ctx.fillText(text, gutter - 2, at(i, text));
        } else {
          ctx.save();
          ctx.translate(at(i, text), gutter - 2);
          ctx.rotate(-Math.PI / 2);
          ctx.textAlign = "left";
          ctx.fillText(text, 0, 0);
          ctx.restore();
        }
      }
      pictures[side] = { url: `url(${c.toDataURL("image/png")})`, w, h };
    }
  }
  for (const head of s.heads) {
    head.wrap.style.gridTemplateColumns = show ? `${gutter}px minmax(0, 1fr)` : "minmax(0, 1fr)";
    head.wrap.style.gridTemplateRows = show ? `${gutter}px auto` : "auto";
    head.wrap.classList.toggle("mhv-labelled", show);
    head.qLabels.hidden = head.kLabels.hidden = !show;
    if (!show) continue;
    for (const [div, side] of [[head.qLabels, "q"], [head.kLabels, "k"]]) {
      const p = pictures[side];
      div.style.width = p.w + "px"; div.style.height = p.h + "px";
      div.style.backgroundImage = p.url;
      div.dataset.labels = String(plan.shown);
    }
  }
}

function headName(s, l, h) { return s.d.names.heads[l][h]; }

// The colours a head is drawn with: code -> RGBA index, under the contrast (row: each row to its own maximum).
function paint(s, px, base, T, off) {
  const lutc = off ? s.offLut : s.on, map = remap(s.contrast === "row" ? "linear" : s.contrast);
  for (let q = 0; q < T; q++) {
    let top = 255;
    if (s.contrast === "row") {
      top = 1;
      for (let k = 0; k < T; k++) top = Math.max(top, s.codes[base + q * T + k]);
    }
    for (let k = 0; k < T; k++) {
      const i = q * T + k, j = map[Math.min(255, Math.round(s.codes[base + i] * 255 / top))] * 4, o = i * 4;
      px[o] = lutc[j]; px[o + 1] = lutc[j + 1]; px[o + 2] = lutc[j + 2]; px[o + 3] = 255;
    }
  }
}

function legend(s) {
  const d = s.d, stops = d.colours.on;
  const top = s.contrast === "row" ? "its row's max" : d.shared ? "1" : "the head's max";
  s.legend.replaceChildren();
  const bar = el("span", "mhv-legend-bar");
  bar.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  s.legend.append(el("span", null, "0"), bar, el("span", null, top));
  s.legend.title = `Colour: attention weight from 0 (white) to ${top} (dark), ${CONTRASTS[s.contrast].label}. `
    + "Rows are queries (↓), columns keys (→); grey heads are off. Hover a cell for its weight.";
}

function drawLayer(s) {
  const d = s.d, T = d.T, l = s.layer, n = T * T;
  for (let h = 0; h < d.H; h++) {
    const head = s.heads[h], off = s.off.has(l + "," + h);
    paint(s, head.img.data, (l * d.H + h) * n, T, off);
    head.ctx.putImageData(head.img, 0, 0);
    const name = headName(s, l, h);
    const pending = s.pending.has(l + "," + h);
    head.title.textContent = name + (off ? " (off)" : "");
    head.cell.dataset.head = name;
    head.cell.classList.toggle("mhv-off", off);
    head.cell.classList.toggle("mhv-pending", pending);
    head.sw.setAttribute("aria-checked", String(!off));
    head.sw.setAttribute("aria-label", name);
    head.sw.title = off ? "Off: its output is replaced (by 0, or by its mean: the sidebar's 'Switching a head off'). "
                          + "Click to switch it on."
                        : "On: the head contributes. Click to switch it off (the model reruns).";
    head.badge.textContent = d.badges[l + "," + h] || "";
  }
  s.grid.dataset.layer = l;
  headingFor(s);
  legend(s);
  paintRows(s);
  showDraw(s);
}

function toggle(s, h) {
  const l = s.layer, key = l + "," + h;
  s.pending.add(key);
  s.heads[h].cell.classList.add("mhv-pending");
  s.setTrigger("toggle", { layer: l, head: h, on: s.off.has(key) });
}

function weight(s, l, h, q, k) {
  const d = s.d;
  return s.codes[((l * d.H + h) * d.T + q) * d.T + k] / 255 * d.scale[l * d.H + h];
}

function hover(s, q, k, h) {
  s.hoverQ = q;
  const d = s.d;
  if (q === null) {
    s.info.textContent = s.pinQ !== null ? `query ${JSON.stringify(d.tokens[s.pinQ])} (${s.pinQ}) kept: click it again to let go`
                                         : HINT;
  } else if (k === null) {
    s.info.textContent = `query ${JSON.stringify(d.tokens[q])} (${q}): its row is outlined in every head of L${s.layer}`;
  } else {
    s.info.textContent = `${headName(s, s.layer, h)} · query ${JSON.stringify(d.tokens[q])} (${q}) → key ` +
                         `${JSON.stringify(d.tokens[k])} (${k}): ${weight(s, s.layer, h, q, k).toFixed(3)}`;
  }
  paintRows(s);
}

function paintRows(s) {
  const d = s.d, q = s.hoverQ !== null ? s.hoverQ : s.pinQ;
  for (const head of s.heads) {
    if (q === null) { head.row.hidden = true; continue; }
    head.row.hidden = false;
    head.row.style.top = (q / d.T * 100) + "%";
    head.row.style.height = Math.max(100 / d.T, 0.8) + "%";
  }
  s.grid.dataset.row = q === null ? "" : String(q);
  for (const chip of s.strip.children) chip.classList.toggle("mhv-tok-on", Number(chip.dataset.q) === q);
  if (s.focus) drawFocus(s);
}

// -- one head large: every token labelled, zoom and pan ----------------------------------------------------------
function openFocus(s, l, h) {
  s.focus = [l, h];
  const f = s.focusBox;
  if (!s.focusCanvas) {
    const top = el("div", "mhv-top");
    s.focusTitle = el("span", "mhv-title mhv-focus-title");
    const zin = el("button", "mhv-btn", "+"), zout = el("button", "mhv-btn", "−"), fit = el("button", "mhv-btn", "fit");
    const close = el("button", "mhv-btn", "close");
    zin.title = "Zoom in"; zout.title = "Zoom out"; fit.title = "Back to the size where every label is readable";
    zin.addEventListener("click", () => { s.zoom = Math.min(s.zoom * 1.5, 8); drawFocus(s); });
    zout.addEventListener("click", () => { s.zoom = Math.max(s.zoom / 1.5, 0.25); drawFocus(s); });
    fit.addEventListener("click", () => { s.zoom = 1; drawFocus(s); });
    close.addEventListener("click", () => { s.focus = null; f.hidden = true; });
    top.append(s.focusTitle, zin, zout, fit, close);
    s.focusScroll = el("div", "mhv-focus-scroll");
    s.focusCanvas = el("canvas", "mhv-focus-canvas");
    s.focusScroll.append(s.focusCanvas);
    f.append(top, s.focusScroll);
    // Drag to pan (the box also scrolls with the wheel / trackpad).
    let drag = null;
    s.focusScroll.addEventListener("pointerdown", (e) => { drag = [e.clientX, e.clientY, s.focusScroll.scrollLeft, s.focusScroll.scrollTop]; });
    window.addEventListener("pointerup", () => { drag = null; });
    s.focusScroll.addEventListener("pointermove", (e) => {
      if (drag) { s.focusScroll.scrollLeft = drag[2] - (e.clientX - drag[0]); s.focusScroll.scrollTop = drag[3] - (e.clientY - drag[1]); return; }
      const g = s.focusGeom, r = s.focusCanvas.getBoundingClientRect();
      if (!g) return;
      const k = Math.floor((e.clientX - r.left - g.lw) / g.cell), q = Math.floor((e.clientY - r.top - g.lh) / g.cell);
      if (q >= 0 && q < s.d.T && k >= 0 && k < s.d.T) hover(s, q, k, s.focus[1]);
    });
    s.focusScroll.addEventListener("mouseleave", () => hover(s, null, null, null));
  }
  f.hidden = false;
  drawFocus(s);
}

function drawFocus(s) {
  const d = s.d, [l, h] = s.focus, T = d.T, off = s.off.has(l + "," + h);
  s.focusTitle.textContent = headName(s, l, h) + (off ? " (off)" : "");
  const c = s.focusCanvas, ctx = c.getContext("2d");
  ctx.font = LABEL_FONT;
  let longest = 0;
  for (const t of d.tokens) longest = Math.max(longest, ctx.measureText(t).width);
  const room = Math.ceil(Math.min(longest, 160)) + 8;
  const avail = Math.max(200, (s.box.clientWidth || 800) - room - 24);
  // Fit the width, but no larger than FOCUS_MAX_CELL (a short sentence need not fill the screen) and never
  // smaller than LABEL_CELL (a long one scrolls instead: drag or scroll to pan, + and − to zoom).
  const cell = Math.max(4, Math.round(Math.max(LABEL_CELL, Math.min(FOCUS_MAX_CELL, Math.floor(avail / T))) * s.zoom));
  c.width = room + T * cell;
  c.height = room + T * cell;
  s.focusGeom = { lw: room, lh: room, cell };
  c.dataset.cell = cell;
  const img = new ImageData(T, T);
  paint(s, img.data, (l * d.H + h) * T * T, T, off);
  const tmp = document.createElement("canvas");
  tmp.width = T; tmp.height = T;
  tmp.getContext("2d").putImageData(img, 0, 0);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, c.width, c.height);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, room, room, T * cell, T * cell);
  // Always labelled: every token from 12 px rows up, else every k-th at 8-11 px (zoom in to read them all).
  const plan = labelPlan(cell, T);
  ctx.font = `${plan.font}px monospace`;
  ctx.fillStyle = "#222";
  ctx.textBaseline = "middle";
  c.dataset.labelStep = plan.step;
  c.dataset.labelFont = plan.font;
  for (let i = 0; i < T; i += plan.step) {
    const t = fitText(ctx, d.tokens[i], room - 6);
    ctx.textAlign = "right";
    ctx.fillText(t, room - 4, room + (i + 0.5) * cell, room - 6);  // queries, left
    ctx.save();
    ctx.translate(room + (i + 0.5) * cell, room - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(t, 0, 0, room - 6);  // keys, on top
    ctx.restore();
  }
  const q = s.hoverQ !== null ? s.hoverQ : s.pinQ;
  if (q !== null) {
    ctx.strokeStyle = "#d62728";
    ctx.lineWidth = 2;
    ctx.strokeRect(room, room + q * cell, T * cell, cell);
  }
}

// -- Save: this layer's heads as SVG (vector labels, legend and cells; cells as an embedded image above 64 tokens)
// or PNG (the same drawing at 2x). Drawn from one list of shapes, so both files show the same thing.
const SAVE_VECTOR_UP_TO = 64;

// One family for every word of a saved figure: the embedded DejaVu Sans when the page sent it (the SVG's @font-face,
// the PNG's FontFace), else the first of a generic stack that the viewer has.
const FIG_STACK = "'DejaVu Sans', 'Helvetica Neue', Helvetica, Arial, sans-serif";
const FIG_CANVAS_FAMILY = "mhv-figure";  // the embedded face under its own name, so no system font stands in for it
const FIG_LABEL_MAX = 9, FIG_LABEL_MIN = 8, FIG_GUTTER_MAX = 70;

function figure(s) {
  const d = s.d, T = d.T, l = s.layer, cols = s.cols || Math.min(d.cols, d.H);
  const tile = Math.max(160, Math.min(320, T * 12)), cell = tile / T;
  // Every figure is labelled: every token when a row holds a 9 px label, else every k-th (8-9 px, never overlapping).
  const plan = labelPlan(cell, T, FIG_LABEL_MAX, FIG_LABEL_MIN);
  const probe = document.createElement("canvas").getContext("2d");
  probe.font = `${plan.font}px ${FIG_STACK}`;
  let longest = 0;
  const shown = [];
  for (let i = 0; i < T; i += plan.step) shown.push(i);
  for (const i of shown) longest = Math.max(longest, probe.measureText(d.tokens[i]).width);
  const gutter = Math.min(FIG_GUTTER_MAX, Math.ceil(longest) + 8), top = 58, titleH = 18, pad = 16;
  const width = pad * 2 + cols * (gutter + tile + pad), rows = Math.ceil(d.H / cols);
  const height = top + rows * (titleH + gutter + tile + pad) + 20;
  const ops = [{ rect: [0, 0, width, height, "#ffffff"] }];
  const offNames = [];
  for (let h = 0; h < d.H; h++) if (s.off.has(l + "," + h)) offNames.push(headName(s, l, h));
  const scaleWords = s.contrast === "row" ? "each row to its maximum" : d.shared ? "0 to 1, shared" : "0 to each head's maximum";
  ops.push({ text: [pad, 20, `${d.names.layers[l]}: ${d.H} heads, ${T} tokens`, 15, "start", "title"] });
  ops.push({ text: [pad, 38, `Colour: attention weight, ${scaleWords}, ${CONTRASTS[s.contrast].label}. `
    + `Rows: queries ↓, columns: keys →. Off (grey): ${offNames.join(", ") || "none"}.`
    + (plan.step > 1 ? ` Every ${plan.step}th token labelled.` : ""), 11, "start", "caption"] });
  const stops = d.colours.on, lx = width - pad - 160 - 48;  // room for "row max" after the bar
  ops.push({ group: "legend" });
  stops.forEach((c, i) => ops.push({ rect: [lx + i * 160 / stops.length, 44, 160 / stops.length + 0.5, 8, c] }));
  ops.push({ text: [lx - 4, 52, "0", 10, "end", "legend"] });
  ops.push({ text: [lx + 164, 52, s.contrast === "row" ? "row max" : d.shared ? "1" : "max", 10, "start", "legend"] });
  ops.push({ end: true });
  for (let h = 0; h < d.H; h++) {
    const r = Math.floor(h / cols), c = h % cols;
    const x0 = pad + c * (gutter + tile + pad) + gutter, y0 = top + r * (titleH + gutter + tile + pad);
    const off = s.off.has(l + "," + h), gy = y0 + titleH + gutter;
    ops.push({ text: [x0, y0 + 13, headName(s, l, h) + (off ? " (off)" : ""), 12, "start", off ? "head-name off" : "head-name"] });
    ops.push({ head: [h, off, x0, gy, tile] });
    ops.push({ stroke: [x0, gy, tile, tile] });
    for (const i of shown) {
      const t = fitText(probe, d.tokens[i], gutter - 6);
      ops.push({ text: [x0 - 3, gy + (i + 0.5) * cell + plan.font * 0.35, t, plan.font, "end", "token query"] });
      ops.push({ text: [x0 + (i + 0.5) * cell + plan.font * 0.35, gy - 3, t, plan.font, "start", "token key", -90] });
    }
  }
  return { ops, width, height, T, step: plan.step, offNames };
}

function headPixels(s, h, off) {
  const T = s.d.T, img = new ImageData(T, T);
  paint(s, img.data, (s.layer * s.d.H + h) * T * T, T, off);
  return img;
}

function esc(t) { return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;"); }

function base64(bytes) {
  let out = "";
  for (let i = 0; i < bytes.length; i += 0x8000) out += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(out);
}

function toSVG(s, f) {
  const d = s.d, mm = (px) => (px * 25.4 / 96).toFixed(1);
  const out = [`<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="${f.width}px" height="${f.height}px" `
    + `viewBox="0 0 ${f.width} ${f.height}" font-family="${FIG_STACK}" data-width-px="${f.width}" data-height-px="${f.height}">`,
    `<title>${esc(d.names.layers[s.layer])}: ${d.H} heads, ${d.T} tokens (mha-viz)</title>`,
    `<desc>${f.width} x ${f.height} px (${mm(f.width)} x ${mm(f.height)} mm at 96 px per inch). Heads off: `
    + `${esc(f.offNames.join(", ") || "none")}.</desc>`];
  if (s.font) {
    out.push(`<!-- Font: ${esc(s.fontInfo.licence)} -->`);
    out.push(`<defs><style>@font-face { font-family: "${s.fontInfo.family}"; font-weight: normal; font-style: normal; `
      + `src: url(data:font/woff;base64,${base64(s.font)}) format("woff"); }</style></defs>`);
  }
  for (const op of f.ops) {
    if (op.group) out.push(`<g class="${op.group}">`);
    if (op.end) out.push("</g>");
    if (op.rect) { const [x, y, w, h, c] = op.rect; out.push(`<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="${c}"/>`); }
    if (op.stroke) { const [x, y, w, h] = op.stroke; out.push(`<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="none" stroke="#cccccc"/>`); }
    if (op.text) {
      const [x, y, t, size, anchor, cls, rot = 0] = op.text;
      out.push(`<text class="${cls}" x="${x.toFixed(2)}" y="${y.toFixed(2)}" font-size="${size}" text-anchor="${anchor}" fill="#222222"`
        + (rot ? ` transform="rotate(${rot} ${x.toFixed(2)} ${y.toFixed(2)})"` : "") + `>${esc(t)}</text>`);
    }
    if (op.head) {
      const [h, off, x, y, tile] = op.head, img = headPixels(s, h, off), T = f.T, cell = tile / T;
      const attrs = `class="head" data-head="${esc(headName(s, s.layer, h))}" data-off="${off}"`;
      if (T <= SAVE_VECTOR_UP_TO) {
        out.push(`<g ${attrs}>`);
        for (let i = 0; i < T * T; i++) {
          const p = img.data.subarray(i * 4, i * 4 + 3);
          if (p[0] === 255 && p[1] === 255 && p[2] === 255) continue;  // the white background shows through
          const hex = "#" + [...p].map(v => v.toString(16).padStart(2, "0")).join("");
          out.push(`<rect x="${(x + (i % T) * cell).toFixed(2)}" y="${(y + Math.floor(i / T) * cell).toFixed(2)}" width="${cell.toFixed(2)}" height="${cell.toFixed(2)}" fill="${hex}"/>`);
        }
        out.push("</g>");
      } else {
        const c = document.createElement("canvas");
        c.width = T; c.height = T;
        c.getContext("2d").putImageData(img, 0, 0);
        out.push(`<image ${attrs} x="${x}" y="${y}" width="${tile}" height="${tile}" style="image-rendering:pixelated" href="${c.toDataURL("image/png")}"/>`);
      }
    }
  }
  out.push("</svg>");
  return out.join("\n");
}

// The embedded face for the PNG's canvas (loaded once per text's font), or null: the stack then.
async function figureFont(s) {
  if (!s.font || typeof FontFace === "undefined") return null;
  if (!s.fontFace) {
    try {
      const face = new FontFace(FIG_CANVAS_FAMILY, s.font.slice().buffer);
      await face.load();
      document.fonts.add(face);
      s.fontFace = face;
    } catch (err) { return null; }
  }
  return FIG_CANVAS_FAMILY;
}

function toCanvas(s, f, zoom, family) {
  const c = document.createElement("canvas");
  c.width = f.width * zoom; c.height = f.height * zoom;
  const ctx = c.getContext("2d");
  ctx.scale(zoom, zoom);
  for (const op of f.ops) {
    if (op.rect) { const [x, y, w, h, col] = op.rect; ctx.fillStyle = col; ctx.fillRect(x, y, w, h); }
    if (op.stroke) { const [x, y, w, h] = op.stroke; ctx.strokeStyle = "#cccccc"; ctx.strokeRect(x, y, w, h); }
    if (op.text) {
      const [x, y, t, size, anchor, , rot = 0] = op.text;
      ctx.save();
      ctx.font = `${size}px ${family ? `"${family}", ` : ""}${FIG_STACK}`;
      ctx.fillStyle = "#222";
      ctx.textAlign = anchor === "end" ? "right" : anchor === "middle" ? "center" : "left";
      ctx.translate(x, y);
      if (rot) ctx.rotate(rot * Math.PI / 180);
      ctx.fillText(t, 0, 0);
      ctx.restore();
    }
    if (op.head) {
      const [h, off, x, y, tile] = op.head, tmp = document.createElement("canvas");
      tmp.width = f.T; tmp.height = f.T;
      tmp.getContext("2d").putImageData(headPixels(s, h, off), 0, 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(tmp, x, y, tile, tile);
    }
  }
  return c;
}

function download(blob, name) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}

async function save(s, kind) {
  if (!s.d) return;
  const f = figure(s), name = `mha-viz-${s.d.names.layers[s.layer]}-heads.${kind}`;
  if (kind === "svg") download(new Blob([toSVG(s, f)], { type: "image/svg+xml" }), name);
  else toCanvas(s, f, 2, await figureFont(s)).toBlob(b => download(b, name), "image/png");
}

// -- the same layer as lines (BertViz's head view): queries on the left, keys on the right, one line per weight,
// one colour per head; hover a token to see only its lines; click a head's chip to hide or show its lines, and
// its switch to turn it off (the model reruns). For short texts only (lines_up_to tokens).
const LINE_ROW = 20;

function showDraw(s) {
  const d = s.d, fits = d.T <= d.lines_up_to;
  s.drawPick.disabled = !fits;
  s.drawPick.title = fits ? "" : `Lines are drawn for texts of up to ${d.lines_up_to} tokens`;
  const lines = s.draw === "lines" && fits;
  s.grid.hidden = lines;
  s.lines.hidden = !lines;
  if (lines) drawLines(s);
}

function drawLines(s) {
  const d = s.d, T = d.T, l = s.layer, NS = "http://www.w3.org/2000/svg";
  s.hiddenHeads = s.hiddenHeads || new Set();
  s.lines.replaceChildren();
  const chips = el("div", "mhv-chips");
  for (let h = 0; h < d.H; h++) {
    const off = s.off.has(l + "," + h), shown = !s.hiddenHeads.has(h);
    const chip = el("span", "mhv-chip");
    chip.dataset.head = headName(s, l, h);
    const name = el("button", "mhv-chip-name", headName(s, l, h) + (off ? " (off)" : ""));
    name.style.borderColor = off ? d.colours.head_off : d.colours.heads[h % d.colours.heads.length];
    name.style.background = shown ? name.style.borderColor : "#fff";
    name.style.color = shown ? "#fff" : "#333";
    name.title = shown ? "Hide this head's lines" : "Show this head's lines";
    name.addEventListener("click", () => {
      if (shown) s.hiddenHeads.add(h); else s.hiddenHeads.delete(h);
      drawLines(s);
    });
    const sw = el("button", "mhv-switch");
    sw.setAttribute("role", "switch");
    sw.setAttribute("aria-checked", String(!off));
    sw.setAttribute("aria-label", headName(s, l, h));
    sw.addEventListener("click", () => toggle(s, h));
    chip.append(name, sw);
    chips.append(chip);
  }
  const width = Math.max(320, Math.min(640, (s.box.clientWidth || 600) - 20)), colW = 130;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("width", width);
  svg.setAttribute("height", T * LINE_ROW + 10);
  svg.setAttribute("data-testid", "mhv-lines-svg");
  const x0 = colW, x1 = width - colW;
  const group = document.createElementNS(NS, "g");
  svg.append(group);
  const paint = (q) => {
    group.replaceChildren();
    for (let h = 0; h < d.H; h++) {
      if (s.hiddenHeads.has(h)) continue;
      const off = s.off.has(l + "," + h);
      const colour = off ? d.colours.head_off : d.colours.heads[h % d.colours.heads.length];
      for (let i = 0; i < T; i++) {
        if (q !== null && i !== q) continue;
        for (let k = 0; k < T; k++) {
          const w = weight(s, l, h, i, k);
          if (w < 0.02) continue;  // BertViz draws every weight; lines under 2% would only grey the picture
          const line = document.createElementNS(NS, "line");
          line.setAttribute("x1", x0); line.setAttribute("y1", 5 + (i + 0.5) * LINE_ROW);
          line.setAttribute("x2", x1); line.setAttribute("y2", 5 + (k + 0.5) * LINE_ROW);
          line.setAttribute("stroke", colour);
          line.setAttribute("stroke-width", 2);
          line.setAttribute("stroke-opacity", Math.min(1, w * (q === null ? 0.8 : 1)).toFixed(3));
          group.append(line);
        }
      }
    }
  };
  d.tokens.forEach((t, i) => {
    for (const [x, anchor, side] of [[x0 - 6, "end", "query"], [x1 + 6, "start", "key"]]) {
      const text = document.createElementNS(NS, "text");
      text.setAttribute("x", x); text.setAttribute("y", 5 + (i + 0.5) * LINE_ROW + 4);
      text.setAttribute("text-anchor", anchor);
      text.setAttribute("font-size", "12");
      text.setAttribute("font-family", "monospace");
      text.setAttribute("class", "mhv-line-tok");
      text.dataset.side = side;
      text.dataset.q = i;
      text.textContent = t.slice(0, 16);
      if (side === "query") {
        text.addEventListener("mouseenter", () => { paint(i); hover(s, i, null, null); });
        text.addEventListener("mouseleave", () => { paint(null); hover(s, null, null, null); });
      }
      svg.append(text);
    }
  });
  paint(null);
  const caption = el("div", "mhv-badge", "Left: queries, right: keys; a line's opacity is its weight (lines under 2% are "
    + "left out). Hover a query to see only its lines; click a head's name to hide or show its lines.");
  s.lines.append(chips, svg, caption);
}
