// The Streamlit page's layer heading and bulk switches, and the link's layer.
import { el } from "./dom.js";

// The layer's heading and its bulk switches (the Streamlit page only: controls.bulk). They act on the layer shown,
// which travels with each request, so a switch never reaches heads that are not on screen.
export function buildControls(s) {
  const d = s.d, want = !!(d.controls && d.controls.bulk);
  s.controls.hidden = !want;
  if (!want) return;
  if (!s.heading || s.controlsH !== d.H) {
    s.controls.replaceChildren();
    s.controlsH = d.H;
    s.heading = el("p", "mhv-heading");
    s.heading.setAttribute("data-testid", "mhv-heading");
    const button = (text, action, help) => {
      const b = el("button", "mhv-btn mhv-bulk", text);
      b.dataset.action = action;
      b.addEventListener("click", () => bulk(s, action, null));
      b.helpText = help;
      return b;
    };
    s.bulkOff = button("All off", "off", "Switch every head of ");
    s.bulkOn = button("All on", "on", "Switch every head of ");
    s.only = el("select", "mhv-select mhv-only");
    s.only.setAttribute("data-testid", "mhv-only");
    s.only.setAttribute("aria-label", "Only this head on");
    s.only.append(el("option", null, "Only one on…"));
    for (let h = 0; h < d.H; h++) {
      const o = el("option", null, "H" + h);
      o.value = String(h);
      s.only.append(o);
    }
    s.only.addEventListener("change", () => {
      const h = Number(s.only.value);
      s.only.selectedIndex = 0;
      if (Number.isInteger(h)) bulk(s, "only", h);
    });
    const reset = button("Reset", "reset", "");
    reset.title = "Every head of every layer on.";
    s.controls.append(s.heading, s.bulkOff, s.bulkOn, s.only, reset);
  }
  headingFor(s);
}

export function headingFor(s) {
  if (!s.heading || s.controls.hidden) return;
  const d = s.d, name = d.names.layers[s.layer];
  const heads = d.H === 1 ? "its one head" : `all ${d.H} heads`;  // a written model's layer may have one
  s.heading.replaceChildren(el("strong", null, `Layer ${s.layer}: ${heads}`));
  s.heading.dataset.layer = s.layer;
  s.bulkOff.title = `Switch every head of ${name} off.`;
  s.bulkOn.title = `Switch every head of ${name} on.`;
  s.only.title = `Switch off every other head of ${name}.`;
}

function bulk(s, action, head) {
  const d = s.d, l = s.layer;
  for (let h = 0; h < d.H; h++) {
    const key = l + "," + h, off = s.off.has(key);
    const changes = action === "off" ? !off : action === "on" ? off : action === "only" ? off === (h === head) : off;
    if (changes || action === "reset") { s.pending.add(key); s.heads[h].cell.classList.add("mhv-pending"); }
  }
  s.setTrigger("bulk", { layer: l, action, head });
}

// The link's `layer`, written at once (the server's next run writes the same link: one value, never two).
export function linkLayer(s, l) {
  if (!(s.d.controls && s.d.controls.link)) return;
  try {
    const url = new URL(window.location.href);
    if (url.searchParams.get("layer") === String(l)) return;
    url.searchParams.set("layer", String(l));
    window.history.replaceState(window.history.state, "", url.toString());
  } catch (err) { /* a page without a writable history (a sandboxed frame) keeps the server's link */ }
}
