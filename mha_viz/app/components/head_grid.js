// The layer grid, drawn in the browser: every head of every layer arrives once as uint8 codes (base64), so
// switching layers, hovering a token and opening a head large never ask the server. Only a head switched on or
// off does (a trigger event): that needs the model.
//
// data = {digest, tokens[T], L, H, T, att: Arrow table whose one binary cell "z" is the zlib-deflated (L, H, T, T)
//         uint8 codes, scale[L*H], off: [[l, h]...], layer, cols, badges: {"l,h": text}, shared,
//         url (optional; false: the layer tabs leave the page's address alone, as in the notebook widget)}
// weight of cell (l, h, q, k) = codes[((l*H + h)*T + q)*T + k] / 255 * scale[l*H + h]

const BLUES = ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"];
const GREYS = ["#ffffff", "#f0f0f0", "#d9d9d9", "#bdbdbd", "#969696", "#737373", "#525252", "#252525"];
const MIN_CELL = 3;       // px per token in a grid tile: below this the columns of the grid fold into fewer
const LABEL_CELL = 14;    // px per token in the focused head: room for an 11 px label on every row and column
const FOCUS_MAX_CELL = 30;
const LABEL_FONT = "11px monospace";

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
const LUT_ON = lut(BLUES), LUT_OFF = lut(GREYS);

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
  const s = { root, setTrigger, chain: Promise.resolve(), latest: null, digest: null, serverLayer: null, layer: 0,
              hoverQ: null, pinQ: null, focus: null, zoom: 1, pending: new Set() };
  const box = el("div", "mhv");
  const bar = el("div", "mhv-bar");
  s.tabs = el("div", "mhv-tabs");
  s.tabs.setAttribute("role", "tablist");
  s.info = el("div", "mhv-info", "Hover a heatmap or a token: its row lights up in every head. Click a head to open it large.");
  s.info.setAttribute("data-testid", "mhv-info");
  bar.append(s.tabs, s.info);
  s.strip = el("div", "mhv-strip");
  s.focusBox = el("div", "mhv-focus");
  s.focusBox.hidden = true;
  s.grid = el("div", "mhv-grid");
  box.append(bar, s.strip, s.focusBox, s.grid);
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
    s.pending.clear();
    s.pinQ = s.pinQ !== null && s.pinQ < d.T ? s.pinQ : null;
    buildStrip(s);
  }
  // The sidebar's layer wins when it changed since the last message; otherwise keep the layer picked here.
  if (d.layer !== s.serverLayer) {
    s.serverLayer = d.layer;
    s.layer = d.layer;
  }
  s.layer = Math.min(s.layer, d.L - 1);
  s.off = new Set(d.off.map(([l, h]) => l + "," + h));
  s.pending.clear();
  buildTabs(s);
  buildHeads(s);
  drawLayer(s);
  if (s.focus) openFocus(s, s.focus[0], s.focus[1]);
}

function buildTabs(s) {
  const d = s.d;
  if (s.tabs.childElementCount !== d.L) {
    s.tabs.replaceChildren();
    for (let l = 0; l < d.L; l++) {
      const b = el("button", "mhv-tab", "L" + l);
      b.setAttribute("role", "tab");
      b.dataset.layer = l;
      b.title = "Show layer " + l + " (drawn here, no server round trip)";
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
  // Keep a copied link on the layer shown (the server writes the other parameters); not in a notebook (url: false).
  if (s.d.url !== false) try {
    const url = new URL(window.location.href);
    url.searchParams.set("layer", String(l));
    window.history.replaceState(window.history.state, "", url);
  } catch (e) { /* a sandboxed page may refuse; the view itself is unaffected */ }
}

function buildStrip(s) {
  const d = s.d;
  s.strip.replaceChildren();
  d.tokens.forEach((t, i) => {
    const chip = el("span", "mhv-tok", t);
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
      const wrap = el("div", "mhv-wrap");
      const canvas = el("canvas", "mhv-canvas");
      canvas.width = d.T;
      canvas.height = d.T;
      const row = el("div", "mhv-row");
      row.hidden = true;
      wrap.append(canvas, row);
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
      s.heads.push({ cell, title, sw, canvas, ctx: canvas.getContext("2d"), row, badge,
                     img: new ImageData(d.T, d.T) });
    }
  }
  layoutGrid(s);
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
}

function headName(l, h) { return "L" + l + " H" + h; }

function drawLayer(s) {
  const d = s.d, T = d.T, l = s.layer, n = T * T;
  for (let h = 0; h < d.H; h++) {
    const head = s.heads[h], off = s.off.has(l + "," + h), lutc = off ? LUT_OFF : LUT_ON;
    const base = (l * d.H + h) * n, px = head.img.data;
    for (let i = 0; i < n; i++) {
      const j = s.codes[base + i] * 4, o = i * 4;
      px[o] = lutc[j]; px[o + 1] = lutc[j + 1]; px[o + 2] = lutc[j + 2]; px[o + 3] = 255;
    }
    head.ctx.putImageData(head.img, 0, 0);
    const name = headName(l, h);
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
  paintRows(s);
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
                                         : "Hover a heatmap or a token: its row lights up in every head. Click a head to open it large.";
  } else if (k === null) {
    s.info.textContent = `query ${JSON.stringify(d.tokens[q])} (${q}): its row is outlined in every head of L${s.layer}`;
  } else {
    s.info.textContent = `${headName(s.layer, h)} · query ${JSON.stringify(d.tokens[q])} (${q}) → key ` +
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
  s.focusTitle.textContent = headName(l, h) + (off ? " (off)" : "");
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
  const lutc = off ? LUT_OFF : LUT_ON, base = (l * d.H + h) * T * T;
  const img = new ImageData(T, T);
  for (let i = 0; i < T * T; i++) {
    const j = s.codes[base + i] * 4;
    img.data[i * 4] = lutc[j]; img.data[i * 4 + 1] = lutc[j + 1]; img.data[i * 4 + 2] = lutc[j + 2]; img.data[i * 4 + 3] = 255;
  }
  const tmp = document.createElement("canvas");
  tmp.width = T; tmp.height = T;
  tmp.getContext("2d").putImageData(img, 0, 0);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, c.width, c.height);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, room, room, T * cell, T * cell);
  ctx.font = LABEL_FONT;
  ctx.fillStyle = "#222";
  ctx.textBaseline = "middle";
  const fits = cell >= 9;  // below ~9 px rows the labels would overlap: zoom in to read them
  for (let i = 0; i < T && fits; i++) {
    const t = d.tokens[i];
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
