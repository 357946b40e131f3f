"""The census and the circuits in a notebook: `mha_viz.show_census(census)`, `mha_viz.show_circuits(circuits)`.

Each is a picture of layers x heads maps (one per score; for the circuits one heads x heads map per kind of
composition), drawn as SVG in Python: it shows in JupyterLab, Notebook 7, nbconvert's HTML and GitHub alike, with
no kernel and nothing from a CDN, and `to_svg()` / `save_svg(path)` export it. Hovering a cell shows its value
(an SVG <title>). Not interactive beyond that: the Layer grid (`mha_viz.show`) is the widget that reruns the model.
No streamlit here.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import torch

from mha_viz.notebook import svg as _svg

CELL = 18  # px per head in a layers x heads map
PAIR_CELL = 10  # px per head in a heads x heads composition map
GAP = 16
NAN_FILL = "#eeeeee"


def _colour(table: np.ndarray, v: float, lo: float, hi: float) -> str:
    if not math.isfinite(v):
        return NAN_FILL
    x = 0.0 if hi <= lo else min(1.0, max(0.0, (v - lo) / (hi - lo)))
    r, g, b = table[int(round(x * 255))]
    return f"#{r:02x}{g:02x}{b:02x}"


def _range(values: torch.Tensor) -> tuple[float, float]:
    finite = values[torch.isfinite(values)]
    if finite.numel() == 0:
        return 0.0, 1.0
    return float(finite.min()), float(finite.max())


def panel(values: torch.Tensor, title: str, row_names: list[str], col_names: list[str], cell: int,
          marks: set = frozenset(), note: str = "") -> tuple[list[str], int, int]:
    """One map: values (R, C), a cell per entry coloured on the grid's scale from its min (white) to its max
    (dark), NaN light grey, `marks` {(r, c)} outlined. -> (SVG elements at the origin, width, height)."""
    on, _ = _svg.colour_stops()
    table = _svg.lut(on)
    R, C = values.shape
    lo, hi = _range(values)
    left, top = 34 if cell >= CELL else 46, 34 + 14 * bool(note)
    out = [f'<text x="0" y="13" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    if note:
        out.append(f'<text x="0" y="28" font-size="10" fill="#555">{html.escape(note)}</text>')
    for r in range(R):
        if cell >= CELL or r % max(1, R // 12) == 0:
            out.append(f'<text x="{left - 4}" y="{top + r * cell + cell * 0.7:.1f}" font-size="10" '
                       f'text-anchor="end">{html.escape(row_names[r])}</text>')
        for c in range(C):
            v = float(values[r, c])
            shown = "n/a" if not math.isfinite(v) else f"{v:.3f}"
            stroke = ' stroke="#d62728" stroke-width="2"' if (r, c) in marks else ' stroke="#fff" stroke-width="0.5"'
            out.append(f'<rect x="{left + c * cell}" y="{top + r * cell}" width="{cell}" height="{cell}" '
                       f'fill="{_colour(table, v, lo, hi)}"{stroke}><title>{html.escape(row_names[r])} → '
                       f'{html.escape(col_names[c])}: {shown}</title></rect>')
    for c in range(C):
        if cell >= CELL or c % max(1, C // 12) == 0:
            x = left + c * cell + cell / 2
            out.append(f'<text x="{x:.1f}" y="{top + R * cell + 12}" font-size="10" text-anchor="middle">'
                       f'{html.escape(col_names[c])}</text>')
    legend_y = top + R * cell + 20
    out.append(f'<text x="{left}" y="{legend_y + 10}" font-size="10" fill="#555">colour: {lo:.3g} (white) to '
               f'{hi:.3g} (dark); grey: not measured</text>')
    return out, left + C * cell + 8, legend_y + 16


class Maps:
    """A column of maps as one SVG picture; displayed as the cell's value (image/svg+xml)."""

    def __init__(self, title: str, panels: list[tuple[list[str], int, int]]):
        self.title, self.panels = title, panels

    def to_svg(self) -> str:
        width = max([w for _, w, _ in self.panels] + [400]) + 2 * GAP
        y, body = GAP + 22, []
        for elements, _, h in self.panels:
            body.append(f'<g transform="translate({GAP},{y})">' + "\n".join(elements) + "</g>")
            y += h + GAP
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" viewBox="0 0 {width} {y}" '
                f'font-family="sans-serif" font-size="12"><rect width="{width}" height="{y}" fill="#ffffff"/>'
                f'<text x="{GAP}" y="{GAP + 10}" font-size="15" font-weight="bold">{html.escape(self.title)}</text>'
                + "\n".join(body) + "</svg>")

    def save_svg(self, path) -> Path:
        path = Path(path)
        path.write_text(self.to_svg(), encoding="utf-8")
        return path

    def _repr_mimebundle_(self, include=None, exclude=None):
        return {"image/svg+xml": self.to_svg(), "text/plain": f"<mha-viz maps: {self.title}>"}


def _heads(n_layers: int, n_heads: int) -> tuple[list[str], list[str]]:
    return [f"L{layer}" for layer in range(n_layers)], [f"H{h}" for h in range(n_heads)]


def show_census(census, scores=None) -> Maps:
    """The census's layers x heads maps (`scores`: names from `census.names`, default all), each titled with
    its uniform baseline and the best fixed offset where it has one; the three most notable heads
    (`census.top`) outlined."""
    names = list(census.names if scores is None else scores)
    unknown = [n for n in names if n not in census.scores]
    if unknown:
        raise ValueError(f"{unknown} are not scores of this census; it has: {', '.join(census.names)}")
    rows, cols = _heads(census.n_layers, census.n_heads)
    panels = []
    for name in names:
        base = f"uniform attention: {census.uniform[name]:.3g}"
        if name in census.offset and math.isfinite(census.offset[name][1]):
            offset, acc = census.offset[name]
            base += f"; best fixed offset ({offset:+d}): {acc:.3g}"
        top = census.top(name, 3)
        note = base + "; outlined: " + ", ".join(f"L{l} H{h}" for (l, h), _ in top)
        marks = {lh for lh, _ in top}
        panels.append(panel(census.scores[name].float(), name, rows, cols, CELL, marks, note))
    return Maps(f"Head census of {census.model} (seed {census.seed}): {census.n_layers} layers x "
                f"{census.n_heads} heads", panels)


def show_circuits(circuits, modes=("q", "k", "v")) -> Maps:
    """The circuits' composition maps (Elhage et al. 2021: how much each earlier head's output feeds a later
    head's query, key or value), heads x heads with the random baseline in the title, then each head's OV copying
    score where the model has embeddings."""
    L, H = circuits.n_layers, circuits.n_heads
    names = [f"L{layer} H{h}" for layer in range(L) for h in range(H)]
    panels = []
    for mode in modes:
        if mode not in circuits.composition:
            raise ValueError(f"{mode!r} is not a kind of composition here; use one of {sorted(circuits.composition)}")
        matrix = circuits.composition[mode].float().reshape(L * H, L * H)  # (from head, into head)
        b = circuits.baseline[mode]
        top = circuits.top_pairs(mode, 3)
        marks = {(a[0] * H + a[1], c[0] * H + c[1]) for a, c, _ in top}
        note = (f"random matrices: mean {b.mean:.3g}, 99th percentile {b.p99:.3g}; outlined: "
                + ", ".join(f"L{a[0]} H{a[1]} → L{c[0]} H{c[1]}" for a, c, _ in top))
        panels.append(panel(matrix, f"{mode.upper()}-composition (row: earlier head, column: later head)", names,
                            names, PAIR_CELL, marks, note))
    if circuits.copying is not None:
        rows, cols = _heads(L, H)
        panels.append(panel(circuits.copying.float(), "OV copying: sum(λ) / sum(|λ|)", rows, cols, CELL,
                            note="1: the head's value/output map copies tokens; -1: it suppresses them"))
    return Maps(f"Circuits of {circuits.name} from its weights: {L} layers x {H} heads", panels)
