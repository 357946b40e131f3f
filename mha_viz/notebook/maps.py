"""The census's picture, drawn as SVG in Python, and the drawing parts the circuits' picture
(notebook/circuit_map.py) shares: what `mha_viz.show_census` and `mha_viz.show_circuits` (notebook/maps_widget.py)
put in the page, export with their SVG button and `to_svg()`, and leave in a saved notebook for viewers without a
kernel (nbconvert, GitHub). One drawing, three uses.

The page adds the interaction on top (maps.js): every cell and point that can be hovered carries `data-tip` (its
head, value and interval, also an SVG <title> for a saved file), every one that can be clicked `data-lh`
("layer,head"); a heads x heads composition map is one embedded PNG (`data-map`), whose cell under the pointer the
page finds from the values it is sent beside the picture. No streamlit, no Jupyter here.
"""
from __future__ import annotations

import html
import math

import numpy as np
import torch

from mha_viz import measures
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
N_EXAMPLES = 5
EXAMPLE_CHARS = 110

def measure_line(score: str) -> str:
    """A census score's title line: its registered label and words (`mha_viz.measures`), as the app writes them."""
    return f"{measures.score_label(score)}: {measures.score_words(score)}"


def escaped(text) -> str:
    return html.escape(str(text), quote=True)


def _num(v: float, digits: int = 3) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:.{digits}f}"


def _hex(rgb) -> str:
    return "#%02x%02x%02x" % tuple(int(x) for x in rgb)


def colour_at(table: np.ndarray, v: float, lo: float, hi: float, reverse: bool = False) -> str:
    if not math.isfinite(v):
        return NAN_FILL
    x = 0.0 if hi <= lo else min(1.0, max(0.0, (v - lo) / (hi - lo)))
    return _hex(table[int(round((1 - x if reverse else x) * 255))])


def svg_text(x: float, y: float, body: str, size: int = 11, anchor: str = "start", fill: str = "#222",
          bold: bool = False, extra: str = "") -> str:
    weight = ' font-weight="bold"' if bold else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{weight}'
            f'{extra}>{escaped(body)}</text>')


def svg_cell(x: float, y: float, w: float, h: float, fill: str, tip: str, lh: Head | None, stroke: str = "#ffffff",
          width: float = 0.5, kind: str = "cell") -> str:
    data = f' data-lh="{lh[0]},{lh[1]}"' if lh is not None else ""
    return (f'<rect class="mhm-{kind}" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{width}"{data} data-tip="{escaped(tip)}">'
            f'<title>{escaped(tip)}</title></rect>')


def colour_bar(x: float, y: float, height: float, stops: list[str], lo: float, hi: float, marks: list[tuple],
               reverse: bool = False) -> tuple[list[str], float]:
    """A vertical colour bar from `lo` (bottom) to `hi` (top) with `marks` [(value, text)] drawn across it as
    dashed lines with their words: the baselines a head must beat, in the legend. -> (elements, width)."""
    table = _svg.lut(stops)
    out, n = [], 48
    for i in range(n):
        v = lo + (hi - lo) * (n - 1 - i) / (n - 1)
        out.append(f'<rect x="{x:.1f}" y="{y + i * height / n:.1f}" width="12" height="{height / n + 0.6:.1f}" '
                   f'fill="{colour_at(table, v, lo, hi, reverse)}"/>')
    out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="12" height="{height:.1f}" fill="none" stroke="#999"/>')
    at = [y + (1 - min(1.0, max(0.0, (v - lo) / (hi - lo)))) * height for v, _ in marks
          if math.isfinite(v) and hi > lo]
    for value, where in ((hi, y + 8), (lo, y + height)):
        if all(abs(where - 3.5 - m) > 11 for m in at):
            out.append(svg_text(x + 16, where, f"{value:.3g}", 10, fill="#444"))
    width = 60
    shown = sorted(((y + (1 - min(1.0, max(0.0, (v - lo) / (hi - lo)))) * height, v, words) for v, words in marks
                    if math.isfinite(v) and hi > lo), reverse=True)  # bottom first
    label_y = y + height + 11
    for my, value, words in shown:
        out.append(f'<line class="mhm-baseline" x1="{x - 3:.1f}" x2="{x + 15:.1f}" y1="{my:.1f}" y2="{my:.1f}" '
                   f'stroke="#000" stroke-width="1.5" stroke-dasharray="3,2"/>')
        label_y = min(my + 3.5, label_y - 11)  # two baselines close together: their words one above the other
        out.append(svg_text(x + 18, label_y, f"{words} {value:.3g}", 10, extra=' class="mhm-baseline-label"'))
        width = max(width, 22 + 5.6 * (len(words) + 6))
    return out, width


def svg_doc(width: float, height: float, title: str, body: list[str], kind: str, header: str = "") -> str:
    width = max(width, 24 + 8.2 * len(title), 24 + 6.6 * len(header))  # the title (14 px bold), the header (11 px)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="mhm-picture" data-kind="{kind}" width="{width:.0f}" '
            f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">'
            f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>'
            + svg_text(GAP, GAP + 11, title, 14, bold=True) + "\n" + "\n".join(body) + "\n</svg>")


def fitted_lines(lines: list[tuple[str, str]], width: float) -> list[tuple[str, str]]:
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
    body = [svg_text(GAP, GAP + 30, measure_line(score), 11, bold=True),
            svg_text(GAP, GAP + 44, f"measured on {census.inputs[score]}; click a head to select it", 10, fill="#555")]
    lo, hi = census_range(census, score)
    reverse = census.lower_is_notable(score)
    table = _svg.lut(VIRIDIS)
    top3 = {lh for lh, _ in census.top(score, 3)}
    values = census.scores[score].float()  # (L, H)
    for layer in range(L):
        body.append(svg_text(left - 4, top + layer * cell + cell * 0.68, f"L{layer}", 10, "end"))
        for head in range(H):
            lh = (layer, head)
            fill = colour_at(table, float(values[lh]), lo, hi, reverse)
            stroke, width = (SELECTED, 2.5) if lh == selected else ("#000", 1.5) if lh in top3 else ("#fff", 0.5)
            body.append(svg_cell(left + head * cell, top + layer * cell, cell, cell, fill,
                              census_tip(census, score, lh), lh, stroke, width))
    for head in range(H):
        body.append(svg_text(left + head * cell + cell / 2, top + L * cell + 12, column_name(head), 10, "middle"))
    map_h = max(L * cell, 150)
    bar_x = left + H * cell + 14
    bar, bar_w = colour_bar(bar_x, top, map_h, VIRIDIS, lo, hi, census_marks(census, score), reverse)
    body += bar
    body.append(svg_text(left - 34, top + map_h + 28, "outlined: the 3 most notable heads"
                      + (" (the lowest: a band near the diagonal, or focus)" if reverse else "")
                      + "; red: the selected head", 10, fill="#555"))
    # the scatter
    sx, size = bar_x + bar_w + 30, 260
    body += _scatter(census, x, y, sx, top, size, selected)
    width = sx + size + GAP + 10
    y0 = max(top + map_h + 50, top + size + 60)
    lines = fitted_lines(_head_lines(census, score, x, y, selected), width)
    for i, (words, kind) in enumerate(lines):
        body.append(svg_text(GAP, y0 + 14 * i, words, 11, bold=kind == "bold",
                             fill="#555" if kind == "note" else "#222", extra=' class="mhm-head-info"'))
    height = y0 + 14 * len(lines) + GAP
    return svg_doc(width, height, f"Head census of {census.model} (seed {census.seed}): {L} layers x {H} heads",
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
        out.append(svg_text(px(v), sy + size + 12, f"{v:.2g}", 10, "middle", "#444"))
    for v in (ylo, yhi):
        out.append(svg_text(sx - 4, py(v) + 3, f"{v:.2g}", 10, "end", "#444"))
    out.append(svg_text(sx + size / 2, sy + size + 26, f"x: {x}", 11, "middle"))
    out.append(svg_text(sx - 26, sy + size / 2, f"y: {y}", 11, "middle",
                     extra=f' transform="rotate(-90 {sx - 26} {sy + size / 2})"'))
    if math.isfinite(bx):
        out.append(f'<line class="mhm-baseline" x1="{px(bx):.1f}" x2="{px(bx):.1f}" y1="{sy}" y2="{sy + size}" '
                   'stroke="#999" stroke-dasharray="2,3"/>')
    if math.isfinite(by):
        out.append(f'<line class="mhm-baseline" x1="{sx}" x2="{sx + size}" y1="{py(by):.1f}" y2="{py(by):.1f}" '
                   'stroke="#999" stroke-dasharray="2,3"/>')
    out.append(svg_text(sx + size / 2, sy + size + 40, f"dotted: each score's baseline ({bx:.2g}, {by:.2g}); colour: "
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
                                           f'data-lh="{layer},{head}" data-tip="{escaped(tip)}"><title>{escaped(tip)}'
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
