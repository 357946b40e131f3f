// The views, grouped: data = {groups: [[label, [view, ...]], ...], current}. A click sends the view's name as the
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
          s.setTrigger("view", view);
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
}
