"""The circuits' picture, drawn as SVG in Python (`mha_viz.show_circuits`, notebook/maps_widget.py): a heads x heads
composition map as one embedded PNG with its colour bar, the clicked head's strongest reads and writes, and its
singular values, on the drawing parts of notebook/maps.py (which draws the census's picture). No streamlit, no
Jupyter here.
"""
from __future__ import annotations

import base64

import numpy as np

from mha_viz import plotting
from mha_viz.analysis.circuits import left_out_words
from mha_viz.names import column_name, head_name
from mha_viz.notebook import svg as _svg
from mha_viz.notebook.maps import (
    GAP,
    SELECTED,
    Head,
    colour_at,
    colour_bar,
    escaped,
    fitted_lines,
    svg_cell,
    svg_doc,
    svg_text,
)

COMPOSITION = [c for _, c in plotting.COMPOSITION_SCALE]  # the app's composition map: white at the random baseline
COPYING = ["#2166ac", "#67a9cf", "#d1e5f0", "#f7f7f7", "#fddbc7", "#ef8a62", "#b2182b"]  # -1 (suppress) .. +1 (copy)
QK_COLOUR, OV_COLOUR = "#2166ac", "#b2182b"  # as plotting.singular_values_figure
MODE_WORDS = {"q": "query", "k": "key", "v": "value"}


def _png_href(rgb: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(_svg.png(rgb)).decode()


def composition_grid(circuits, mode: str) -> np.ndarray:
    """The map as drawn: a row per later head (reads), a column per earlier head (writes), as the app's
    composition map -> (N, N) float32, NaN where the column's layer is not earlier."""
    N = circuits.n_layers * circuits.n_heads
    return circuits.composition[mode].float().reshape(N, N).T.contiguous().numpy().astype(np.float32)  # (N, N)


def composition_values(circuits, mode: str) -> bytes:
    """The drawn map's values for the page's hover, row-major float32 little-endian (NaN kept)."""
    return composition_grid(circuits, mode).astype("<f4").tobytes()


def composition_range(circuits, mode: str) -> tuple[float, float]:
    """White at the random matrices' mean (and below it), dark red at the largest score (as the app)."""
    base = circuits.baseline[mode].mean
    grid = composition_grid(circuits, mode)
    top = float(np.nanmax(grid)) if np.isfinite(grid).any() else base
    return base, max(top, base + 1e-6)


def reads_from(circuits, mode: str, lh: Head, n: int = 3) -> list[tuple[Head, float]]:
    """The earlier heads whose output head `lh` reads most through its query/key/value, best first."""
    layer, head = lh
    if layer == 0:
        return []
    reads = circuits.composition[mode][:layer, :, layer, head].flatten()  # (layer * H,)
    order = reads.argsort(descending=True)[:n].tolist()
    return [((i // circuits.n_heads, i % circuits.n_heads), float(reads[i])) for i in order]


def writes_into(circuits, mode: str, lh: Head, n: int = 3) -> list[tuple[Head, float]]:
    """The later heads that read head `lh`'s output most through their query/key/value, best first."""
    layer, head = lh
    if layer == circuits.n_layers - 1:
        return []
    feeds = circuits.composition[mode][layer, head, layer + 1:].flatten()  # ((L - layer - 1) * H,)
    order = feeds.argsort(descending=True)[:n].tolist()
    return [((layer + 1 + i // circuits.n_heads, i % circuits.n_heads), float(feeds[i])) for i in order]


def circuits_svg(circuits, mode: str, selected: Head | None) -> str:
    """One picture of the circuits: the heads x heads composition map of `mode` with its random baseline in the
    legend (the three highest pairs outlined black, the selected head's row and column red), each head's OV
    copying score, and for the selected head the singular values of its QK and OV maps."""
    L, H = circuits.n_layers, circuits.n_heads
    N = L * H
    base = circuits.baseline[mode]
    body = [svg_text(GAP, GAP + 30, f"{mode.upper()}-composition (Elhage et al. 2021): how much an earlier head's "
                                  f"output can feed a later head's {MODE_WORDS[mode]}", 11, bold=True),
            svg_text(GAP, GAP + 44, f"row: the later head (reads) · column: the earlier head (writes) · white: at or "
                                 f"below random matrices ({base.mean:.3f}) · click a row to select its head", 10,
                  fill="#555")]
    cell = max(2, min(24, 480 // N))
    left, top = GAP + 46, GAP + 56
    side = N * cell
    grid = composition_grid(circuits, mode)  # (N, N)
    lo, hi = composition_range(circuits, mode)
    table = _svg.lut(COMPOSITION)
    x = np.clip((np.nan_to_num(grid, nan=lo) - lo) / (hi - lo), 0.0, 1.0)  # (N, N)
    rgb = table[np.rint(x * 255).astype(int)]  # (N, N, 3)
    rgb[~np.isfinite(grid)] = [244, 244, 244]
    body.append(f'<image class="mhm-map" data-map="composition" x="{left}" y="{top}" width="{side}" height="{side}" '
                f'preserveAspectRatio="none" style="image-rendering: pixelated" href="{_png_href(rgb)}"/>')
    body.append(f'<rect x="{left}" y="{top}" width="{side}" height="{side}" fill="none" stroke="#bbb"/>')
    for layer in range(L):  # layer boundaries and names on both axes
        p = layer * H * cell
        if layer:
            line = 'stroke="#ccc" stroke-width="0.5" pointer-events="none"/>'
            body.append(f'<line x1="{left + p}" x2="{left + p}" y1="{top}" y2="{top + side}" {line}')
            body.append(f'<line x1="{left}" x2="{left + side}" y1="{top + p}" y2="{top + p}" {line}')
        mid = p + H * cell / 2
        body.append(svg_text(left - 4, top + mid + 3, f"L{layer}", 10, "end"))
        body.append(svg_text(left + mid, top + side + 12, f"L{layer}", 10, "middle"))
    for a, b, _ in circuits.top_pairs(mode, 3):
        col, row = a[0] * H + a[1], b[0] * H + b[1]
        body.append(f'<rect class="mhm-top-pair" x="{left + col * cell}" y="{top + row * cell}" width="{cell}" '
                    f'height="{cell}" fill="none" stroke="#000" stroke-width="1.5" pointer-events="none"/>')
    if selected is not None:
        i = selected[0] * H + selected[1]
        body.append(f'<rect class="mhm-selected" x="{left}" y="{top + i * cell}" width="{side}" height="{cell}" '
                    f'fill="none" stroke="{SELECTED}" stroke-width="1.5" pointer-events="none"/>')
        body.append(f'<rect class="mhm-selected" x="{left + i * cell}" y="{top}" width="{cell}" height="{side}" '
                    f'fill="none" stroke="{SELECTED}" stroke-width="1" stroke-dasharray="3,2" pointer-events="none"/>')
    marks = [(base.mean, "random mean"), (base.p99, "random 99th pct")]
    bar, bar_w = colour_bar(left + side + 14, top, max(side, 150), COMPOSITION, lo, hi, marks)
    body += bar
    body.append(svg_text(left - 30, top + side + 26, "outlined: the 3 highest pairs (listed below); red: the selected "
                                                "head's row (what it reads) and column (what reads it)", 10,
                      fill="#555"))
    y0 = top + max(side, 150) + 44
    width = left + side + 14 + bar_w + GAP
    # OV copying, a layers x heads map
    if circuits.copying is not None:
        body.append(svg_text(GAP, y0, "OV copying: sum(λ)/sum(|λ|) of the token-to-token OV map (+1: copies the "
                                   "attended token; -1: suppresses it)", 11, bold=True))
        c_cell = 22 if H <= 16 else 16
        c_left, c_top = GAP + 34, y0 + 10
        table = _svg.lut(COPYING)
        for layer in range(L):
            body.append(svg_text(c_left - 4, c_top + layer * c_cell + c_cell * 0.68, f"L{layer}", 10, "end"))
            for head in range(H):
                lh = (layer, head)
                v = float(circuits.copying[lh])
                stroke, sw = (SELECTED, 2.5) if lh == selected else ("#fff", 0.5)
                body.append(svg_cell(c_left + head * c_cell, c_top + layer * c_cell, c_cell, c_cell,
                                  colour_at(table, v, -1.0, 1.0), f"{head_name(lh)} · OV copying {v:+.3f}", lh, stroke,
                                  sw))
        for head in range(H):
            body.append(svg_text(c_left + head * c_cell + c_cell / 2, c_top + L * c_cell + 12, column_name(head), 10,
                              "middle"))
        bar, _ = colour_bar(c_left + H * c_cell + 14, c_top, max(L * c_cell, 80), COPYING, -1.0, 1.0, [])
        body += bar
        sv_left = c_left + H * c_cell + 90
        y_sv = c_top
        y_end = c_top + max(L * c_cell, 80) + 22
    else:
        body.append(svg_text(GAP, y0, "OV copying: n/a (this model gives no token embeddings)", 11, fill="#555"))
        sv_left, y_sv, y_end = GAP + 40, y0 + 16, y0 + 16
    parts, sv_w, sv_h = _singular_values(circuits, selected, sv_left, y_sv)
    body += parts
    width = max(width, sv_left + sv_w + GAP)
    width = max(width, 760)
    lines = fitted_lines(_circuit_lines(circuits, mode, selected), width)
    y_text = max(y_end, y_sv + sv_h) + 14
    for i, (words, kind) in enumerate(lines):
        body.append(svg_text(GAP, y_text + 14 * i, words, 11, bold=kind == "bold",
                          fill="#555" if kind == "note" else "#222", extra=' class="mhm-head-info"'))
    # What the maps leave out, in the app's words (analysis.circuits.left_out_words): the norms, biases and MLPs,
    # then what this model's attention does beyond its weights per head (a qk-norm, OLMo's clip_qkv).
    y_note = y_text + 14 * len(lines) + 8
    note = left_out_words(circuits) + (f" {circuits.composition_note}" if circuits.composition_note else "")
    notes = fitted_lines([(note, "note")], width)
    for i, (words, _) in enumerate(notes):
        body.append(svg_text(GAP, y_note + 14 * i, words, 11, fill="#555", extra=' class="mhm-left-out"'))
    height = y_note + 14 * len(notes) + GAP
    rotary = "; rotary: its QK map at offset 0" if circuits.rotary else ""
    return svg_doc(width, height, f"Circuits of {circuits.name} from its weights: {L} layers x {H} heads "
                               f"(d_model {circuits.d_model}, d_head {circuits.d_head}; norms ignored{rotary})",
                body, "circuits")


def _singular_values(circuits, selected: Head | None, x0: float, y0: float) -> tuple[list[str], float, float]:
    w, h = 300, 150
    if selected is None:
        return [svg_text(x0, y0 + 12, "Select a head to see its singular values.", 11, fill="#555")], w, 20
    name = head_name(selected)
    out = [svg_text(x0, y0 + 2, f"{name}: singular values of its QK and OV maps, over the largest", 11, bold=True)]
    top = y0 + 12
    out.append(f'<rect x="{x0}" y="{top}" width="{w}" height="{h}" fill="#fafafa" stroke="#bbb"/>')
    out.append(svg_text(x0 - 4, top + 4, "1", 10, "end", "#444"))
    out.append(svg_text(x0 - 4, top + h, "0", 10, "end", "#444"))
    for label, s, rank, colour, row in (("QK", circuits.qk_singular[selected], circuits.qk_rank[selected], QK_COLOUR,
                                         0),
                                        ("OV", circuits.ov_singular[selected], circuits.ov_rank[selected], OV_COLOUR,
                                         1)):
        v = s.float()  # (dh,)
        k = v.numel()
        scale = max(float(v[0]), 1e-30)
        px = lambda i: x0 + 8 + i * (w - 16) / max(1, k - 1)  # noqa: E731
        py = lambda r: top + h - r * (h - 8)  # noqa: E731
        pts = " ".join(f"{px(i):.1f},{py(float(v[i]) / scale):.1f}" for i in range(k))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for i in range(k):
            r = float(v[i]) / scale
            tip = f"{name} {label} #{i + 1}: {float(v[i]):.4g} ({r:.3f} of the largest)"
            out.append(f'<circle class="mhm-sv" cx="{px(i):.1f}" cy="{py(r):.1f}" r="3" fill="{colour}" '
                       f'data-tip="{escaped(tip)}"><title>{escaped(tip)}</title></circle>')
        out.append(svg_text(x0 + w - 4, top + 14 + 14 * row, f"{label}: effective rank {float(rank):.1f} of {k}", 10,
                         "end", colour))
    out.append(svg_text(x0 + w / 2, top + h + 12, "singular value #", 10, "middle", "#444"))
    return out, w, h + 26


def _circuit_lines(circuits, mode: str, selected: Head | None) -> list[tuple[str, str]]:
    base = circuits.baseline[mode].mean
    pairs = [("highest pairs: " + "; ".join(f"{head_name(a)} → {head_name(b)} {s:.3f} ({s / base:.1f}x random)"
                                           for a, b, s in circuits.top_pairs(mode, 3)), "")]
    if selected is None:
        return pairs + [("Click a head in a map (or set widget.selected = (layer, head) in Python) to see its "
                         "numbers.", "note")]
    name = head_name(selected)
    copy = "n/a" if circuits.copying is None else f"{float(circuits.copying[selected]):+.3f}"
    lines = [(f"Selected: {name}; OV copying {copy}; QK effective rank {float(circuits.qk_rank[selected]):.1f}, "
              f"OV {float(circuits.ov_rank[selected]):.1f} of {circuits.d_head}", "bold")]
    reads = reads_from(circuits, mode, selected)
    feeds = writes_into(circuits, mode, selected)
    fmt = lambda hs: ", ".join(f"{head_name(lh)} {s:.3f} ({s / base:.1f}x random)" for lh, s in hs)  # noqa: E731
    lines.append((f"reads most, through its {MODE_WORDS[mode]}, from: {fmt(reads)}" if reads
                  else "reads from no earlier head (first layer)", ""))
    lines.append((f"is read most, through their {MODE_WORDS[mode]}, by: {fmt(feeds)}" if feeds
                  else "is read by no later head (last layer)", ""))
    return pairs + lines
