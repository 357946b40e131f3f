// -- the same layer as lines (BertViz's head view): queries on the left, keys on the right, one line per weight,
// one colour per head; hover a token to see only its lines; click a head's chip to hide or show its lines, and
// its switch to turn it off (the model reruns). For short texts only (lines_up_to tokens).
import { el, headName } from "./dom.js";
import { toggle } from "./heads.js";
import { hover } from "./hover.js";
import { weight } from "./layers.js";

const LINE_ROW = 20;

export function showDraw(s) {
  // Lines join a token to tokens of the same text; cross-attention's rows are another text's (the target's).
  const d = s.d, fits = d.T <= d.lines_up_to && d.Q === d.T;
  s.drawPick.disabled = !fits;
  s.drawPick.title = fits ? "" : d.Q !== d.T ? "Lines are drawn for self-attention (queries and keys of one text)"
                                            : `Lines are drawn for texts of up to ${d.lines_up_to} tokens`;
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
  const drawFor = (q) => {
    group.replaceChildren();
    if (!s.codes[l]) return;  // the layer is still on its way: drawn when it comes
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
        text.addEventListener("mouseenter", () => { drawFor(i); hover(s, i, null, null); });
        text.addEventListener("mouseleave", () => { drawFor(null); hover(s, null, null, null); });
      }
      svg.append(text);
    }
  });
  drawFor(null);
  const caption = el("div", "mhv-badge", "Left: queries, right: keys; a line's opacity is its weight (lines under 2% are "
    + "left out). Hover a query to see only its lines; click a head's name to hide or show its lines.");
  s.lines.append(chips, svg, caption);
}
