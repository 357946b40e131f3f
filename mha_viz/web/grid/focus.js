// One head large: every token labelled, zoom and pan.
import { paint } from "./colour.js";
import { el, headName } from "./dom.js";
import { hover } from "./hover.js";
import { fitText, labelPlan } from "./labels.js";

const LABEL_CELL = 14;    // px per token in the focused head: room for an 11 px label on every row and column
const FOCUS_MAX_CELL = 30;
const LABEL_FONT = "11px monospace";

export function openFocus(s, l, h) {
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
      if (q >= 0 && q < s.d.Q && k >= 0 && k < s.d.T) hover(s, q, k, s.focus[1]);
    });
    s.focusScroll.addEventListener("mouseleave", () => hover(s, null, null, null));
  }
  f.hidden = false;
  drawFocus(s);
}

export function drawFocus(s) {
  const d = s.d, [l, h] = s.focus, T = d.T, Q = d.Q, off = s.off.has(l + "," + h);
  s.focusTitle.textContent = headName(s, l, h) + (off ? " (off)" : "");
  const c = s.focusCanvas, ctx = c.getContext("2d");
  ctx.font = LABEL_FONT;
  let longest = 0;
  for (const t of [...d.tokens, ...(Q !== T ? d.qtokens : [])]) longest = Math.max(longest, ctx.measureText(t).width);
  const room = Math.ceil(Math.min(longest, 160)) + 8;
  const avail = Math.max(200, (s.box.clientWidth || 800) - room - 24);
  // Fit the width, but no larger than FOCUS_MAX_CELL (a short sentence need not fill the screen) and never
  // smaller than LABEL_CELL (a long one scrolls instead: drag or scroll to pan, + and − to zoom).
  const cell = Math.max(4, Math.round(Math.max(LABEL_CELL, Math.min(FOCUS_MAX_CELL, Math.floor(avail / T))) * s.zoom));
  c.width = room + T * cell;
  c.height = room + Q * cell;
  s.focusGeom = { lw: room, lh: room, cell };
  c.dataset.cell = cell;
  const img = new ImageData(T, Q);
  if (s.codes[l]) paint(s, s.codes[l], img.data, h * Q * T, T, off, Q);
  else img.data.fill(255);  // its layer is still on its way: drawn when it comes
  const tmp = document.createElement("canvas");
  tmp.width = T; tmp.height = Q;
  tmp.getContext("2d").putImageData(img, 0, 0);
  ctx.fillStyle = d.colours.paper;
  ctx.fillRect(0, 0, c.width, c.height);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, room, room, T * cell, Q * cell);
  // Always labelled: every token from 12 px rows up, else every k-th at 8-11 px (zoom in to read them all).
  const plan = labelPlan(cell, T);
  ctx.font = `${plan.font}px monospace`;
  ctx.fillStyle = d.colours.ink;
  ctx.textBaseline = "middle";
  c.dataset.labelStep = plan.step;
  c.dataset.labelFont = plan.font;
  for (let i = 0; i < Q; i += plan.step) {
    ctx.textAlign = "right";
    ctx.fillText(fitText(ctx, d.qtokens[i], room - 6), room - 4, room + (i + 0.5) * cell, room - 6);  // queries, left
  }
  for (let i = 0; i < T; i += plan.step) {
    const t = fitText(ctx, d.tokens[i], room - 6);
    ctx.save();
    ctx.translate(room + (i + 0.5) * cell, room - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(t, 0, 0, room - 6);  // keys, on top
    ctx.restore();
  }
  const q = s.hoverQ !== null ? s.hoverQ : s.pinQ;
  if (q !== null) {
    ctx.strokeStyle = d.colours.mark;
    ctx.lineWidth = 2;
    ctx.strokeRect(room, room + q * cell, T * cell, cell);
  }
}
