// The layers a grid's own element did not carry (head_grid.grid_rest: a new sentence's layers off screen), handed
// to the grid's module (mha_viz/web/grid/layers.js, `deliver`), which keeps them for the grid; nothing is drawn.
// A component of its own, a few lines long: Streamlit sends a component's code with each of its elements.
export default function ({ data, parentElement }) {
  parentElement.closest("[data-testid='stElementContainer']")?.classList.add("mhv-carrier");
  const store = globalThis.__mhvLayers || (globalThis.__mhvLayers = { inbox: [] });
  if (store.deliver) store.deliver(data);
  else store.inbox.push(data);  // before the grid's module: it takes them when it loads
}
