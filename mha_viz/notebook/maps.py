"""The census's and the circuits' pictures, drawn as SVG in Python: what `mha_viz.show_census` and
`mha_viz.show_circuits` (notebook/maps_widget.py) put in the page, export with their SVG button and `to_svg()`,
and leave in a saved notebook for viewers without a kernel (nbconvert, GitHub). One drawing, three uses.

The page adds the interaction on top (maps.js): every cell and point that can be hovered carries `data-tip` (its
head, value and interval, also an SVG <title> for a saved file), every one that can be clicked `data-lh`
("layer,head"); a heads x heads composition map is one embedded PNG (`data-map`), whose cell under the pointer the
page finds from the values it is sent beside the picture. No streamlit, no Jupyter here.
"""
from __future__ import annotations

import base64
import html
import math

import numpy as np
import torch

from mha_viz import measures, plotting
from mha_viz.analysis.circuits import left_out_words
from mha_viz.names import column_name, head_name
from mha_viz.notebook import svg as _svg

Head = tuple[int, int]
GAP = 16
SELECTED = "#d62728"  # the clicked head's outline (and ring in the scatter)
NAN_FILL = "#e6e6e6"
VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b",
           "#fde725"]  # the app's census map (plotting.census_map: plotly's Viridis)
PLASMA = ["#0d0887", "#46039f", "#7201a8", "#9c179e", "#bd3786", "#d8576b", "#ed7953", "#fb9f3a", "#fdca26",
          "#f0f921"]  # the app's census scatter, by layer (plotly's Plasma)
COMPOSITION = [c for _, c in plotting.COMPOSITION_SCALE]  # the app's composition map: white at the random baseline
COPYING = ["#2166ac", "#67a9cf", "#d1e5f0", "#f7f7f7", "#fddbc7", "#ef8a62", "#b2182b"]  # -1 (suppress) .. +1 (copy)
QK_COLOUR, OV_COLOUR = "#2166ac", "#b2182b"  # as plotting.singular_values_figure
N_EXAMPLES = 5
EXAMPLE_CHARS = 110

def measure_line(score: str) -> str:
    """A census score's title line: its registered label and words (`mha_viz.measures`), as the app writes them."""
    return f"{measures.score_label(score)}: {measures.score_words(score)}"


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _num(v: float, digits: int = 3) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:.{digits}f}"


def _hex(rgb) -> str:
    return "#%02x%02x%02x" % tuple(int(x) for x in rgb)


def _colour(table: np.ndarray, v: float, lo: float, hi: float, reverse: bool = False) -> str:
    if not math.isfinite(v):
        return NAN_FILL
    x = 0.0 if hi <= lo else min(1.0, max(0.0, (v - lo) / (hi - lo)))
    return _hex(table[int(round((1 - x if reverse else x) * 255))])


def _text(x: float, y: float, body: str, size: int = 11, anchor: str = "start", fill: str = "#222",
          bold: bool = False, extra: str = "") -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{weight}'
            f'{extra}>{_esc(body)}</text>')


def _cell(x: float, y: float, w: float, h: float, fill: str, tip: str, lh: Head | None, stroke: str = "#ffffff",
          width: float = 0.5, kind: str = "cell") -> str:
    data = f' data-lh="{lh[0]},{lh[1]}"' if lh is not None else ""
    return (f'<rect class="mhm-{kind}" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{width}"{data} data-tip="{_esc(tip)}"><title>{_esc(tip)}</title></rect>')


def colour_bar(x: float, y: float, height: float, stops: list[str], lo: float, hi: float, marks: list[tuple],
               reverse: bool = False) -> tuple[list[str], float]:
    """A vertical colour bar from `lo` (bottom) to `hi` (top) with `marks` [(value, text)] drawn across it as
    dashed lines with their words: the baselines a head must beat, in the legend. -> (elements, width)."""
    table = _svg.lut(stops)
    out, n = [], 48
    for i in range(n):
        v = lo + (hi - lo) * (n - 1 - i) / (n - 1)
        out.append(f'<rect x="{x:.1f}" y="{y + i * height / n:.1f}" width="12" height="{height / n + 0.6:.1f}" '
                   f'fill="{_colour(table, v, lo, hi, reverse)}"/>')
    out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="12" height="{height:.1f}" fill="none" stroke="#999"/>')
    at = [y + (1 - min(1.0, max(0.0, (v - lo) / (hi - lo)))) * height for v, _ in marks
          if math.isfinite(v) and hi > lo]
    for value, where in ((hi, y + 8), (lo, y + height)):
        if all(abs(where - 3.5 - m) > 11 for m in at):
            out.append(_text(x + 16, where, f"{value:.3g}", 10, fill="#444"))
    width = 60
    shown = sorted(((y + (1 - min(1.0, max(0.0, (v - lo) / (hi - lo)))) * height, v, words) for v, words in marks
                    if math.isfinite(v) and hi > lo), reverse=True)  # bottom first
    label_y = y + height + 11
    for my, value, words in shown:
        out.append(f'<line class="mhm-baseline" x1="{x - 3:.1f}" x2="{x + 15:.1f}" y1="{my:.1f}" y2="{my:.1f}" '
                   f'stroke="#000" stroke-width="1.5" stroke-dasharray="3,2"/>')
        label_y = min(my + 3.5, label_y - 11)  # two baselines close together: their words one above the other
        out.append(_text(x + 18, label_y, f"{words} {value:.3g}", 10, extra=' class="mhm-baseline-label"'))
        width = max(width, 22 + 5.6 * (len(words) + 6))
    return out, width


def _doc(width: float, height: float, title: str, body: list[str], kind: str, header: str = "") -> str:
    width = max(width, 24 + 8.2 * len(title), 24 + 6.6 * len(header))  # the title (14 px bold), the header (11 px)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="mhm-picture" data-kind="{kind}" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">'
            f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>'
            + _text(GAP, GAP + 11, title, 14, bold=True) + "\n" + "\n".join(body) + "\n</svg>")


def _lines(lines: list[tuple[str, str]], width: float) -> list[tuple[str, str]]:
    """Text lines wrapped to the picture's width (11 px text, about 5.9 px a character)."""
    chars = max(40, int((width - 2 * GAP) / 5.9))
    out = []
    for words, kind in lines:
        out += [(part, kind) for part in (_svg._wrap(words.split(), chars) or [""])]
    return out


# -- the census ------------------------------------------------------------------------------------------------------
def census_range(census, name: str) -> tuple[float, float]:
    """The colour range of a score's map, as the app's census_map: 0 to max(1, the largest value)."""
    s = census.scores[name].float()
    finite = s[torch.isfinite(s)]
    return 0.0, max(1.0, float(finite.max()) if finite.numel() else 1.0)


def census_marks(census, name: str) -> list[tuple[float, str]]:
    """The baselines of a score, as the legend marks them: uniform attention, the best fixed offset (relations),
    and the control's most extreme head."""
    marks = [(float(census.uniform[name]), "uniform")]
    if name in census.offset and math.isfinite(census.offset[name][1]):
        offset, acc = census.offset[name]
        marks.append((float(acc), f"offset {offset:+d}"))
    if name in census.control:
        ctrl = census.control[name].float()
        ctrl = ctrl[torch.isfinite(ctrl)]
        if ctrl.numel():
            value = float(ctrl.min() if census.lower_is_notable(name) else ctrl.max())
            marks.append((value, "control"))
    return marks


def census_tip(census, name: str, lh: Head) -> str:
    """What hovering a head shows: its name, value and bootstrap interval, and the baselines beside them."""
    v = float(census.scores[name][lh])
    lo, hi = float(census.low[name][lh]), float(census.high[name][lh])
    tip = (f"{head_name(lh)} · {name}: {_num(v)} (95% interval {_num(lo)}–{_num(hi)}, {census.n_inputs[name]} "
           f"inputs); uniform {census.uniform[name]:.3f}")
    if name in census.control:
        tip += f"; control {_num(float(census.control[name][lh]))}"
    return tip


def example_score(census, score: str) -> str | None:
    """The score a head's top examples are ranked by: the shown score when it is measured per natural text, else
    the first that is (None when the census kept no per-text values)."""
    if not census.text_values:
        return None
    return score if score in census.text_values else next(iter(census.text_values))


def top_examples(census, name: str, lh: Head, n: int = N_EXAMPLES) -> list[tuple[float, str]]:
    """The n natural texts where head `lh` scores highest on `name` (lowest for distance and entropy), as the
    app's census view lists them: [(value, text)]."""
    values = census.text_values[name][:, lh[0], lh[1]]  # (N,)
    low = census.lower_is_notable(name)
    order = sorted(range(len(values)), key=lambda i: (math.isnan(float(values[i])),
                                                      float(values[i]) if low else -float(values[i]), i))
    return [(float(values[i]), census.texts[i]) for i in order[:n]]


def census_svg(census, score: str, x: str, y: str, selected: Head | None) -> str:
    """One picture of a census: the layers x heads map of `score` with its baselines in the legend (the three most
    notable heads outlined black, the selected head red), every head as a point by scores `x` and `y` with their
    baselines dotted, and the selected head's numbers and top examples."""
    L, H = census.n_layers, census.n_heads
    cell = 22 if H <= 16 else 16
    left, top = GAP + 34, GAP + 50
    body = [_text(GAP, GAP + 30, measure_line(score), 11, bold=True),
            _text(GAP, GAP + 44, f"measured on {census.inputs[score]}; click a head to select it", 10, fill="#555")]
    lo, hi = census_range(census, score)
    reverse = census.lower_is_notable(score)
    table = _svg.lut(VIRIDIS)
    top3 = {lh for lh, _ in census.top(score, 3)}
    values = census.scores[score].float()  # (L, H)
    for layer in range(L):
        body.append(_text(left - 4, top + layer * cell + cell * 0.68, f"L{layer}", 10, "end"))
        for head in range(H):
            lh = (layer, head)
            fill = _colour(table, float(values[lh]), lo, hi, reverse)
            stroke, width = (SELECTED, 2.5) if lh == selected else ("#000", 1.5) if lh in top3 else ("#fff", 0.5)
            body.append(_cell(left + head * cell, top + layer * cell, cell, cell, fill,
                              census_tip(census, score, lh), lh, stroke, width))
    for head in range(H):
        body.append(_text(left + head * cell + cell / 2, top + L * cell + 12, column_name(head), 10, "middle"))
    map_h = max(L * cell, 150)
    bar_x = left + H * cell + 14
    bar, bar_w = colour_bar(bar_x, top, map_h, VIRIDIS, lo, hi, census_marks(census, score), reverse)
    body += bar
    body.append(_text(left - 34, top + map_h + 28, "outlined: the 3 most notable heads"
                      + (" (the lowest: a band near the diagonal, or focus)" if reverse else "")
                      + "; red: the selected head", 10, fill="#555"))
    # the scatter
    sx, size = bar_x + bar_w + 30, 260
    body += _scatter(census, x, y, sx, top, size, selected)
    width = sx + size + GAP + 10
    y0 = max(top + map_h + 50, top + size + 60)
    lines = _lines(_head_lines(census, score, x, y, selected), width)
    for i, (words, kind) in enumerate(lines):
        body.append(_text(GAP, y0 + 14 * i, words, 11, bold=kind == "bold", fill="#555" if kind == "note" else "#222",
                          extra=' class="mhm-head-info"'))
    height = y0 + 14 * len(lines) + GAP
    return _doc(width, height, f"Head census of {census.model} (seed {census.seed}): {L} layers x {H} heads",
                body, "census", measure_line(score))


def _axis_range(s: torch.Tensor, base: float) -> tuple[float, float]:
    finite = s[torch.isfinite(s)]
    lo = min(0.0, float(finite.min()) if finite.numel() else 0.0)
    hi = max(1.0, float(finite.max()) if finite.numel() else 1.0, base if math.isfinite(base) else 0.0)
    return lo, hi


def _scatter(census, x: str, y: str, sx: float, sy: float, size: float, selected: Head | None) -> list[str]:
    L, H = census.n_layers, census.n_heads
    xs, ys = census.scores[x].float(), census.scores[y].float()  # (L, H) each
    bx, by = census.baseline(x), census.baseline(y)
    xlo, xhi = _axis_range(xs, bx)
    ylo, yhi = _axis_range(ys, by)
    px = lambda v: sx + (v - xlo) / (xhi - xlo) * size  # noqa: E731
    py = lambda v: sy + size - (v - ylo) / (yhi - ylo) * size  # noqa: E731
    out = [f'<rect x="{sx}" y="{sy}" width="{size}" height="{size}" fill="#fafafa" stroke="#bbb"/>']
    for v in (xlo, xhi):
        out.append(_text(px(v), sy + size + 12, f"{v:.2g}", 10, "middle", "#444"))
    for v in (ylo, yhi):
        out.append(_text(sx - 4, py(v) + 3, f"{v:.2g}", 10, "end", "#444"))
    out.append(_text(sx + size / 2, sy + size + 26, f"x: {x}", 11, "middle"))
    out.append(_text(sx - 26, sy + size / 2, f"y: {y}", 11, "middle",
                     extra=f' transform="rotate(-90 {sx - 26} {sy + size / 2})"'))
    if math.isfinite(bx):
        out.append(f'<line class="mhm-baseline" x1="{px(bx):.1f}" x2="{px(bx):.1f}" y1="{sy}" y2="{sy + size}" '
                   'stroke="#999" stroke-dasharray="2,3"/>')
    if math.isfinite(by):
        out.append(f'<line class="mhm-baseline" x1="{sx}" x2="{sx + size}" y1="{py(by):.1f}" y2="{py(by):.1f}" '
                   'stroke="#999" stroke-dasharray="2,3"/>')
    out.append(_text(sx + size / 2, sy + size + 40, f"dotted: each score's baseline ({bx:.2g}, {by:.2g}); colour: "
                                                   "layer", 10, "middle", "#555"))
    table = _svg.lut(PLASMA)
    points = []
    for layer in range(L):
        colour = _hex(table[int(round(layer / max(1, L - 1) * 255))])
        for head in range(H):
            lh = (layer, head)
            vx, vy = float(xs[lh]), float(ys[lh])
            if not (math.isfinite(vx) and math.isfinite(vy)):
                continue
            tip = f"{head_name(lh)} · {x}: {vx:.3f}, {y}: {vy:.3f}"
            ring = f' stroke="{SELECTED}" stroke-width="3"' if lh == selected else ' stroke="#333" stroke-width="0.5"'
            points.append((lh == selected, f'<circle class="mhm-point" cx="{px(vx):.1f}" cy="{py(vy):.1f}" '
                                           f'r="{7 if lh == selected else 5}" fill="{colour}"{ring} '
                                           f'data-lh="{layer},{head}" data-tip="{_esc(tip)}"><title>{_esc(tip)}'
                                           '</title></circle>'))
    out += [p for _, p in sorted(points, key=lambda p: p[0])]  # the selected head drawn last, on top
    return out


def _head_lines(census, score: str, x: str, y: str, selected: Head | None) -> list[tuple[str, str]]:
    if selected is None:
        return [("Click a head in the map or the scatter (or set widget.selected = (layer, head) in Python) to see "
                 "its numbers" + (" and top examples." if census.text_values else "."), "note")]
    lines = [(f"Selected: {head_name(selected)}", "bold")]
    for name in dict.fromkeys([score, x, y]):
        lines.append((census_tip(census, name, selected).split(" · ", 1)[1], ""))
    by = example_score(census, score)
    if by is not None:
        low = census.lower_is_notable(by)
        lines.append((f"Where {head_name(selected)} scores {'lowest' if low else 'highest'} on {by} "
                      f"({len(census.texts)} natural texts):", "bold"))
        for value, text in top_examples(census, by, selected):
            short = " ".join(text.split())
            short = short if len(short) <= EXAMPLE_CHARS else short[:EXAMPLE_CHARS - 1] + "…"
            lines.append((f"{_num(value)}  {short}", ""))
    else:
        lines.append(("This census kept no per-text values, so it has no top examples.", "note"))
    return lines


# -- the circuits ------------------------------------------------------------------------------------------------------
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
    body = [_text(GAP, GAP + 30, f"{mode.upper()}-composition (Elhage et al. 2021): how much an earlier head's "
                                  f"output can feed a later head's {MODE_WORDS[mode]}", 11, bold=True),
            _text(GAP, GAP + 44, f"row: the later head (reads) · column: the earlier head (writes) · white: at or "
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
        body.append(_text(left - 4, top + mid + 3, f"L{layer}", 10, "end"))
        body.append(_text(left + mid, top + side + 12, f"L{layer}", 10, "middle"))
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
    body.append(_text(left - 30, top + side + 26, "outlined: the 3 highest pairs (listed below); red: the selected "
                                                "head's row (what it reads) and column (what reads it)", 10,
                      fill="#555"))
    y0 = top + max(side, 150) + 44
    width = left + side + 14 + bar_w + GAP
    # OV copying, a layers x heads map
    if circuits.copying is not None:
        body.append(_text(GAP, y0, "OV copying: sum(λ)/sum(|λ|) of the token-to-token OV map (+1: copies the "
                                   "attended token; -1: suppresses it)", 11, bold=True))
        c_cell = 22 if H <= 16 else 16
        c_left, c_top = GAP + 34, y0 + 10
        table = _svg.lut(COPYING)
        for layer in range(L):
            body.append(_text(c_left - 4, c_top + layer * c_cell + c_cell * 0.68, f"L{layer}", 10, "end"))
            for head in range(H):
                lh = (layer, head)
                v = float(circuits.copying[lh])
                stroke, sw = (SELECTED, 2.5) if lh == selected else ("#fff", 0.5)
                body.append(_cell(c_left + head * c_cell, c_top + layer * c_cell, c_cell, c_cell,
                                  _colour(table, v, -1.0, 1.0), f"{head_name(lh)} · OV copying {v:+.3f}", lh, stroke,
                                  sw))
        for head in range(H):
            body.append(_text(c_left + head * c_cell + c_cell / 2, c_top + L * c_cell + 12, column_name(head), 10,
                              "middle"))
        bar, _ = colour_bar(c_left + H * c_cell + 14, c_top, max(L * c_cell, 80), COPYING, -1.0, 1.0, [])
        body += bar
        sv_left = c_left + H * c_cell + 90
        y_sv = c_top
        y_end = c_top + max(L * c_cell, 80) + 22
    else:
        body.append(_text(GAP, y0, "OV copying: n/a (this model gives no token embeddings)", 11, fill="#555"))
        sv_left, y_sv, y_end = GAP + 40, y0 + 16, y0 + 16
    parts, sv_w, sv_h = _singular_values(circuits, selected, sv_left, y_sv)
    body += parts
    width = max(width, sv_left + sv_w + GAP)
    width = max(width, 760)
    lines = _lines(_circuit_lines(circuits, mode, selected), width)
    y_text = max(y_end, y_sv + sv_h) + 14
    for i, (words, kind) in enumerate(lines):
        body.append(_text(GAP, y_text + 14 * i, words, 11, bold=kind == "bold",
                          fill="#555" if kind == "note" else "#222", extra=' class="mhm-head-info"'))
    # What the maps leave out, in the app's words (analysis.circuits.left_out_words): the norms, biases and MLPs,
    # then what this model's attention does beyond its weights per head (a qk-norm, OLMo's clip_qkv).
    y_note = y_text + 14 * len(lines) + 8
    note = left_out_words(circuits) + (f" {circuits.composition_note}" if circuits.composition_note else "")
    notes = _lines([(note, "note")], width)
    for i, (words, _) in enumerate(notes):
        body.append(_text(GAP, y_note + 14 * i, words, 11, fill="#555", extra=' class="mhm-left-out"'))
    height = y_note + 14 * len(notes) + GAP
    rotary = "; rotary: its QK map at offset 0" if circuits.rotary else ""
    return _doc(width, height, f"Circuits of {circuits.name} from its weights: {L} layers x {H} heads "
                               f"(d_model {circuits.d_model}, d_head {circuits.d_head}; norms ignored{rotary})",
                body, "circuits")


def _singular_values(circuits, selected: Head | None, x0: float, y0: float) -> tuple[list[str], float, float]:
    w, h = 300, 150
    if selected is None:
        return [_text(x0, y0 + 12, "Select a head to see its singular values.", 11, fill="#555")], w, 20
    name = head_name(selected)
    out = [_text(x0, y0 + 2, f"{name}: singular values of its QK and OV maps, over the largest", 11, bold=True)]
    top = y0 + 12
    out.append(f'<rect x="{x0}" y="{top}" width="{w}" height="{h}" fill="#fafafa" stroke="#bbb"/>')
    out.append(_text(x0 - 4, top + 4, "1", 10, "end", "#444"))
    out.append(_text(x0 - 4, top + h, "0", 10, "end", "#444"))
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
                       f'data-tip="{_esc(tip)}"><title>{_esc(tip)}</title></circle>')
        out.append(_text(x0 + w - 4, top + 14 + 14 * row, f"{label}: effective rank {float(rank):.1f} of {k}", 10,
                         "end", colour))
    out.append(_text(x0 + w / 2, top + h + 12, "singular value #", 10, "middle", "#444"))
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
