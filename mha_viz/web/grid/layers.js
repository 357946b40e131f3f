// The weights' codes: the Arrow cell's deflated bytes inflated natively by the browser (DecompressionStream), and
// held as one (H, T, T) view per layer.
// weight of cell (l, h, q, k) = s.codes[l][(h*T + q)*T + k] / 255 * scale[l*H + h]

// d.att's one binary cell "z", the (L, H, T, T) codes deflated -> [L] views of (H, T, T) codes.
export async function decode(d) {
  const z = d.att.getChild("z").get(0);
  const stream = new Blob([z]).stream().pipeThrough(new DecompressionStream("deflate"));
  const all = new Uint8Array(await new Response(stream).arrayBuffer()), n = d.H * d.T * d.T;
  return Array.from({ length: d.L }, (_, l) => all.subarray(l * n, (l + 1) * n));
}

export function weight(s, l, h, q, k) {
  const d = s.d;
  return s.codes[l][(h * d.T + q) * d.T + k] / 255 * d.scale[l * d.H + h];
}
