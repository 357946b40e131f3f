// Hover: a token's row lit in every head (kept by a click on the strip), and the info line's words. A continuation's
// step on screen lights the row that wrote its token, and hovering a written token does the same (written.js).
import { headName } from "./dom.js";
import { drawFocus } from "./focus.js";
import { weight } from "./layers.js";
import { litRow, stepOf, stepRow, stepText, wroteText } from "./written.js";

export const HINT = "Hover a heatmap or a token: its row lights up in every head. Click a head to open it large.";

export function hover(s, q, k, h) {
  s.hoverQ = q;
  const d = s.d;
  if (q === null) {
    s.info.textContent = s.pinQ !== null ? `query ${JSON.stringify(d.qtokens[s.pinQ])} (${s.pinQ}) kept: click it again to let go`
                       : litRow(d) !== null ? stepText(s, d.steps.lit) : HINT;
  } else if (k === null) {
    s.info.textContent = `query ${JSON.stringify(d.qtokens[q])} (${q}): its row is outlined in every head of ${d.names.layers[s.layer]}`;
  } else {
    s.info.textContent = `${headName(s, s.layer, h)} · query ${JSON.stringify(d.qtokens[q])} (${q}) → key ` +
                         `${JSON.stringify(d.tokens[k])} (${k}): ` +
                         (s.codes[s.layer] ? weight(s, s.layer, h, q, k).toFixed(3) : "on its way") + wroteText(d, q);
  }
  paintRows(s);
}

// A written token hovered (its chip in the strip): the row that wrote it lit, and its step's words.
export function hoverWritten(s, i) {
  const k = stepOf(s.d, i);
  s.hoverQ = stepRow(s.d, k);
  s.info.textContent = stepText(s, k);
  paintRows(s);
}

export function paintRows(s) {
  const d = s.d, q = s.hoverQ !== null ? s.hoverQ : s.pinQ !== null ? s.pinQ : litRow(d);
  const step = q === null ? null : stepOf(d, q + 1);  // the step this row wrote the token of, if it wrote one
  for (const head of s.heads) {
    head.row.classList.toggle("mhv-row-step", step !== null);
    if (q === null) { head.row.hidden = true; continue; }
    head.row.hidden = false;
    head.row.style.top = (q / d.Q * 100) + "%";
    head.row.style.height = Math.max(100 / d.Q, 0.8) + "%";
  }
  s.grid.dataset.row = q === null ? "" : String(q);
  s.grid.dataset.step = step === null ? "" : String(step);
  const wrote = step === null ? null : q + 1;
  for (const chip of s.strip.children) {
    chip.classList.toggle("mhv-tok-on", Number(chip.dataset.q) === q);
    chip.classList.toggle("mhv-tok-step", Number(chip.dataset.q) === wrote);
  }
  if (s.focus) drawFocus(s);
}
