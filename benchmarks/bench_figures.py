"""Figures: time to build what one update draws, and the bytes Streamlit sends the browser for it.

Shapes: 72 heads (MiniLM, 6 x 12) and 270 heads (SmolLM2, 30 x 9), at 16, 64 and 128 tokens, synthetic
softmax patterns (the payload of float32 arrays does not depend on the values).

Per update the app sends, for
  - the Layer view: one `plotting.head_figure` per head of the layer (12 or 9 figures);
  - the All-layers view: one `plotting.tiled_figure` of all heads plus the focused head's `head_figure`.
Streamlit serialises each chart with `plotly.io.to_json(figure, validate=False)` (streamlit/elements/plotly_chart.py)
after `plotly.tools.return_figure_from_figure_or_data(fig, validate_figure=True)`, then hashes the spec for the
element id; "serialise ms" is those steps, "bytes" the length of the JSON spec that goes into the protobuf.
The reference is the same figures with `.tolist()` data (what DESIGN.md warns against), built in the same run.

Target: bytes per update < 1 MB at 72 heads x 64 tokens.

    python benchmarks/bench_figures.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import hashlib
import time

from _common import WORDS, machine, median, table, verdict

import json

import numpy as np
import plotly.graph_objects as go
import plotly.io
import plotly.tools
import torch

from mha_viz import plotting

TARGET_BYTES = 1_000_000
SHAPES = {72: (6, 12), 270: (30, 9)}
LENGTHS = (16, 64, 128)


def patterns(n_layers: int, n_heads: int, t: int, causal: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(n_layers, n_heads, t, t, generator=g) * 2  # (L, H, Q, K)
    if causal:
        scores = scores.masked_fill(torch.ones(t, t).triu(1).bool(), float("-inf"))
    return scores.softmax(-1)  # (L, H, Q, K)


def tokens_of(t: int) -> list[str]:
    return [WORDS[i % len(WORDS)] for i in range(t)]


def serialise(fig) -> tuple[int, float]:
    """What st.plotly_chart does with a figure before it goes on the wire: (bytes, seconds)."""
    t = time.perf_counter()
    fig = plotly.tools.return_figure_from_figure_or_data(fig, validate_figure=True)
    spec = plotly.io.to_json(fig, validate=False)
    hashlib.md5(spec.encode()).hexdigest()  # streamlit hashes the spec into the element id
    return len(spec.encode()), time.perf_counter() - t


def layer_update(att, tokens, layer):
    figs = [plotting.head_figure(att[layer, h], tokens, f"L{layer} H{h}", off=(h == 1)) for h in range(att.shape[1])]
    return figs


def all_layers_update(att, tokens):
    L, H = att.shape[:2]
    tiled = plotting.tiled_figure(att, [f"L{i}" for i in range(L)], [f"H{h}" for h in range(H)],
                                  off={(0, 1)}, selected=(0, 0), zscale="head")
    focus = plotting.head_figure(att[0, 0], tokens, "L0 H0", size=460, colorbar=True)
    return [tiled, focus]


def as_lists(fig):
    """The reference: the same figure with every array turned into nested Python lists."""
    for trace in fig.data:
        for name in ("z", "x", "y"):
            v = getattr(trace, name, None)
            if isinstance(v, np.ndarray):
                trace[name] = v.tolist()
    return fig


def measure(build, repeat: int):
    builds, sers, sizes = [], [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        figs = build()
        builds.append(time.perf_counter() - t)
        total, ser = 0, 0.0
        for f in figs:
            b, s = serialise(f)
            total += b
            ser += s
        sers.append(ser)
        sizes = total
    ref = sum(serialise(as_lists(f))[0] for f in build())
    return median(builds), median(sers), sizes, ref, figs


# -- prototypes of the suggested fixes, measured next to the real thing (not used by the app) ----------------
def head_figure_unvalidated(pattern, tokens, title, **kw):
    """Same JSON as plotting.head_figure, built in one constructor with plotly's validation off."""
    d = plotting.head_figure(pattern, tokens, title, **kw).to_dict()  # layout recipe only: see prototype_times
    return go.Figure(data=d["data"], layout=d["layout"], _validate=False)


def prototype_times(att, tokens, repeat: int) -> tuple[float, float, bool]:
    """(seconds for one layer's figures as now, as unvalidated dicts, same JSON?)"""
    H = att.shape[1]
    recipes = [plotting.head_figure(att[0, h], tokens, f"L0 H{h}").to_dict() for h in range(H)]
    now, fast = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        a = [plotting.head_figure(att[0, h], tokens, f"L0 H{h}") for h in range(H)]
        now.append(time.perf_counter() - t)
        t = time.perf_counter()
        b = [go.Figure(data=r["data"], layout=r["layout"], _validate=False) for r in recipes]
        fast.append(time.perf_counter() - t)
    same = all(json.loads(plotly.io.to_json(x, validate=False)) == json.loads(plotly.io.to_json(y, validate=False))
               for x, y in zip(a, b))
    return median(now), median(fast), same


def tiled_uint8_bytes(att) -> int:
    """The tiled canvas quantised to uint8 (255 = gap), what a uint8 tiled_figure would send."""
    fig = plotting.tiled_figure(att, [f"L{i}" for i in range(att.shape[0])], [f"H{h}" for h in range(att.shape[1])],
                                zscale="head")
    z = np.asarray(fig.data[0].z, dtype=np.float32)
    q = np.where(np.isnan(z), 255, np.clip((z + 1) * 127, 0, 254)).astype(np.uint8)
    fig.data[0].z = q
    return serialise(fig)[0]


def tiled_png_bytes(att) -> int:
    """The tiled canvas colour-mapped on the server into a PNG (go.Image source), one pixel per cell."""
    import base64
    import io

    from PIL import Image

    fig = plotting.tiled_figure(att, [f"L{i}" for i in range(att.shape[0])], [f"H{h}" for h in range(att.shape[1])],
                                zscale="head")
    z = np.asarray(fig.data[0].z, dtype=np.float32)
    shade = np.where(np.isnan(z), 255, 255 - np.clip(z, 0, 1) * 200).astype(np.uint8)  # (rows, cols)
    rgb = np.stack([shade, shade, np.full_like(shade, 255)], axis=-1)  # a blue ramp; colours do not change size much
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", optimize=False)
    img = go.Figure(go.Image(source="data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()))
    for trace in fig.data[1:]:
        img.add_trace(trace)  # keep the click/hover scatter layer
    img.update_layout(fig.layout)
    return serialise(img)[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"# bench_figures | {machine()} | plotly {plotly.__version__} | repeat {args.repeat}")
    rows = []
    for n_total, (L, H) in SHAPES.items():
        for t in LENGTHS:
            att = patterns(L, H, t, causal=(n_total == 270))
            tokens = tokens_of(t)
            for view, build in (("layer", lambda: layer_update(att, tokens, 0)),
                                ("all layers", lambda: all_layers_update(att, tokens))):
                b, s, size, ref, figs = measure(build, args.repeat)
                encoded = "bdata" in plotly.io.to_json(figs[0], validate=False)
                rows.append([n_total, t, view, len(figs), f"{b * 1e3:.1f}", f"{s * 1e3:.1f}", f"{(b + s) * 1e3:.1f}",
                             f"{size / 1e6:.3f}", f"{ref / 1e6:.3f}", f"{size / ref:.2f}",
                             "base64" if encoded else "lists",
                             verdict(size, TARGET_BYTES) if (n_total, t) == (72, 64) else ""])
                print(f"[figures] {n_total} heads {t} tok {view}: build {b * 1e3:.1f} ms, serialise {s * 1e3:.1f} ms, "
                      f"{size / 1e6:.3f} MB (tolist {ref / 1e6:.3f} MB)", flush=True)
    proto = []
    for n_total, (L, H) in SHAPES.items():
        for t in LENGTHS:
            att = patterns(L, H, t, causal=(n_total == 270))
            now, fast, same = prototype_times(att, tokens_of(t), args.repeat)
            f32 = serialise(plotting.tiled_figure(att, [f"L{i}" for i in range(L)], [f"H{h}" for h in range(H)],
                                                  zscale="head"))[0]
            u8, png = tiled_uint8_bytes(att), tiled_png_bytes(att)
            proto.append([n_total, t, H, f"{now * 1e3:.1f}", f"{fast * 1e3:.1f}", f"{now / fast:.1f}x",
                          "yes" if same else "NO", f"{f32 / 1e6:.3f}", f"{u8 / 1e6:.3f}", f"{png / 1e6:.3f}"])
    print()
    print("Prototypes of the suggested fixes (same run): one layer's head figures built as now vs as one unvalidated")
    print("constructor (go.Figure(data, layout, _validate=False)); the all-layers tile as float32 vs uint8 vs server PNG.")
    print(table(["heads", "tokens", "figures", "head_figure x H ms", "unvalidated ms", "speed-up", "same JSON",
                 "tile float32 MB", "tile uint8 MB", "tile PNG MB"], proto))
    print()
    print(table(["heads", "tokens", "view", "figures", "build ms", "serialise ms", "total ms", "MB sent",
                 "MB with .tolist()", "ratio", "array encoding", "< 1 MB (72 x 64)"], rows))


if __name__ == "__main__":
    main()
