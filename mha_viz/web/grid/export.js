// -- Save: this layer's heads as SVG (vector labels, legend and cells; cells as an embedded image above 64 tokens)
// or PNG (the same drawing at 2x). Drawn from one list of shapes, so both files show the same thing.
import { CONTRASTS, paint } from "./colour.js";
import { headName } from "./dom.js";
import { fitText, labelPlan } from "./labels.js";

const SAVE_VECTOR_UP_TO = 64;

// One family for every word of a saved figure: the embedded DejaVu Sans when the page sent it (the SVG's @font-face,
// the PNG's FontFace), else the first of a generic stack that the viewer has.
const FIG_STACK = "'DejaVu Sans', 'Helvetica Neue', Helvetica, Arial, sans-serif";
const FIG_CANVAS_FAMILY = "mhv-figure";  // the embedded face under its own name, so no system font stands in for it
const FIG_LABEL_MAX = 9;
const FIG_LABEL_MIN = 8;
const FIG_GUTTER_MAX = 70;

function figure(s) {
  const d = s.d, T = d.T, Q = d.Q, l = s.layer, cols = s.cols || Math.min(d.cols, d.H);
  // tile: the heads' width (T keys); tileH their height, Q query rows of square cells.
  const tile = Math.max(160, Math.min(320, T * 12)), cell = tile / T, tileH = cell * Q;
  // Every figure is labelled: every token when a row holds a 9 px label, else every k-th (8-9 px, never overlapping).
  const plan = labelPlan(cell, T, FIG_LABEL_MAX, FIG_LABEL_MIN);
  const probe = document.createElement("canvas").getContext("2d");
  probe.font = `${plan.font}px ${FIG_STACK}`;
  let longest = 0;
  const shown = [];
  for (let i = 0; i < T; i += plan.step) shown.push(i);
  const shownQ = [];
  for (let i = 0; i < Q; i += plan.step) shownQ.push(i);
  for (const i of shown) longest = Math.max(longest, probe.measureText(d.tokens[i]).width);
  for (const i of shownQ) longest = Math.max(longest, probe.measureText(d.qtokens[i]).width);
  const gutter = Math.min(FIG_GUTTER_MAX, Math.ceil(longest) + 8), top = 58, titleH = 18, pad = 16;
  const width = pad * 2 + cols * (gutter + tile + pad), rows = Math.ceil(d.H / cols);
  const height = top + rows * (titleH + gutter + tileH + pad) + 20;
  const ops = [{ rect: [0, 0, width, height, d.colours.paper] }];
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
    const x0 = pad + c * (gutter + tile + pad) + gutter, y0 = top + r * (titleH + gutter + tileH + pad);
    const off = s.off.has(l + "," + h), gy = y0 + titleH + gutter;
    ops.push({ text: [x0, y0 + 13, headName(s, l, h) + (off ? " (off)" : ""), 12, "start", off ? "head-name off" : "head-name"] });
    ops.push({ head: [h, off, x0, gy, tile] });
    ops.push({ stroke: [x0, gy, tile, tileH] });
    for (const i of shownQ) {
      const t = fitText(probe, d.qtokens[i], gutter - 6);
      ops.push({ text: [x0 - 3, gy + (i + 0.5) * cell + plan.font * 0.35, t, plan.font, "end", "token query"] });
    }
    for (const i of shown) {
      const t = fitText(probe, d.tokens[i], gutter - 6);
      ops.push({ text: [x0 + (i + 0.5) * cell + plan.font * 0.35, gy - 3, t, plan.font, "start", "token key", -90] });
    }
  }
  return { ops, width, height, T, Q, step: plan.step, offNames };
}

function headPixels(s, h, off) {
  const T = s.d.T, Q = s.d.Q, img = new ImageData(T, Q);
  paint(s, s.codes[s.layer], img.data, h * Q * T, T, off, Q);
  return img;
}

function esc(t) { return String(t).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;"); }

export function base64(bytes) {
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
    if (op.stroke) { const [x, y, w, h] = op.stroke; out.push(`<rect x="${x}" y="${y}" width="${w}" height="${h}" fill="none" stroke="${d.colours.frame}"/>`); }
    if (op.text) {
      const [x, y, t, size, anchor, cls, rot = 0] = op.text;
      out.push(`<text class="${cls}" x="${x.toFixed(2)}" y="${y.toFixed(2)}" font-size="${size}" text-anchor="${anchor}" fill="${d.colours.ink}"`
        + (rot ? ` transform="rotate(${rot} ${x.toFixed(2)} ${y.toFixed(2)})"` : "") + `>${esc(t)}</text>`);
    }
    if (op.head) {
      const [h, off, x, y, tile] = op.head, img = headPixels(s, h, off), T = f.T, Q = f.Q, cell = tile / T;
      const attrs = `class="head" data-head="${esc(headName(s, s.layer, h))}" data-off="${off}"`;
      if (T <= SAVE_VECTOR_UP_TO) {
        out.push(`<g ${attrs}>`);
        for (let i = 0; i < Q * T; i++) {
          const p = img.data.subarray(i * 4, i * 4 + 3);
          if (p[0] === 255 && p[1] === 255 && p[2] === 255) continue;  // the white background shows through
          const hex = "#" + [...p].map(v => v.toString(16).padStart(2, "0")).join("");
          out.push(`<rect x="${(x + (i % T) * cell).toFixed(2)}" y="${(y + Math.floor(i / T) * cell).toFixed(2)}" width="${cell.toFixed(2)}" height="${cell.toFixed(2)}" fill="${hex}"/>`);
        }
        out.push("</g>");
      } else {
        const c = document.createElement("canvas");
        c.width = T; c.height = Q;
        c.getContext("2d").putImageData(img, 0, 0);
        out.push(`<image ${attrs} x="${x}" y="${y}" width="${tile}" height="${cell * Q}" style="image-rendering:pixelated" href="${c.toDataURL("image/png")}"/>`);
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
    if (op.stroke) { const [x, y, w, h] = op.stroke; ctx.strokeStyle = s.d.colours.frame; ctx.strokeRect(x, y, w, h); }
    if (op.text) {
      const [x, y, t, size, anchor, , rot = 0] = op.text;
      ctx.save();
      ctx.font = `${size}px ${family ? `"${family}", ` : ""}${FIG_STACK}`;
      ctx.fillStyle = s.d.colours.ink;
      ctx.textAlign = anchor === "end" ? "right" : anchor === "middle" ? "center" : "left";
      ctx.translate(x, y);
      if (rot) ctx.rotate(rot * Math.PI / 180);
      ctx.fillText(t, 0, 0);
      ctx.restore();
    }
    if (op.head) {
      const [h, off, x, y, tile] = op.head, tmp = document.createElement("canvas");
      tmp.width = f.T; tmp.height = f.Q;
      tmp.getContext("2d").putImageData(headPixels(s, h, off), 0, 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(tmp, x, y, tile, tile / f.T * f.Q);
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

export async function save(s, kind) {
  if (!s.d) return;
  const f = figure(s), name = `mha-viz-${s.d.names.layers[s.layer]}-heads.${kind}`;
  if (kind === "svg") download(new Blob([toSVG(s, f)], { type: "image/svg+xml" }), name);
  else toCanvas(s, f, 2, await figureFont(s)).toBlob(b => download(b, name), "image/png");
}
