// The layer tabs: a tab is drawn at once; the host learns it after (tellLayer), and an update's layer is chosen
// against the tab (layerFor).
import { linkLayer } from "./controls.js";
import { el } from "./dom.js";
import { openFocus } from "./focus.js";
import { drawLayer } from "./heads.js";

const TELL_MS = 150;      // after a tab's paint, before the page is told of it (tellLayer)

export function buildTabs(s) {
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
    s.localLayer = l;  // shown until the page's answer says the same layer (layerFor)
    tellLayer(s);      // once this drawing is on screen
  } else {
    s.askedLayer = l;
    s.setTrigger("layer", l);  // the notebook's `w.layer` follows at once
  }
}

// The layer to show for an update from the host, and the host told of a layer it does not have yet.
// - The page (controls.link): a tab is the grid's, its heading's and the link's in the click's own task; the page
//   is told after that drawing is on screen (tellLayer), and its rerun redraws what the server draws for the layer
//   (the switches under the grid, their label and bulk buttons). An answer that still says another layer (a run
//   for another reason, started before the page was told) keeps the tab's layer and tells the page again.
// - The notebook: a tab is asked of the host at once (Python's `w.layer` follows it); an answer still on its way
//   from before the click does not take the grid back.
export function layerFor(s, d) {
  if (s.localLayer !== null && s.localLayer >= d.L) s.localLayer = null;  // another model: its own layers
  if (s.localLayer !== null) {
    if (d.layer === s.localLayer) {
      s.localLayer = null;
    } else {
      if (s.toldLayer !== d) {  // once per update: the answer to it says the same layer, or another rerun does
        s.toldLayer = d;
        tellLayer(s);
      }
      return s.localLayer;
    }
  }
  if (s.askedLayer === null || d.layer === s.askedLayer) {
    s.askedLayer = null;
    return Math.min(d.layer, d.L - 1);
  }
  return s.layer;
}

// The page told of the tab's layer TELL_MS after the tab's drawing is painted: tabs clicked within that time are told
// once, as the last of them (a visitor stepping through the layers costs the server one rerun, not one a layer),
// and the rerun's answer (the server's reply, then 0.1-0.2 s of the browser applying its deltas on the main thread)
// lands after the frames that show the tab, not in them. The page's switches follow about 0.3 s after the click.
function tellLayer(s) {
  const n = ++s.tells;
  requestAnimationFrame(() => setTimeout(() => {
    // Not when the grid left the page meanwhile (another view opened with the link's layer: nav.js)
    if (n === s.tells && s.localLayer !== null && s.root.isConnected) s.setTrigger("layer", s.localLayer);
  }, TELL_MS));
}
