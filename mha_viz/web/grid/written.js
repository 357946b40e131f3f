// A continuation's steps (the data's optional `steps`, web/payload.py written_steps): the token written at step k
// (0-based) is at position from + k, and was chosen reading row from + k - 1. While step `lit` is on screen that row
// is lit in every head of the layer, and the info line gives the token written, its probability and the step's
// top-5; hovering a written token lights and says the same (hover.js). Without `steps` (the typed text alone, the
// notebook) none of this draws anything.

// The row read when step k's token was written.
export function stepRow(d, k) { return d.steps.from + k - 1; }

// The step whose token is at position i, or null (a prompt position, or no steps).
export function stepOf(d, i) {
  const st = d.steps;
  if (!st || i === null) return null;
  const k = i - st.from;
  return k >= 0 && k < st.tokens.length ? k : null;
}

// The row of the step on screen, or null.
export function litRow(d) {
  const st = d.steps;
  return st && st.lit !== null && st.lit !== undefined ? stepRow(d, st.lit) : null;
}

export function stepText(s, k) {
  const d = s.d, st = d.steps, q = stepRow(d, k);
  const top = st.top[k].map(([t, p]) => `${JSON.stringify(t)} ${p.toFixed(3)}`).join(", ");
  return `step ${k + 1}: reading ${JSON.stringify(d.qtokens[q])} (${q}) it wrote ${JSON.stringify(st.tokens[k])} `
    + `(p = ${st.chosen[k].toFixed(3)}), its row lit in every head of ${d.names.layers[s.layer]} · top-5: ${top}`;
}

// What a hovered cell's row wrote, after its weight: "" for a row that wrote nothing.
export function wroteText(d, q) {
  const k = stepOf(d, q + 1);
  return k === null ? "" : ` · this row wrote ${JSON.stringify(d.steps.tokens[k])} (p = ${d.steps.chosen[k].toFixed(3)})`;
}
