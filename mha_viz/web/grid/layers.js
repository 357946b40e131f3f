// The weights' codes, one layer at a time. A host sends only the layers the page does not hold yet: each layer is
// named by a digest of its codes and scales (mha_viz/web/payload.py, `digests`), and every layer received is kept
// here under its digest, for the grid that draws it and for a grid mounted again on the same page (another view,
// then back). A toggle in layer l sends the layers above l whose attention changed; a new sentence sends the layer
// on screen with the grid, and the others in a second message (`rest`: the layers it brings), which the first
// drawing does not wait for.
//
// A message's `att`: an Arrow table with one binary column per layer it carries, "z<l>": that layer's (H, T, T)
// uint8 codes, zlib-deflated, inflated natively by the browser (DecompressionStream). The saved figures' font is
// kept the same way: a column "font" (its family and licence in the column's metadata) under the digest `d.font`,
// sent once per page.
// weight of cell (l, h, q, k) = s.codes[l][(h*T + q)*T + k] / 255 * scale[l*H + h]

const KEEP_BYTES = 64 * 2 ** 20;  // layers kept beyond the ones on screen: a few runs of a long text

// One store per page, shared by every grid on it and by the element that brings a sentence's other layers (the
// Streamlit page's mha_viz/app/components/grid_rest.js: it hands them to `deliver`, or leaves them in `inbox` when
// it runs before this module).
const STORE = globalThis.__mhvLayers = { held: new Map(), sizes: new Map(), grids: new Set(), rest: [], inbox: [],
                                         fonts: new Map(), badges: new Map(), completions: new Map(),
                                         ...(globalThis.__mhvLayers || {}) };
const KEEP_RUNS = 8;  // runs whose captions and names (an early message's completion) are kept: a few, as the layers'

STORE.deliver = deposit;
for (const d of STORE.inbox.splice(0)) deposit(d);

async function inflate(z) {
  const stream = new Blob([z]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

// [[layer, deflated bytes], ...] of the layers a message carries.
function carried(att) {
  if (!att || !att.schema || !att.schema.fields) return [];
  return att.schema.fields.map(f => /^z(\d+)$/.exec(f.name)).filter(Boolean)
    .map(m => [Number(m[1]), att.getChild(m[0]).get(0)]);
}

// Every layer a message carries, inflating under its digest, and its font; resolves once all are kept. Inflating runs
// on the page's own thread: `spread` (another message's layers, none of them on screen) starts after the next frame
// and takes one task per layer, so the page paints between them. In one run of microtasks, SmolLM2's 29 layers at
// 128 tokens held the frame that shows the layer on screen for about 20 ms.
export function receive(d, spread = false) {
  const field = d.att && d.att.schema && d.att.schema.fields ? d.att.schema.fields.find(f => f.name === "font") : null;
  if (field && d.font) {
    const meta = field.metadata || new Map();
    STORE.fonts.set(d.font, { bytes: d.att.getChild("font").get(0), family: meta.get("family") || "DejaVu Sans",
                              licence: meta.get("licence") || "" });
  }
  const work = [];
  let turn = spread ? afterFrame() : null;  // when the next layer may start inflating
  for (const [l, z] of carried(d.att)) {
    const digest = d.digests[l];
    if (!STORE.held.has(digest)) {
      const start = turn ? turn.then(() => inflate(z)) : inflate(z);
      if (turn) turn = start.then(nextTask, nextTask);
      const codes = start.then((c) => { STORE.sizes.set(digest, c.length); return c; });
      codes.catch(() => STORE.held.delete(digest));  // a layer that failed to inflate is asked for again
      STORE.held.set(digest, codes);
    }
    work.push(STORE.held.get(digest));
  }
  return Promise.all(work);
}

// (Declarations, not consts: the module delivers the messages already in `inbox` as it loads, above.)
function nextTask() {
  return new Promise(r => setTimeout(r, 0));
}

// After the next frame, or 100 ms (a page in a background tab draws no frame until it is shown).
function afterFrame() {
  return new Promise((r) => {
    const timer = setTimeout(r, 100);
    requestAnimationFrame(() => { clearTimeout(timer); setTimeout(r, 0); });
  });
}

// The layers of another message (`rest`): kept for the grids that wait for them, which are told once they are in.
// Its captions (`badges`, under the run's `digest`) are kept at once, and a grid drawing that run shows them.
function deposit(d) {
  STORE.rest = d.digests;
  if (d.completes) {  // the run a first message named early (see `completed`): every grid showing it takes the names
    keepLast(STORE.completions, d.completes, { digest: d.digest, digests: d.digests, scale: d.scale });
    for (const s of STORE.grids) s.complete(d.completes);
  }
  if (d.digest && d.badges && Object.keys(d.badges).length) {
    keepLast(STORE.badges, d.digest, d.badges);
    document.dispatchEvent(new CustomEvent("mhv-badges", { detail: d.digest }));
  }
  return receive(d, true).then(() => { for (const s of STORE.grids) s.arrived(); });
}

// `map` keeps `value` under `key` as its newest entry, and its KEEP_RUNS newest runs only.
function keepLast(map, key, value) {
  map.delete(key);
  map.set(key, value);
  while (map.size > KEEP_RUNS) map.delete(map.keys().next().value);
}

// A grid's first message may be sent while its run is still computing the layers above the one on screen (the
// Streamlit page: head_grid.early_payload): it names the run by a provisional digest, and the layers not yet known
// by null digests (their scales 0) in its `rest`. The second message completes it (`completes`: that digest), with
// every layer's digest and scale and the run's digest. -> `d` with those, once they came; else `d` itself.
export function completed(d) {
  const c = d && d.digest ? STORE.completions.get(d.digest) : undefined;
  return c ? { ...d, ...c } : d;
}

// Head (l, h)'s caption: the update's own (the layer on screen's, or every layer's where the host sends them all),
// else the one another message brought for the same run; "" before it comes.
export function badgeOf(d, l, h) {
  const key = l + "," + h, own = d.badges && d.badges[key];
  if (own !== undefined && own !== null) return own;
  const kept = STORE.badges.get(d.digest);
  return (kept && kept[key]) || "";
}

// The codes of every layer of `d` the page holds (null where it does not yet), the layers missing, and of those the
// ones still inflating (another message's: not waited for here; `deposit` tells the grid when they are in).
export async function gather(d) {
  const codes = [], missing = [], inflating = [];
  for (let l = 0; l < d.L; l++) {
    const digest = d.digests[l], held = STORE.held.get(digest);
    if (held === undefined || !STORE.sizes.has(digest)) {
      codes.push(null);
      missing.push(l);
      if (held !== undefined) inflating.push(l);
      continue;
    }
    STORE.held.delete(digest);  // most recently used last: the oldest are let go first
    STORE.held.set(digest, held);
    codes.push(await held);
  }
  prune(new Set([...d.digests, ...STORE.rest]));
  return { codes, missing, inflating };
}

function prune(keep) {
  let total = 0;
  for (const [digest, size] of STORE.sizes) if (!keep.has(digest)) total += size;
  for (const digest of [...STORE.held.keys()]) {
    if (total <= KEEP_BYTES) break;
    if (keep.has(digest) || !STORE.sizes.has(digest)) continue;
    total -= STORE.sizes.get(digest);
    STORE.held.delete(digest);
    STORE.sizes.delete(digest);
  }
}

// The font kept under `digest` ({bytes, family, licence}), or null: the saved figures name the font stack.
export function fontOf(digest) {
  return (digest && STORE.fonts.get(digest)) || null;
}

// A grid that waits for layers another message brings; `s.arrived()` runs when some come in.
export function waitFor(s, waiting) {
  if (waiting) STORE.grids.add(s); else STORE.grids.delete(s);
}

export function weight(s, l, h, q, k) {
  const d = s.d;
  return s.codes[l][(h * d.Q + q) * d.T + k] / 255 * d.scale[l * d.H + h];
}
