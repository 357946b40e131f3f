"""Many heads as ONE tiled uint8 heatmap (the All layers view): one axis pair, so it stays fast at 72+ heads."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import torch

from mha_viz.plotting.colours import TILE_SCALE
from mha_viz.plotting.layout import FONT, NO_TEMPLATE, _as_np

MAX_TILE = 96  # overview tiles larger than this many tokens are max-pooled down to it


def overview_blocks(rows: int, cols: int) -> int:
    """How many side-by-side blocks of layers make a rows x cols grid of square tiles about twice as wide as tall.

    A deep model (SmolLM2: 30 layers x 9 heads) stacked as one column of layers is ten screens tall with its
    tiles a few pixels wide; three blocks of ten layers (10 x 27 tiles) fit one screen."""
    if rows <= cols:
        return 1
    return min(range(1, rows + 1), key=lambda b: abs(-(-rows // b) / (b * cols) - 0.5))


def tiled_figure(
    grid: torch.Tensor,  # (R, C, Q, K): R rows x C columns of patterns
    row_names: list[str],
    col_names: list[str],
    *,
    off: set[tuple[int, int]] = frozenset(),
    selected: tuple[int, int] | None = None,
    zscale: str = "row",
    height: int | None = None,
    width: int = 900,
    blocks: int | None = None,
) -> go.Figure:
    """Many heads as ONE heatmap, patterns tiled with a one-cell NaN gap; one axis pair, so it stays fast.

    Each pattern is divided by its own maximum when zscale="head" (so faint heads stay visible), else shown raw
    on 0..1. Ablated heads are drawn in grey.
    A transparent scatter point at each tile's centre carries (row, col) as customdata for click selection.
    `width` is the page width the figure gets (px): the height follows from it, so the tiles fill the figure, and
    no tile holds more cells than it has pixels (longer texts are max-pooled). Rows are wrapped into `blocks`
    side-by-side blocks (default: `overview_blocks`); the figure's `layout.meta` says the tile size and blocks.
    """
    if grid.ndim != 4:
        raise ValueError(f"tiled_figure wants (rows, cols, query, key); got shape {tuple(grid.shape)}")
    rows, cols = int(grid.shape[0]), int(grid.shape[1])
    if len(row_names) != rows or len(col_names) != cols:
        raise ValueError(f"{rows} x {cols} tiles need {rows} row names and {cols} column names; got "
                         f"{len(row_names)} and {len(col_names)}")
    blocks = max(1, min(blocks or overview_blocks(rows, cols), rows))
    per_block = -(-rows // blocks)  # layers per block
    # A tile is never finer than the pixels it gets: (page width - margins) / tiles across, capped at MAX_TILE.
    tile_px = max(8, int((width - 48) / (blocks * cols)))
    tile = min(MAX_TILE, tile_px)
    if max(grid.shape[-2:]) > tile:
        # Max-pooling keeps every strong weight visible when a tile has fewer pixels than tokens.
        grid = torch.nn.functional.adaptive_max_pool2d(
            torch.as_tensor(grid).float().flatten(0, 1), tile)  # (R*C, Q', K')
        grid = grid.view(rows, cols, tile, tile)  # (R, C, Q', K')
    g = _as_np(grid)  # (R, C, Q, K)
    nq, nk = g.shape[2:]
    if zscale == "head":
        peak = np.nanmax(g.reshape(rows, cols, -1), axis=2)[:, :, None, None]  # (R, C, 1, 1)
        g = g / np.maximum(peak, 1e-6)
    gap = 1
    block_gap = max(2, nk // 3)  # extra white between blocks, so they read as separate
    block_w = cols * (nk + gap) - gap
    # One byte per cell (0 = gap, 1-127 = ablated head, 128-255 = active head): a quarter of float32's payload,
    # which keeps a 72-head x 64-token update under 1 MB (benchmarks/RESULTS.md).
    canvas = np.zeros((per_block * (nq + gap) - gap, blocks * (block_w + block_gap) - block_gap), dtype=np.uint8)
    g = np.nan_to_num(np.clip(g, 0.0, 1.0))

    def origin(r: int, c: int) -> tuple[int, int]:  # top-left cell of tile (r, c) on the canvas
        return (r % per_block) * (nq + gap), (r // per_block) * (block_w + block_gap) + c * (nk + gap)

    xs, ys, data, text = [], [], [], []
    for r in range(rows):
        for c in range(cols):
            y0, x0 = origin(r, c)
            code = 1 + np.rint(g[r, c] * 126) if (r, c) in off else 128 + np.rint(g[r, c] * 127)
            canvas[y0:y0 + nq, x0:x0 + nk] = code
            xs.append(x0 + (nk - 1) / 2)
            ys.append(y0 + (nq - 1) / 2)
            data.append([r, c])
            text.append(f"{row_names[r]} {col_names[c]}" + (" (off)" if (r, c) in off else ""))
    heat = dict(type="heatmap", z=canvas, zmin=0, zmax=255, colorscale=TILE_SCALE, showscale=False,
                hoverinfo="skip")
    cell_px = (width - 48) / canvas.shape[1]
    clicks = dict(
        type="scatter", x=xs, y=ys, mode="markers", customdata=data, text=text,
        marker=dict(size=max(6, min(40, nk * cell_px)), color="rgba(0,0,0,0)", symbol="square"),
        hovertemplate="%{text}<br>click to focus<extra></extra>", showlegend=False,
    )
    shapes = []
    if selected is not None:
        y0, x0 = origin(*selected)
        shapes.append(dict(type="rect", x0=x0 - 0.5, x1=x0 + nk - 0.5, y0=y0 - 0.5, y1=y0 + nq - 0.5,
                           line=dict(color="#d62728", width=2)))
    # Column names over every block; a row's tick names the layer of each block ("L0 · L10 · L20").
    tick_x = [origin(b * per_block, c)[1] + (nk - 1) / 2 for b in range(blocks) for c in range(cols)]
    tick_y = [rr * (nq + gap) + (nq - 1) / 2 for rr in range(per_block)]
    row_text = [" · ".join(row_names[b * per_block + rr] for b in range(blocks) if b * per_block + rr < rows)
                for rr in range(per_block)]
    left = 40 if blocks == 1 else 24 + 22 * blocks
    planned = height or int(min(4000, max(160, canvas.shape[0] * cell_px + 44)))
    fit = {} if height else dict(fit=dict(height=planned, fixed_v=44, fixed_h=left + 8,
                                          ratio=canvas.shape[0] / canvas.shape[1]))
    layout = dict(
        template=NO_TEMPLATE, shapes=shapes,
        # The tiles fill the figure: its height is the canvas's at the width's scale (plus margins).
        height=planned,
        margin=dict(l=left, r=8, t=36, b=8),
        xaxis=dict(tickmode="array", tickvals=tick_x, ticktext=list(col_names) * blocks, side="top",
                   showgrid=False, zeroline=False, range=[-0.5, canvas.shape[1] - 0.5], tickfont=dict(size=9)),
        # A page narrower than `width` draws the tiles smaller than the height was made for: they keep to the top,
        # under the head names, instead of floating in the middle of bands of white.
        yaxis=dict(tickmode="array", tickvals=tick_y, ticktext=row_text, range=[canvas.shape[0] - 0.5, -0.5],
                   showgrid=False, zeroline=False, scaleanchor="x", constrain="domain", constraintoward="top",
                   tickfont=dict(size=9)),
        font=FONT, clickmode="event+select", dragmode=False, meta=dict(tile=int(nq), blocks=blocks, **fit),
    )
    return go.Figure(data=[heat, clicks], layout=layout, _validate=False)
