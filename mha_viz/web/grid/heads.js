// The grid itself: the token strip, one tile per head (title, switch, heatmap, badge), the columns that fit,
// drawing a layer, and a head's switch.
import { legend, paint } from "./colour.js";
import { headingFor } from "./controls.js";
import { el, headName } from "./dom.js";
import { openFocus } from "./focus.js";
import { hover, hoverWritten, paintRows } from "./hover.js";
import { tileLabels } from "./labels.js";
import { badgeOf } from "./layers.js";
import { showDraw } from "./lines.js";
import { stepOf } from "./written.js";

const MIN_CELL = 3;       // px per token in a grid tile: below this the columns of the grid fold into fewer

export function buildStrip(s) {
  const d = s.d;
  s.strip.replaceChildren();
  d.qtokens.forEach((t, i) => {  // the queries: a row of every head
    const chip = el("span", "mhv-tok" + (d.unknown.includes(i) && d.Q === d.T ? " mhv-tok-unk" : ""), t);
    chip.dataset.q = i;
    chip.title = "position " + i + ": hover to light this query's row in every head, click to keep it";
    const step = d.Q === d.T ? stepOf(d, i) : null;
    if (step !== null) {  // written by the model: hovering it shows the step that wrote it (written.js)
      chip.classList.add("mhv-tok-written");
      chip.title = `position ${i}, written at step ${step + 1}: hover to light the row that wrote it in every head`;
    }
    chip.addEventListener("mouseenter", () => (step !== null ? hoverWritten(s, i) : hover(s, i, null, null)));
    chip.addEventListener("mouseleave", () => hover(s, null, null, null));
    chip.addEventListener("click", () => { s.pinQ = s.pinQ === i ? null : i; paintRows(s); });
    s.strip.append(chip);
  });
}

export function buildHeads(s) {
  const d = s.d;
  if (!s.heads || s.heads.length !== d.H || s.headsT !== d.T || s.headsQ !== d.Q) {
    s.grid.replaceChildren();
    s.heads = [];
    s.headsT = d.T;
    s.headsQ = d.Q;
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
      canvas.height = d.Q;
      canvas.style.aspectRatio = `${d.T} / ${d.Q}`;  // square cells: Q rows (queries) of T keys
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
        const q = Math.floor((ev.clientY - r.top) / r.height * d.Q), k = Math.floor((ev.clientX - r.left) / r.width * d.T);
        if (q >= 0 && q < d.Q && k >= 0 && k < d.T) hover(s, q, k, h);
      });
      wrap.addEventListener("mouseleave", () => hover(s, null, null, null));
      wrap.addEventListener("click", () => openFocus(s, s.layer, h));
      s.heads.push({ cell, title, sw, canvas, ctx: canvas.getContext("2d"), row, badge, wrap, qLabels, kLabels,
                     img: new ImageData(d.T, d.Q) });
    }
    s.labelsFor = null;
  }
}

export function layoutGrid(s) {
  const d = s.d;
  if (!d) return;
  const width = s.box.clientWidth || 800;
  // The user's "heatmaps per row", but never so many that a token is less than MIN_CELL px wide.
  const fit = Math.max(1, Math.floor((width + 12) / (d.T * MIN_CELL + 12)));
  s.cols = Math.max(1, Math.min(d.cols, fit, d.H));
  // As many tracks as a full row would have: a layer with fewer heads than that (a written model's one-head layer)
  // draws them at the size they have in every other layer, not stretched across the page.
  const tracks = Math.max(1, Math.min(d.cols, fit));
  s.grid.style.gridTemplateColumns = `repeat(${tracks}, minmax(0, 1fr))`;
  s.grid.dataset.cols = s.cols;
  const asked = Math.min(d.cols, d.H);
  s.note.textContent = s.cols < asked
    ? `${s.cols} per row, not ${asked}: at ${d.T} tokens a heatmap needs ${d.T * MIN_CELL} px to give each token ${MIN_CELL} px`
    : "";
  tileLabels(s);
}

export function drawLayer(s) {
  const d = s.d, T = d.T, Q = d.Q, l = s.layer, n = Q * T, codes = s.codes[l];
  // A layer still on its way (a new sentence's other layers, behind the one on screen) is drawn blank and pending,
  // and drawn again when it comes (main.js, arrived).
  s.grid.dataset.waiting = codes ? "" : "1";
  for (let h = 0; h < d.H; h++) {
    const head = s.heads[h], off = s.off.has(l + "," + h);
    if (codes) paint(s, codes, head.img.data, h * n, T, off, Q);
    else head.img.data.fill(255);
    head.ctx.putImageData(head.img, 0, 0);
    const name = headName(s, l, h);
    const pending = s.pending.has(l + "," + h) || !codes;
    head.title.textContent = name + (off ? " (off)" : "");
    head.cell.dataset.head = name;
    head.cell.classList.toggle("mhv-off", off);
    head.cell.classList.toggle("mhv-pending", pending);
    head.sw.setAttribute("aria-checked", String(!off));
    head.sw.setAttribute("aria-label", name);
    head.sw.title = off ? "Off: its output is replaced (by 0, or by its mean: the sidebar's 'Switching a head off'). "
                          + "Click to switch it on."
                        : "On: the head contributes. Click to switch it off (the model reruns).";
    head.badge.textContent = badgeOf(d, l, h);
  }
  s.grid.dataset.layer = l;
  headingFor(s);
  legend(s);
  paintRows(s);
  showDraw(s);
}

// The captions of the layer on screen again: another message brought them (layers.js, deposit).
export function drawBadges(s) {
  if (!s.d || !s.heads) return;
  s.heads.forEach((head, h) => { head.badge.textContent = badgeOf(s.d, s.layer, h); });
}

export function toggle(s, h) {
  const l = s.layer, key = l + "," + h;
  s.pending.add(key);
  s.heads[h].cell.classList.add("mhv-pending");
  s.setTrigger("toggle", { layer: l, head: h, on: s.off.has(key) });
}
