// Token labels that never overlap: which tokens get a label on an axis, cut to their room, and the small
// heatmaps' label strips (one picture per width and text, shared by every head).
// Token labels on the grid's small heatmaps: a font of TILE_FONT_MIN..TILE_FONT_MAX px, every k-th token where a
// row is thinner than the font (never overlapping, never smaller than TILE_FONT_MIN), in a gutter of at most
// TILE_GUTTER of the tile's width; none when that gutter is too narrow to hold a few characters.
const TILE_FONT_MIN = 8;
const TILE_FONT_MAX = 11;
const TILE_GUTTER = 0.28;
const TILE_GUTTER_MAX = 64;
const TILE_GUTTER_MIN = 22;

// Which tokens get a label on an axis of `n` rows `cell` px tall: the font size and the step between labels
// (every label at least font + 1 px from the next). Shared by the tiles, the enlarged head and the saved figure.
export function labelPlan(cell, n, maxFont = TILE_FONT_MAX, minFont = TILE_FONT_MIN) {
  const font = Math.max(minFont, Math.min(maxFont, Math.floor(cell - 1)));
  const step = Math.max(1, Math.ceil((font + 1) / cell));
  return { font, step, shown: Math.ceil(n / step) };
}

// A label cut to `room` px at the context's font, with an ellipsis when it was cut.
export function fitText(ctx, text, room) {
  if (ctx.measureText(text).width <= room) return text;
  let n = text.length;
  while (n > 1 && ctx.measureText(text.slice(0, n) + "…").width > room) n--;
  return text.slice(0, n) + "…";
}

// The small heatmaps' token labels, for the tile width the grid gives: every token when a row is at least
// TILE_FONT_MIN + 1 px tall, every k-th otherwise; none when the gutter could not hold a few characters.
export function tileLabels(s) {
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
    for (const t of [...d.tokens, ...(d.Q !== d.T ? d.qtokens : [])]) longest = Math.max(longest, probe.measureText(t).width);
    gutter = Math.min(cap, Math.ceil(longest) + 8);
    plan = labelPlan((tile - gutter) / d.T, d.T);
  }
  const show = gutter >= TILE_GUTTER_MIN || longest + 4 <= gutter;
  const key = [tile, d.text, d.Q, show].join();
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
      // Square cells: the queries' strip is as tall as Q rows (the keys' as wide as the T columns).
      const n = side === "q" ? d.Q : d.T, names = side === "q" ? d.qtokens : d.tokens, span = n * cell;
      const w = side === "q" ? gutter : heat, h = side === "q" ? span : gutter;
      const c = document.createElement("canvas");
      c.width = Math.round(w * dpr); c.height = Math.round(h * dpr);
      const ctx = c.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.font = `${plan.font}px monospace`;
      ctx.fillStyle = d.colours.label;
      ctx.textBaseline = "middle";
      // A label is centred on its row, but held inside the picture by its own measured height: on rows thinner
      // than the font, the first and last labels would otherwise be cut in half at its edge ("[CLS]" at the top).
      // Turned upright (keys), the same ascent and descent lie left and right of the anchor.
      const at = (i, text) => {
        const m = ctx.measureText(text);
        const up = m.actualBoundingBoxAscent + 1, down = m.actualBoundingBoxDescent + 1;
        return Math.min(span - down, Math.max(up, (i + 0.5) * cell));
      };
      for (let i = 0; i < n; i += plan.step) {
        const text = fitText(ctx, names[i], gutter - 5);
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
