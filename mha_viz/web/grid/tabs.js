// The layer tabs: a tab is drawn at once; the host learns it after (tellLayer and layerFor in main.js).
function buildTabs(s) {
  const d = s.d;
  if (s.tabs.childElementCount !== d.L) {
    s.tabs.replaceChildren();
    for (let l = 0; l < d.L; l++) {
      const b = el("button", "mhv-tab", d.names.layers[l]);
      b.setAttribute("role", "tab");
      b.dataset.layer = l;
      b.title = "Show layer " + l + " (the other views and the link follow)";
      b.addEventListener("click", () => setLayer(s, l));
      s.tabs.append(b);
    }
  }
  [...s.tabs.children].forEach((b, l) => b.setAttribute("aria-selected", String(l === s.layer)));
}

function setLayer(s, l) {
  if (l === s.layer) return;
  s.layer = l;
  [...s.tabs.children].forEach((b, i) => b.setAttribute("aria-selected", String(i === l)));
  drawLayer(s);
  if (s.focus) openFocus(s, l, s.focus[1]);
  linkLayer(s, l);
  if (s.d.controls && s.d.controls.link) {
    s.localLayer = l;  // shown until the page's answer says the same layer (layerFor in main.js)
    tellLayer(s);      // once this drawing is on screen
  } else {
    s.askedLayer = l;
    s.setTrigger("layer", l);  // the notebook's `w.layer` follows at once
  }
}
