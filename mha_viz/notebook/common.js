// What every mha-viz notebook widget's module shares (widget.js: the layer grid; maps.js: census and circuits).
// anywidget loads each widget's module from its `_esm` text, so one module cannot import another: display.esm()
// puts this text in front of the widget's own when the Python class is defined. Nothing here is fetched.

function node(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function bytesOf(value) {  // a Bytes trait arrives as a DataView (or an ArrayBuffer)
  if (!value) return new Uint8Array(0);
  if (value instanceof DataView) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  return new Uint8Array(value.buffer || value);
}

const BOXES = new WeakMap();  // model -> its drawn box, moved into a new output when the view is redrawn

// anywidget's render({model, el}) for a widget whose page is `build(model)` -> parts ({box, status, ...}) and
// `draw(model, parts)` (it may return a promise), redrawn on the trait events `names`.
function mount(model, el, build, draw, names) {
  // Every new picture also updates the output's SVG fallback (update_display), which makes the front end render
  // the output again: the new view takes over the drawn box (and its hover, pickers, state and draw count).
  let parts = BOXES.get(model);
  if (!parts || parts.box.isConnected) {  // a first view, or a second view of the same widget beside the first
    parts = build(model);
    BOXES.set(model, parts);
  }
  el.append(parts.box);
  const failed = (err) => { parts.status.textContent = "Could not draw: " + err; };
  const again = () => {  // Python sets several traits at once (picture, hover, status): one redraw for them all
    if (parts.queued) return;
    parts.queued = true;
    queueMicrotask(() => {
      parts.queued = false;
      try { Promise.resolve(draw(model, parts)).catch(failed); } catch (err) { failed(err); }
    });
  };
  names.forEach((n) => model.on(n, again));
  again();
  return () => names.forEach((n) => model.off(n, again));
}
