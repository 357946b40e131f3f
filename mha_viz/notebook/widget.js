// The layer grid as a Jupyter widget (anywidget): the app's own browser code, mha_viz/web/grid/ (its modules
// bundled into the one module the Streamlit component loads too, mha_viz.web.grid_js), mounted in a notebook
// output. The widget's model carries what the Streamlit component's `data` carries, split into traits: `grid` (the
// JSON part), `att` (every layer's deflated uint8 codes, one after another, a binary buffer; grid.parts gives each
// layer's length) and `layer`; the grid's module arrives as the text trait `_grid_js` and is imported from a blob:
// URL, so nothing comes from a CDN.
// A head's switch becomes a message to Python ({type: "toggle", layer, head, on}); Python reruns the model and
// sends back new traits, and a `readout` of what changed (KL and top predictions, or the embedding cosine).
// node, bytesOf and mount are common.js's, put before this text by display.esm().

const MODULES = new Map();  // source text -> the imported grid module (one import per page)

function gridModule(source) {
  if (!MODULES.has(source)) {
    const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
    MODULES.set(source, import(/* webpackIgnore: true */ url));
  }
  return MODULES.get(source);
}

// The grid reads each layer as an Arrow table's binary cell: att.getChild("z<layer>").get(0) (web/grid/layers.js).
function layerTable(bytes, parts) {
  const cells = new Map();
  let at = 0;
  for (const [layer, n] of parts) {
    cells.set("z" + layer, bytes.subarray(at, at + n));
    at += n;
  }
  return { schema: { fields: [...cells.keys()].map(name => ({ name })) }, getChild: name => ({ get: () => cells.get(name) }) };
}

function fmt(p) { return (100 * p).toFixed(1) + "%"; }

function drawReadout(box, r) {
  box.replaceChildren();
  if (!r || !r.kind) return;
  box.dataset.kind = r.kind;
  if (r.note) box.append(node("div", "mhw-note", r.note));
  if (r.kind === "lm") {
    box.append(node("div", "mhw-metric",
      `KL(all on ‖ now) at position ${r.position} (${JSON.stringify(r.token)}): ${r.kl.toFixed(4)} nats`));
    const table = node("table", "mhw-top");
    const head = node("tr");
    head.append(node("th", "", "#"), node("th", "", "all heads on"), node("th", "", r.off ? "now (" + r.off + " off)" : "now"));
    table.append(head);
    r.before.forEach((b, i) => {
      const a = r.after[i], row = node("tr");
      row.append(node("td", "", String(i + 1)), node("td", "", `${JSON.stringify(b[0])} ${fmt(b[1])}`),
                 node("td", "", `${JSON.stringify(a[0])} ${fmt(a[1])}`));
      table.append(row);
    });
    box.append(table);
    if (r.along && r.along.length) {  // an encoder-decoder run: the decoder's prediction at every target position
      box.append(node("div", "mhw-metric", "The decoder's next-token prediction along the target"));
      const along = node("table", "mhw-top mhw-along");
      const top = node("tr");
      top.append(node("th", "", "#"), node("th", "", "reads"), node("th", "", "all heads on"),
                 node("th", "", r.off ? "now (" + r.off + " off)" : "now"), node("th", "", "KL"));
      along.append(top);
      for (const p of r.along) {
        const row = node("tr");
        row.append(node("td", "", String(p.position)), node("td", "", JSON.stringify(p.token)),
                   node("td", "", `${JSON.stringify(p.before[0])} ${fmt(p.before[1])}`),
                   node("td", "", `${JSON.stringify(p.after[0])} ${fmt(p.after[1])}`), node("td", "", p.kl.toFixed(4)));
        along.append(row);
      }
      box.append(along);
    }
  } else if (r.kind === "encoder") {
    box.append(node("div", "mhw-metric",
      `Sentence embedding, cosine(all on, now): ${r.cosine.toFixed(5)}` + (r.off ? ` (${r.off} heads off)` : "")));
  }
}

function drawKinds(model, box, grid) {
  box.replaceChildren();
  for (const kind of grid.kinds || []) {
    const b = node("button", "mhv-btn mhw-kind", kind);
    b.setAttribute("aria-pressed", String(kind === grid.kind));
    b.title = `Show the ${kind.toLowerCase()} attention's heads`;
    b.addEventListener("click", () => { model.set("kind", kind); model.save_changes(); });
    box.append(b);
  }
}

function build(model) {
  const box = node("div", "mhw");
  const bar = node("div", "mhw-bar");
  const reset = node("button", "mhv-btn mhw-reset", "all heads on");
  reset.title = "Switch every head back on (the model reruns)";
  reset.addEventListener("click", () => model.send({ type: "reset" }));
  const status = node("span", "mhw-status");
  status.setAttribute("data-testid", "mhw-status");
  // An encoder-decoder model's grid: which attention it shows (Python's `kind`, which reruns nothing).
  const kinds = node("span", "mhw-kinds");
  kinds.setAttribute("data-testid", "mhw-kinds");
  bar.append(reset, kinds, status);
  const grid = node("div", "mhw-grid");
  const readout = node("div", "mhw-readout");
  readout.setAttribute("data-testid", "mhw-readout");
  box.append(bar, grid, readout);
  const parts = { box, grid, readout, status, kinds, draws: 0 };
  // Every time the grid draws a layer it writes the grid's data-layer: the time of the last draw is kept on
  // the widget's box (data-drawn-at, ms since the epoch), which is how show()-to-drawn is measured in a browser.
  new MutationObserver(() => {
    parts.draws += 1;
    box.dataset.drawnAt = String(Date.now());
    box.dataset.draws = String(parts.draws);
  }).observe(grid, { attributes: true, subtree: true, attributeFilter: ["data-layer"] });
  // A layer tab clicked in the page: tell Python which layer is shown (the SVG export and widget.layer follow it).
  grid.addEventListener("click", (ev) => {
    const tab = ev.target.closest && ev.target.closest(".mhv-tab");
    if (tab && Number(tab.dataset.layer) !== model.get("layer")) {
      model.set("layer", Number(tab.dataset.layer));
      model.save_changes();
    }
  });
  return parts;
}

async function refresh(model, parts) {
  const mod = await gridModule(model.get("_grid_js"));
  const grid = model.get("grid");
  if (!grid.tokens) return;
  const data = { ...grid, layer: model.get("layer"), url: false, att: layerTable(bytesOf(model.get("att")), grid.parts) };
  mod.default({
    data, parentElement: parts.grid,
    setTriggerValue: (name, value) => {
      if (name === "layer") { model.set("layer", value); model.save_changes(); return; }  // drawn already
      if (name === "resend") { model.send({ type: "resend" }); return; }
      parts.status.textContent = "rerunning the model…";
      model.send({ type: name, ...value });
    },
  });
  drawKinds(model, parts.kinds, grid);
  drawReadout(parts.readout, model.get("readout"));
  parts.status.textContent = model.get("status") || "";
}

export default {
  render({ model, el }) {
    // a redrawn output (e.g. update_display) takes over the drawn grid and its state
    return mount(model, el, build, refresh,
                 ["change:grid", "change:att", "change:layer", "change:readout", "change:status"]);
  },
};
