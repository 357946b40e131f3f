// The views, grouped: data = {groups: [[label, [view, ...]], ...], current, hint: [step, ...]}. A click sends the view's name as the
// `view` trigger; the server opens it (and marks it current when it answers).
const STATES = new WeakMap();

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  let s = STATES.get(parentElement);
  if (!s) {
    s = { nav: document.createElement("nav"), key: null, buttons: [] };
    s.nav.className = "mhn";
    s.nav.setAttribute("aria-label", "Views");
    parentElement.append(s.nav);
    STATES.set(parentElement, s);
  }
  s.setTrigger = setTriggerValue;
  const key = JSON.stringify(data.groups);
  if (key !== s.key) {
    s.key = key;
    s.nav.replaceChildren();
    s.buttons = [];
    for (const [label, views] of data.groups) {
      const group = document.createElement("div");
      group.className = "mhn-group";
      group.setAttribute("role", "group");
      group.setAttribute("aria-label", label);
      const head = document.createElement("span");
      head.className = "mhn-label";
      head.textContent = label;
      group.append(head);
      for (const view of views) {
        const b = document.createElement("button");
        b.className = "mhn-view";
        b.textContent = view;
        b.dataset.view = view;
        b.addEventListener("click", () => {
          s.buttons.forEach(x => x.toggleAttribute("aria-current", x === b));
          b.setAttribute("aria-current", "page");
          s.setTrigger("view", viewEvent(view));
        });
        group.append(b);
        s.buttons.push(b);
      }
      s.nav.append(group);
    }
  }
  for (const b of s.buttons) {
    if (b.dataset.view === data.current) b.setAttribute("aria-current", "page");
    else b.removeAttribute("aria-current");
  }
  hint(data.hint, data.hint_view, s);
}

// A view asked of the server, with the link's layer: the Layer grid's tabs write it before they tell the server
// (head_grid), so the view opened shows the layer that was on screen.
function viewEvent(view) {
  const layer = new URLSearchParams(window.location.search).get("layer");
  return layer !== null && /^\d+$/.test(layer) ? { view, layer: Number(layer) } : view;
}

// -- the first-visit hint: three steps (the first points to the Lesson, with a link that opens it) in a card at the top of the sidebar, in its flow, shown until dismissed; the
// dismissal is kept in this browser (localStorage), so it never comes back in the way. In the flow, not fixed over
// the sidebar's foot as it was: at 1000x800 a fixed card covered "Heatmaps per row" and every control under it. It
// moves only the sidebar's controls down, while it is there, and nothing of the main column. Without a sidebar
// (none in this page) it floats at the bottom left as before. Put back if the sidebar is drawn anew.
const HINT_KEY = "mha-viz-hint-dismissed";

function hint(steps, view, s) {
  // The card's words depend on the view (inside the Lesson it describes the Lesson): a new text replaces it.
  const text = JSON.stringify([steps, view]);
  const shown = document.querySelector(".mhn-hint");
  if (shown && shown.dataset.text === text) return;
  if (shown) shown.remove();
  if (!steps || !steps.length) return;
  try { if (window.localStorage.getItem(HINT_KEY)) return; } catch (e) { /* no storage: show it this once */ }
  const side = document.querySelector('[data-testid="stSidebarUserContent"]');
  const card = document.createElement("aside");
  card.className = "mhn-hint";
  card.dataset.text = text;
  card.setAttribute("aria-label", "First visit");
  const title = document.createElement("strong");
  title.textContent = "New here?";
  const list = document.createElement("ol");
  for (const step of steps) {
    const li = document.createElement("li");
    li.textContent = step;
    list.append(li);
  }
  const close = document.createElement("button");
  close.className = "mhn-hint-close";
  close.textContent = "Got it";
  close.addEventListener("click", () => {
    try { window.localStorage.setItem(HINT_KEY, "1"); } catch (e) { /* still closes */ }
    card.remove();
  });
  // A link, not a button: "Got it" stays the card's one button. It opens the view in this session (no reload).
  const open = document.createElement("a");
  open.className = "mhn-hint-open";
  open.href = `?view=${encodeURIComponent(view)}`;
  open.textContent = `Open the ${view}`;
  open.addEventListener("click", (event) => {
    event.preventDefault();
    for (const b of s.buttons) b.toggleAttribute("aria-current", b.dataset.view === view);
    s.setTrigger("view", viewEvent(view));
  });
  if (view) card.append(title, list, open, close);
  else card.append(title, list, close);
  if (side) side.prepend(card);
  else { card.classList.add("mhn-float"); document.body.append(card); }
}
