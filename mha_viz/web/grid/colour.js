// From a code to a colour: the colour stops' lookup tables (the stops come from Python, web/palette.py), the
// contrasts, a head's pixels and the legend.
import { el } from "./dom.js";

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
export function lutFor(colors) {
  const key = colors.join();
  if (!LUTS.has(key)) LUTS.set(key, lut(colors));
  return LUTS.get(key);
}

// Contrast: how a weight (as a share of the head's maximum, or of 1 on the shared scale) maps to colour. One
// outlier cell (a sink column) sets a head's maximum and leaves the rest near white under a linear map.
export const CONTRASTS = {
  sqrt: { label: "√ square root", f: x => Math.sqrt(x) },
  linear: { label: "linear", f: x => x },
  log: { label: "log (1 + 99x)", f: x => Math.log1p(99 * x) / Math.log(100) },
  row: { label: "each row to its max", f: x => x },
};
export const DEFAULT_CONTRAST = "sqrt";
const REMAPS = new Map();
function remap(name) {  // 256 codes -> 256 colour indices under a contrast
  if (!REMAPS.has(name)) {
    const out = new Uint8Array(256), f = CONTRASTS[name].f;
    for (let v = 0; v < 256; v++) out[v] = Math.round(Math.min(1, Math.max(0, f(v / 255))) * 255);
    REMAPS.set(name, out);
  }
  return REMAPS.get(name);
}

// The colours a head is drawn with: code -> RGBA index, under the contrast (row: each row to its own maximum).
// `codes`: its layer's (layers.js), the head's T x T from `base`.
export function paint(s, codes, px, base, T, off, Q = T) {  // Q rows of T keys (Q != T: cross-attention)
  const lutc = off ? s.offLut : s.on, map = remap(s.contrast === "row" ? "linear" : s.contrast);
  for (let q = 0; q < Q; q++) {
    let top = 255;
    if (s.contrast === "row") {
      top = 1;
      for (let k = 0; k < T; k++) top = Math.max(top, codes[base + q * T + k]);
    }
    for (let k = 0; k < T; k++) {
      const i = q * T + k, j = map[Math.min(255, Math.round(codes[base + i] * 255 / top))] * 4, o = i * 4;
      px[o] = lutc[j]; px[o + 1] = lutc[j + 1]; px[o + 2] = lutc[j + 2]; px[o + 3] = 255;
    }
  }
}

export function legend(s) {
  const d = s.d, stops = d.colours.on;
  const top = s.contrast === "row" ? "its row's max" : d.shared ? "1" : "the head's max";
  s.legend.replaceChildren();
  const bar = el("span", "mhv-legend-bar");
  bar.style.background = `linear-gradient(to right, ${stops.join(", ")})`;
  s.legend.append(el("span", null, "0"), bar, el("span", null, top));
  s.legend.title = `Colour: attention weight from 0 (white) to ${top} (dark), ${CONTRASTS[s.contrast].label}. `
    + "Rows are queries (↓), columns keys (→); grey heads are off. Hover a cell for its weight.";
}
