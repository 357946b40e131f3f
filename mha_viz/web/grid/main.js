// The entry: the state a grid keeps across updates, and an update applied (new codes inflated, then drawn).
// The grid's files are joined in one module in the order mha_viz/web/__init__.py gives (GRID_FILES), so every
// function of one is in scope in the others; this file holds the one `export default`.
//
// The layer grid, drawn in the browser: every head of every layer arrives once as uint8 codes, so hovering a
// token, opening a head large, changing the contrast and saving a picture never ask the server. A head switched on
// or off (that needs the model) and a layer tab (the page's one layer state: heading, bulk switches, other views
// and the URL follow it) are trigger events; the tab is drawn at once, before the server answers.
//
// data = {digest, tokens[T], L, H, T, att: Arrow table whose one binary cell "z" is the zlib-deflated (L, H, T, T)
//         uint8 codes, scale[L*H], off: [[l, h]...], layer, cols, badges: {"l,h": text}, shared,
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
// weight of cell (l, h, q, k) = codes[((l*H + h)*T + q)*T + k] / 255 * scale[l*H + h]
const HINT = "Hover a heatmap or a token: its row lights up in every head. Click a head to open it large.";
const TELL_MS = 150;      // after a tab's paint, before the page is told of it (tellLayer)
const MIN_CELL = 3;       // px per token in a grid tile: below this the columns of the grid fold into fewer

async function decode(att) {  // the Arrow cell's deflated bytes -> the codes, inflated natively by the browser
  const z = att.getChild("z").get(0);
  const stream = new Blob([z]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

// The layer to show for an update from the host, and the host told of a layer it does not have yet.
// - The page (controls.link): a tab is the grid's, its heading's and the link's in the click's own task; the page
//   is told after that drawing is on screen (tellLayer), and its rerun redraws what the server draws for the layer
//   (the switches under the grid, their label and bulk buttons). An answer that still says another layer (a run
//   for another reason, started before the page was told) keeps the tab's layer and tells the page again.
// - The notebook: a tab is asked of the host at once (Python's `w.layer` follows it); an answer still on its way
//   from before the click does not take the grid back.
function layerFor(s, d) {
  if (s.localLayer !== null && s.localLayer >= d.L) s.localLayer = null;  // another model: its own layers
  if (s.localLayer !== null) {
    if (d.layer === s.localLayer) {
      s.localLayer = null;
    } else {
      if (s.toldLayer !== d) {  // once per update: the answer to it says the same layer, or another rerun does
        s.toldLayer = d;
        tellLayer(s);
      }
      return s.localLayer;
    }
  }
  if (s.askedLayer === null || d.layer === s.askedLayer) {
    s.askedLayer = null;
    return Math.min(d.layer, d.L - 1);
  }
  return s.layer;
}

// The page told of the tab's layer TELL_MS after the tab's drawing is painted: tabs clicked within that time are told
// once, as the last of them (a visitor stepping through the layers costs the server one rerun, not one a layer),
// and the rerun's answer (the server's reply, then 0.1-0.2 s of the browser applying its deltas on the main thread)
// lands after the frames that show the tab, not in them. The page's switches follow about 0.3 s after the click.
function tellLayer(s) {
  const n = ++s.tells;
  requestAnimationFrame(() => setTimeout(() => {
    // Not when the grid left the page meanwhile (another view opened with the link's layer: nav.js)
    if (n === s.tells && s.localLayer !== null && s.root.isConnected) s.setTrigger("layer", s.localLayer);
  }, TELL_MS));
}

function drawnAs(d) {  // everything of an update the grid draws from, but the weights (their digest) and the layer
  const { att, layer, ...rest } = d;
  return JSON.stringify(rest);
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
              localLayer: null, tells: 0,
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
