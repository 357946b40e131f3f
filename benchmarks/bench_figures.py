"""Figures: time to build what one update draws, and the bytes Streamlit sends the browser for it.

Shapes: 72 heads (MiniLM, 6 x 12) and 270 heads (SmolLM2, 30 x 9), at 16, 64 and 128 tokens, synthetic
softmax patterns (the payload of float32 arrays does not depend on the values).

Per update the app sends, for
  - the Layer view: one `plotting.heads_row_figure` per ROW of heads, as `ui.layer_grid` builds them since 40103c9
    (default 4 heatmaps per row: 12 heads -> 3 figures, 9 heads -> 3 figures; height 1100 / 4, one head off);
    at 0b134a5 it was one validated `head_figure` per head (12 or 9 figures);
  - the All-layers view: one `plotting.tiled_figure` of all heads (uint8 canvas since 9ebe066) plus the focused
    head's `head_figure`.
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

import numpy as np
import plotly.graph_objects as go
import plotly.io
import plotly.tools
import torch

from mha_viz import plotting

from _common import WORDS, machine, median, table, verdict

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


N_COLS = 4  # the app's default "Heatmaps per row"


def layer_update(att, tokens, layer, n_cols: int = N_COLS):
    """What `ui.layer_grid` builds for one layer: one heads_row_figure per row of n_cols heads (head 1 off)."""
    H = att.shape[1]
    figs = []
    for start in range(0, H, n_cols):
        heads = list(range(start, min(start + n_cols, H)))
        figs.append(plotting.heads_row_figure(att[layer, heads[0]:heads[-1] + 1], tokens,
                                              [f"L{layer} H{h}" for h in heads], [h == 1 for h in heads],
                                              columns=n_cols, height=int(1100 / n_cols)))
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


# -- before/after of the shipped fixes, and a prototype of the next one, in the same run (not used by the app) ---
def before_after_times(att, tokens, repeat: int) -> tuple[float, float, float]:
    """(seconds for H head figures WITH plotly validation, rebuilt in one constructor from today's head_figure
    dicts: a LOWER BOUND of 0b134a5's cost, which also validated key by key in update_layout; H head figures
    unvalidated; the row figures the app builds now)"""
    H = att.shape[1]
    recipes = [plotting.head_figure(att[0, h], tokens, f"L0 H{h}").to_dict() for h in range(H)]
    old, per_head, rows = [], [], []
    for _ in range(repeat):
        t = time.perf_counter()
        [go.Figure(data=r["data"], layout=r["layout"]) for r in recipes]  # validated, as 0b134a5
        old.append(time.perf_counter() - t)
        t = time.perf_counter()
        [plotting.head_figure(att[0, h], tokens, f"L0 H{h}") for h in range(H)]
        per_head.append(time.perf_counter() - t)
        t = time.perf_counter()
        layer_update(att, tokens, 0)
        rows.append(time.perf_counter() - t)
    return median(old), median(per_head), median(rows)


def tiled_float32_bytes(att) -> int:
    """Today's canvas as 0b134a5 encoded it: float32 with NaN gaps (at > 96 tokens the canvas is now max-pooled
    to 96 x 96 per tile, af8d7a0, so this is smaller than 0b134a5's float32 tile there)."""
    fig = plotting.tiled_figure(att, [f"L{i}" for i in range(att.shape[0])], [f"H{h}" for h in range(att.shape[1])],
                                zscale="head")
    z = np.asarray(fig.data[0].z)
    fig.data[0].z = np.where(z == 0, np.nan, (z.astype(np.float32) - 128) / 127).astype(np.float32)
    return serialise(fig)[0]


def tiled_png_bytes(att) -> int:
    """Prototype: the tiled canvas colour-mapped on the server into a PNG (go.Image source), one pixel per cell."""
    import base64
    import io

    from PIL import Image

    fig = plotting.tiled_figure(att, [f"L{i}" for i in range(att.shape[0])], [f"H{h}" for h in range(att.shape[1])],
                                zscale="head")
    z = np.asarray(fig.data[0].z).astype(np.float32)  # uint8 codes, 0 = gap
    shade = np.where(z == 0, 255, 255 - (z % 128) / 127 * 200).astype(np.uint8)  # (rows, cols)
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
            old, per_head, rows_now = before_after_times(att, tokens_of(t), args.repeat)
            u8 = serialise(plotting.tiled_figure(att, [f"L{i}" for i in range(L)], [f"H{h}" for h in range(H)],
                                                 zscale="head"))[0]
            f32, png = tiled_float32_bytes(att), tiled_png_bytes(att)
            proto.append([n_total, t, H, -(-H // N_COLS), f"{old * 1e3:.1f}", f"{per_head * 1e3:.1f}",
                          f"{rows_now * 1e3:.1f}", f"{old / rows_now:.1f}x", f"{f32 / 1e6:.3f}", f"{u8 / 1e6:.3f}",
                          f"{png / 1e6:.3f}"])
    print()
    print("Before/after (same run): one layer's figures as H validated head figures (one constructor each: a lower")
    print("bound of 0b134a5's update_layout path), H unvalidated head figures, and the row figures the app builds now;")
    print("the same tile canvas as float32 (0b134a5's encoding), uint8 (now) and a server-side PNG (prototype).")
    print(table(["heads", "tokens", "heads/layer", "row figures", "H validated ms (<= 0b134a5)", "H unvalidated ms",
                 "now: rows ms", "speed-up", "tile as float32 MB", "tile uint8 MB (now)",
                 "tile PNG MB (prototype)"], proto))
    print()
    print(table(["heads", "tokens", "view", "figures", "build ms", "serialise ms", "total ms", "MB sent",
                 "MB with .tolist()", "ratio", "array encoding", "< 1 MB (72 x 64)"], rows))


if __name__ == "__main__":
    main()
