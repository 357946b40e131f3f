// The census and the circuits widgets (anywidget; mha_viz/notebook/maps_widget.py). Python draws the picture as one
// SVG string (`picture`, from notebook/maps.py); this module puts it in the output and adds what needs a page:
//   - the pickers (`controls`: [{trait, label, options: [[value, label]]}]), each bound to a synced trait;
//   - the hover readout: every element with data-tip shows its text (head, value, interval); over an embedded map
//     (<image data-map=...>) the cell under the pointer is found from `hover` and the float32 `hover_values`;
//   - clicks: an element with data-lh="layer,head" (or a row of an embedded map) sets `selected`, and Python
//     redraws the picture with that head's numbers;
//   - "Save SVG": downloads the picture as drawn (the same string as widget.to_svg()).
// Nothing is fetched: the picture's images are data: URLs. After each picture is in the page and laid out, the box
// gets data-drawn-at (ms since the epoch) and data-draws: how show_census()-to-drawn is measured in a browser.
// node, bytesOf and mount are common.js's, put before this text by display.esm().

function floatsOf(value) {  // a Bytes trait as float32s; copied to align it
  return new Float32Array(bytesOf(value).slice().buffer);
}

function mapCell(model, image, ev) {
  // The cell of an embedded heads x heads map under the pointer: {row, col, value, tip, lh, name} or null.
  const info = (model.get("hover") || {})[image.dataset.map];
  if (!info) return null;
  const box = image.getBoundingClientRect();
  const col = Math.floor((ev.clientX - box.left) / box.width * info.n);
  const row = Math.floor((ev.clientY - box.top) / box.height * info.n);
  if (row < 0 || col < 0 || row >= info.n || col >= info.n) return null;
  const value = floatsOf(model.get("hover_values"))[row * info.n + col];
  const from = info.labels[col], into = info.labels[row];
  let tip;
  if (value === undefined || Number.isNaN(value)) {
    tip = `${from} → ${into}: n/a (${from.split(" ")[0]} is not earlier than ${into.split(" ")[0]})`;
  } else {
    tip = `${from} → ${into} (${info.what}): ${value.toFixed(3)}, ${(value / info.base).toFixed(2)}x random`;
  }
  const heads = into.match(/\d+/g).map(Number);
  return { row, col, value, tip: tip + ` · click: select ${into}`, lh: heads, name: into };
}

function build(model) {
  const box = node("div", "mhm");
  const bar = node("div", "mhm-bar");
  const pickers = node("span", "mhm-pickers");
  const save = node("button", "mhm-save", "Save SVG");
  save.dataset.save = "svg";
  save.title = "Download this picture as an SVG file (the same as widget.to_svg() in Python)";
  save.addEventListener("click", () => {
    const url = URL.createObjectURL(new Blob([model.get("picture")], { type: "image/svg+xml" }));
    const a = document.createElement("a");
    a.href = url;
    a.download = model.get("filename") || "mha-viz.svg";
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
  const status = node("span", "mhm-status");
  status.setAttribute("data-testid", "mhm-status");
  bar.append(pickers, save, status);
  const tip = node("div", "mhm-tip", "\u00a0");
  tip.setAttribute("data-testid", "mhm-tip");
  const picture = node("div", "mhm-box");
  box.append(bar, tip, picture);
  const parts = { box, pickers, picture, tip, status, draws: 0, controls: null };

  picture.addEventListener("mousemove", (ev) => {
    const image = ev.target.closest && ev.target.closest("image[data-map]");
    if (image) {
      const cell = mapCell(model, image, ev);
      tip.textContent = cell ? cell.tip : "\u00a0";
      return;
    }
    const el = ev.target.closest && ev.target.closest("[data-tip]");
    tip.textContent = el ? el.getAttribute("data-tip") : "\u00a0";
  });
  picture.addEventListener("mouseleave", () => { tip.textContent = "\u00a0"; });
  picture.addEventListener("click", (ev) => {
    let lh = null, name = "";  // the head's name as Python wrote it (mha_viz.names), never spelled here
    const image = ev.target.closest && ev.target.closest("image[data-map]");
    if (image) {
      const cell = mapCell(model, image, ev);
      if (cell) { lh = cell.lh; name = cell.name; }
    } else {
      const el = ev.target.closest && ev.target.closest("[data-lh]");
      if (el) {
        lh = el.getAttribute("data-lh").split(",").map(Number);
        name = (el.getAttribute("data-tip") || "").split(" · ")[0];  // every tip starts with the head's name
      }
    }
    if (!lh) return;
    status.textContent = `selecting ${name}…`;
    model.set("selected", lh);
    model.save_changes();
  });
  return parts;
}

function drawPickers(model, parts) {
  const controls = model.get("controls") || [];
  const key = JSON.stringify(controls);
  if (parts.controls !== key) {  // build once per set of options; afterwards only their values follow the traits
    parts.controls = key;
    parts.pickers.replaceChildren();
    for (const c of controls) {
      const label = node("label", "mhm-picker", c.label + " ");
      const select = node("select");
      select.dataset.trait = c.trait;
      for (const [value, text] of c.options) {
        const o = node("option", "", text);
        o.value = value;
        select.append(o);
      }
      select.addEventListener("change", () => {
        parts.status.textContent = "drawing…";
        model.set(c.trait, select.value);
        model.save_changes();
      });
      label.append(select);
      parts.pickers.append(label);
    }
  }
  for (const select of parts.pickers.querySelectorAll("select")) {
    const value = model.get(select.dataset.trait);
    if (select.value !== value) select.value = value;
  }
}

function draw(model, parts) {
  drawPickers(model, parts);
  const svg = model.get("picture");
  if (svg && parts.drawn !== svg) {
    parts.picture.innerHTML = svg;
    parts.drawn = svg;
    const sel = model.get("selected");
    parts.box.dataset.selected = sel ? sel.join(",") : "";
    // The picture is in the DOM; the next frame has laid it out and painted it.
    requestAnimationFrame(() => {
      parts.draws += 1;
      parts.box.dataset.draws = String(parts.draws);
      parts.box.dataset.drawnAt = String(Date.now());
    });
  }
  parts.status.textContent = model.get("status") || "";
}

export default {
  render({ model, el }) {
    const names = ["change:picture", "change:controls", "change:status", "change:selected", "change:hover"];
    for (const c of model.get("controls") || []) names.push("change:" + c.trait);
    return mount(model, el, build, draw, names);
  },
};
