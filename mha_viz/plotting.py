"""Tensors + tokens -> plotly figures. No streamlit here, so tests can read `fig.data` directly.

Rendering notes (measured in benchmarks/, results in benchmarks/RESULTS.md): a figure with dozens of subplot
axes is slow to update, so heads side by side (Compare, the trained/untrained twins) are one figure per row and
the all-layers view is ONE tiled uint8 heatmap; the Layer view's grid is a browser component
(app/components/head_grid), not a figure. Values are sent as numpy arrays, never `.tolist()`, and figures are
built unvalidated.
"""
from __future__ import annotations

import html
import math

import numpy as np
import plotly.graph_objects as go
import torch


def _scale(colors: list[str]) -> list[list]:
    return [[i / (len(colors) - 1), c] for i, c in enumerate(colors)]


# Spelled out rather than named: plotly.js's own "Blues" runs dark-to-light, the reverse of plotly.py's, and the
# fast path below hands names straight to plotly.js. White = no attention, dark = all of it.
ATTN_SCALE = _scale(["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c",
                     "#08306b"])


def sqrt_scale(scale: list[list]) -> list[list]:
    """A colour scale drawn with square-root contrast, the Layer grid's default (head_grid.js CONTRASTS.sqrt): the
    colour at a weight w of the range's top is the linear scale's colour at sqrt(w), so a weight a quarter of the
    top is drawn half dark. The stops move (to position**2); the values, the hover and the colour bar's numbers stay
    the weights themselves."""
    return [[pos * pos, colour] for pos, colour in scale]


# An ablated head keeps its pattern, drawn grey, because its attention is still computed.
OFF_SCALE = _scale(["#ffffff", "#f0f0f0", "#d9d9d9", "#bdbdbd", "#969696", "#737373", "#525252", "#252525"])
DIFF_SCALE = [[0.0, "#2166ac"], [0.5, "#f7f7f7"], [1.0, "#b2182b"]]  # blue = less, red = more attention
# What plotly.py writes for template="none"; spelled out because the fast path skips plotly's own conversion.
MAX_TILE = 96  # overview tiles larger than this many tokens are max-pooled down to it
# uint8 codes of tiled_figure: 0 gap (white), 1-127 ablated head (grey), 128-255 active head (blue).
TILE_SCALE = [
    [0.0, "#ffffff"], [0.002, "#ffffff"], [1 / 255, "#ececec"], [127 / 255, "#2b2b2b"],
    [127.5 / 255, "#ffffff"], [128 / 255, "#f7fbff"], [191 / 255, "#6baed6"], [1.0, "#08306b"],
]
NO_TEMPLATE = {"data": {"scatter": [{"type": "scatter"}]}}
_FONT = dict(size=10)


_VISIBLE = {"\n": "↵", "\t": "⇥", "\r": "␍"}


def visible_text(token: str) -> str:
    """Control characters, newlines and NUL made visible, so every token has a printable label."""
    return "".join(_VISIBLE.get(ch) or (ch if ch.isprintable() else f"\\x{ord(ch):02x}") for ch in token)


def token_text(token: str) -> str:
    """The one way a token is written on the page and in every figure: control characters made visible (a
    newline is ↵) and a leading space, which is part of the token (" She" is not "She"), as ␣; a token of spaces
    only as ␣s."""
    text = visible_text(token)
    if text.startswith(" ") or not text.strip():
        stripped = text.lstrip(" ")
        text = "␣" * (len(text) - len(stripped)) + stripped if stripped else text.replace(" ", "␣")
    return text


def safe_label(token: str) -> str:
    """A token as plain text inside plotly's HTML-ish labels: escaped, written as `token_text` does."""
    text = token_text(token)
    if len(text) > 24:
        text = text[:23] + "…"
    return html.escape(text, quote=False) or "∅"


def axis_labels(tokens: list[str]) -> list[str]:
    """Unique category labels: plotly merges equal categories, so a repeated token gets zero-width spaces."""
    seen: dict[str, int] = {}
    labels = []
    for tok in tokens:
        base = safe_label(tok)
        n = seen.get(base, 0)
        seen[base] = n + 1
        labels.append(base + "\u200b" * n)
    return labels


def _as_np(matrix: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().cpu().numpy()
    return np.asarray(matrix, dtype=np.float32)


def head_figure(
    pattern: torch.Tensor,  # (Q, K)
    tokens: list[str],
    title: str,
    *,
    off: bool = False,
    zmax: float | None = None,
    size: int = 260,
    colorbar: bool = False,
    contrast: str = "linear",
) -> go.Figure:
    """One head's attention: queries on the y axis (top to bottom), keys on the x axis, hover = q, k, weight.
    contrast "sqrt" draws the colours as `sqrt_scale` says (the values, hover and colour bar stay the weights)."""
    if contrast not in ("linear", "sqrt"):
        raise ValueError(f"contrast is 'linear' or 'sqrt'; got {contrast!r}")
    z = _as_np(pattern)  # (Q, K)
    if z.ndim != 2:
        raise ValueError(f"head_figure wants one head's (query, key) pattern; got shape {z.shape}")
    labels = axis_labels(tokens)
    if len(labels) != z.shape[1]:
        raise ValueError(f"{len(labels)} tokens for a pattern with {z.shape[1]} keys")
    top = float(zmax) if zmax else max(float(np.nanmax(z)) if z.size else 1.0, 1e-6)
    trace = dict(
        type="heatmap", z=z, x=labels, y=labels, zmin=0.0, zmax=top,
        colorscale=(sqrt_scale if contrast == "sqrt" else list)(OFF_SCALE if off else ATTN_SCALE),
        showscale=colorbar, colorbar=_square_colorbar("weight"),
        hovertemplate="query: %{y}<br>key: %{x}<br>weight: %{z:.3f}<extra></extra>",
    )
    return _fast_figure(trace, _square_layout(title + (" (off)" if off else ""), size, labels, colorbar=colorbar))


def _fast_figure(trace: dict, layout: dict) -> go.Figure:
    """Build without plotly's per-property validation: 25-45x faster for the same JSON (benchmarks/), and a
    layer view builds a dozen of these on every toggle. The dicts here are written against plotly's schema and
    tests read the figures back."""
    return go.Figure(data=[trace], layout=layout, _validate=False)


def heads_row_figure(
    patterns: torch.Tensor,  # (N, Q, K): the heads of one row of the layer grid
    tokens: list[str],
    titles: list[str],
    off: list[bool],
    *,
    zmax: float | None = None,
    columns: int | None = None,
    height: int = 300,
    colorbar: bool = False,
    contrast: str = "linear",
) -> go.Figure:
    """Several heads side by side in ONE figure (one subplot each), so a layer is a few plotly charts, not one
    per head: measured in headless Chromium, 12 heads draw in ~0.1 s as subplots vs ~0.9 s as 12 charts.
    Keys on each subplot's x axis (top), queries on the y axis (labelled on the first subplot of the row).
    `columns` (default N) fixes the subplot width, so a short last row lines up with the rows above it.
    `colorbar` draws one colour bar for the row: meaningful when `zmax` puts every head on one scale.
    `contrast` "sqrt" draws the colours as `sqrt_scale` says (weak weights stay visible beside a strong one).
    """
    if contrast not in ("linear", "sqrt"):
        raise ValueError(f"contrast is 'linear' or 'sqrt', not {contrast!r}")
    scales = {False: ATTN_SCALE, True: OFF_SCALE}
    if contrast == "sqrt":
        scales = {off_: sqrt_scale(scale) for off_, scale in scales.items()}
    z_all = _as_np(patterns)  # (N, Q, K)
    if z_all.ndim != 3:
        raise ValueError(f"heads_row_figure wants (heads, query, key); got shape {z_all.shape}")
    n = z_all.shape[0]
    if not (len(titles) == len(off) == n):
        raise ValueError(f"{n} patterns need {n} titles and {n} off flags; got {len(titles)} and {len(off)}")
    columns = max(columns or n, n)
    labels = axis_labels(tokens)
    tick_font, ticks, _ = tick_plan(labels, height / max(len(labels), 1), max_font=9)
    gap = 0.035
    width = (1 - gap * (columns - 1)) / columns
    label_room = _label_room(labels, tick_font["size"])  # any of them may be the one plotly labels
    # A title in parts ("L0 H0 · step 4000") is written one part a line: side by side in a narrow window's columns
    # (~110 px at 1000x800) one-line titles ran into each other.
    lines = max(len(t.split(" · ")) for t in titles) if titles else 1
    top_margin = 24 + 14 * (lines - 1) + label_room  # the rotated key labels stand above the plot, titles above
    data, layout = [], dict(template=NO_TEMPLATE, height=height + top_margin, font=_FONT, showlegend=False,
                            margin=dict(l=8 + label_room, r=4, t=top_margin, b=4), annotations=[])
    for i in range(n):
        z = z_all[i]  # (Q, K)
        top = float(zmax) if zmax else max(float(np.nanmax(z)) if z.size else 1.0, 1e-6)
        xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
        title = html.escape(titles[i] + (" (off)" if off[i] else ""), quote=False)
        data.append(dict(
            type="heatmap", z=z, x=labels, y=labels, zmin=0.0, zmax=top, xaxis=xa, yaxis=ya,
            colorscale=scales[bool(off[i])], name=title,
            showscale=colorbar and i == n - 1, colorbar=dict(title=dict(text="weight", side="right"), thickness=10),
            hovertemplate=f"{title}<br>query: %{{y}}<br>key: %{{x}}<br>weight: %{{z:.3f}}<extra></extra>",
        ))
        x0 = i * (width + gap)
        # No scaleanchor: a square constraint shrinks the plot inside its box and leaves a gap under the
        # titles; the caller sizes `height` to the column width instead.
        layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = dict(
            domain=[x0, x0 + width], anchor=ya, side="top", tickangle=-90, tickfont=tick_font, showgrid=False,
            **ticks)
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = dict(
            domain=[0, 1], anchor=xa, autorange="reversed", tickfont=tick_font, showgrid=False,
            showticklabels=i == 0, title=dict(text="query ↓" if i == 0 else "", font=dict(size=10)), **ticks)
        layout["annotations"].append(dict(
            text="<br>".join(f"<b>{part}</b>" for part in title.split(" · ")), x=x0 + width / 2, y=1,
            xref="paper", yref="paper", yanchor="bottom",
            yshift=label_room, showarrow=False, font=dict(size=12, color="#777" if off[i] else "#222")))
    return go.Figure(data=data, layout=layout, _validate=False)


def diff_figure(diff: torch.Tensor, tokens: list[str], title: str, size: int = 320,
                bound: float | None = None) -> go.Figure:
    """A signed difference of two patterns on a symmetric red-blue scale: ±`bound` (default its own largest
    change; pass one bound to several figures to put them on one scale)."""
    z = _as_np(diff)  # (Q, K)
    bound = max(float(bound) if bound else (float(np.nanmax(np.abs(z))) if z.size else 0.0), 1e-6)
    labels = axis_labels(tokens)
    trace = dict(
        type="heatmap", z=z, x=labels, y=labels, zmin=-bound, zmax=bound, colorscale=DIFF_SCALE, zmid=0.0,
        hovertemplate="query: %{y}<br>key: %{x}<br>change: %{z:+.3f}<extra></extra>",
        colorbar=_square_colorbar("change"),
    )
    return _fast_figure(trace, _square_layout(title, size, labels, colorbar=True))


def _label_room(labels: list[str], font_size: int) -> int:
    """Pixels the rotated key labels need above a plot: the longest label at about 0.62 em per character."""
    longest = max((len(label.replace("\u200b", "")) for label in labels), default=1)
    return 8 + int(font_size * 0.62 * longest)


TICK_FONT_MIN = 8  # px: token labels are never smaller; a long text labels every k-th token instead


def tick_plan(labels: list[str], px_per_token: float, max_font: int = 10) -> tuple[dict, dict, list[str]]:
    """(tick font, tick settings, about the labels plotly will show) for a token axis of about `px_per_token` pixels a
    token: a font of TICK_FONT_MIN to `max_font` px, as large as lets every label show, and plotly's own choice of
    which to label. On a category axis plotly labels every k-th category, k from the axis's drawn length and 1.2x
    the font, from the first one: so labels never overlap, also where the chart is drawn narrower than planned (a
    narrow window's columns), and never shrink below the minimum. Forcing every label, as before, drew 122 of
    them at 6 px."""
    px = max(float(px_per_token), 1e-6)
    font = max(TICK_FONT_MIN, min(max_font, int(px / 1.2)))
    step = max(1, math.ceil(font * 1.2 / px))
    return dict(size=font), dict(tickmode="auto"), labels[::step]


_AXIS_TITLE_PX = 16  # the "key →" title above the key labels: its 10 px line and standoff


COLORBAR_PX = 56  # room under a square heatmap for its colour bar (a horizontal strip), its numbers and title


def _square_colorbar(title: str) -> dict:
    """The colour bar of a square heatmap: a strip under it, from its left edge, as wide as the plot area (the
    square's width: a narrow column makes the width the square's limit, and a figure of its own width is the
    square and its labels). Under, not beside: a bar beside it takes ~100 px of width, and in a narrow window's
    column (Inside a head at 1000x800: ~190 px) the square shrank to ~45 px to make room. (A bar of the planned
    width, in pixels, ran out of a narrow figure.)"""
    # The title under the numbers: plotly drew a horizontal bar's "top" title over the bar's top edge.
    return dict(title=dict(text=title, side="bottom"), thickness=10, orientation="h", lenmode="fraction", len=1.0,
                x=0, xanchor="left", xpad=0, y=0, yref="container", yanchor="bottom", ypad=4)


def _square_layout(title: str, size: int, labels: list[str], colorbar: bool = False) -> dict:
    """A square heatmap `size` px a side under its title, labelled as `tick_plan` says. With a colour bar (a strip
    under the square) it gets a width of its own, the plot and its query labels, shown with the chart's
    width="content": stretched over a wide column, a bar beside it stood ~330 px away at the column's edge."""
    tick_font, ticks, _ = tick_plan(labels, size / max(len(labels), 1))
    room = _label_room(labels, tick_font["size"])  # any of them may be the one plotly labels
    # The title sits above the axis title "key →", which sits above the rotated key labels.
    top = 26 + _AXIS_TITLE_PX + room
    bottom = 4 + (COLORBAR_PX if colorbar else 0)
    across = room + _AXIS_TITLE_PX + 8  # what the query labels, their title and the margins take of the width
    width = dict(width=size + across) if colorbar else {}
    return dict(
        template=NO_TEMPLATE, **width,
        # Drawn narrower than planned, the square shrinks with the width: `fit` says how the figure's height follows
        # its width (fixed_v + (width - fixed_h) * ratio, at most `height`), so a page can shrink it too and leave
        # no band of white under the square (app/common.fitted_chart).
        meta=dict(fit=dict(height=size + top + bottom, fixed_v=top + bottom, fixed_h=across, ratio=1.0)),
        title=dict(text=html.escape(title, quote=False), font=dict(size=12), x=0.5, xanchor="center",
                   y=1, yref="container", yanchor="top", pad=dict(t=6)),
        # The query labels' room is the left margin itself (automargin only grows it), so the width the square gets
        # is exactly the figure's less `across`, as `fit` assumes: left to automargin, the labels took ~9 px less
        # than planned, the plot area was wider than the square and the colour bar under it ran past its edge.
        height=size + top + bottom, margin=dict(l=across - 4, r=4, t=top, b=bottom),
        # Where the chart is drawn narrower than planned (a narrow window's columns) the square shrinks: it keeps to
        # the top left, under its title and labels, instead of floating in the middle of the figure's height.
        xaxis=dict(side="top", tickangle=-90, tickfont=tick_font, showgrid=False, automargin=True,
                   constrain="domain", constraintoward="left", title=dict(text="key →", font=dict(size=10),
                                                                          standoff=4), **ticks),
        yaxis=dict(autorange="reversed", tickfont=tick_font, showgrid=False, automargin=True,
                   scaleanchor="x", constrain="domain", constraintoward="top",
                   title=dict(text="query ↓", font=dict(size=10), standoff=4), **ticks),
        font=_FONT,
    )


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
        font=_FONT, clickmode="event+select", dragmode=False, meta=dict(tile=int(nq), blocks=blocks, **fit),
    )
    return go.Figure(data=[heat, clicks], layout=layout, _validate=False)


def layer_head_map(values: torch.Tensor, title: str, colorbar_title: str, *, off=frozenset(), fmt: str = ".3f",
                   colorscale: str = "Reds", zmax: float | None = None) -> go.Figure:
    """A layers x heads map of one number per head (importance, pattern shift), ablated heads outlined. `zmax`
    fixes the top of the colour scale (from 0); default: plotly's range over the values."""
    z = _as_np(values)  # (L, H)
    n_layers, n_heads = z.shape
    fig = go.Figure(
        go.Heatmap(
            z=z, x=[f"H{h}" for h in range(n_heads)], y=[f"L{layer}" for layer in range(n_layers)],
            colorscale=colorscale, colorbar=dict(title=dict(text=colorbar_title)),
            **({"zmin": 0.0, "zmax": float(zmax)} if zmax else {}),
            hovertemplate="%{y} %{x}<br>" + colorbar_title + ": %{z:" + fmt + "}<extra></extra>",
        )
    )
    for layer, head in off:
        fig.add_shape(type="rect", x0=head - 0.5, x1=head + 0.5, y0=layer - 0.5, y1=layer + 0.5,
                      line=dict(color="black", width=2))
    fig.update_layout(
        template="none", title=dict(text=html.escape(title, quote=False), font=dict(size=13)),
        height=int(min(1400, 120 + 22 * n_layers)), margin=dict(l=50, r=10, t=40, b=30),
        yaxis=dict(autorange="reversed"), font=_FONT,
    )
    return fig


def predictions_figure(before: list[tuple[str, float]], after: list[tuple[str, float]], title: str,
                       changed: str = "with heads off") -> go.Figure:
    """Top-k next tokens before and after an intervention (`changed` names it) as grouped horizontal bars."""
    words = []
    for w, _ in before + after:
        if w not in words:
            words.append(w)
    b = dict(before)
    a = dict(after)
    labels = [safe_label(w) for w in words]  # a leading space is part of the token: ␣
    fig = go.Figure()
    fig.add_trace(go.Bar(y=labels, x=[b.get(w, 0.0) for w in words], name="all heads on", orientation="h",
                         marker_color="#4c72b0"))
    fig.add_trace(go.Bar(y=labels, x=[a.get(w, 0.0) for w in words], name=changed, orientation="h",
                         marker_color="#c44e52"))
    fig.update_layout(template="none", barmode="group",
                      title=dict(text=html.escape(title, quote=False), font=dict(size=13), y=1, yref="container",
                                 yanchor="top", pad=dict(t=10)),
                      height=140 + 28 * len(words), margin=dict(l=90, r=10, t=62, b=40),
                      yaxis=dict(autorange="reversed"), xaxis=dict(title="probability", range=[0, 1]), font=_FONT,
                      # Above the bars, under the title: below them a narrow chart's legend sat on the axis title.
                      legend=dict(orientation="h", x=0, xanchor="left", y=1, yanchor="bottom"))
    return fig


# ===========================================================================================================
# Inside a head, how heads combine, follow a token (issue 12). Figures of one opened-up head (`HeadInside`).
# ===========================================================================================================
# One colour per head of a layer (d3's category10, its grey swapped for indigo so no head looks switched off, then
# the lighter pairs), cycled past 20 heads.
HEAD_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#393b79", "#bcbd22",
                "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#9c9ede",
                "#dbdb8d", "#9edae5"]
OFF_COLOUR = "#bdbdbd"


def head_colour(head: int) -> str:
    return HEAD_COLOURS[head % len(HEAD_COLOURS)]


def _finite_or_nan(values) -> np.ndarray:
    z = _as_np(values)
    return np.where(np.isfinite(z), z, np.nan).astype(np.float32)


def inside_steps_figure(tokens: list[str], scores: torch.Tensor, weights: torch.Tensor, value_norms: torch.Tensor,
                        query: int, title: str) -> go.Figure:
    """One query of one head, step by step, one row of bars per step over the key tokens: the raw scores before
    softmax (masked keys have none), the weights after it, and each key's value vector size ‖v_j‖.
    scores, weights, value_norms: (K,)."""
    from plotly.subplots import make_subplots  # three axes only: the subplot cost that bites is at 72+ axes

    labels = axis_labels(tokens)
    s, w, n = _finite_or_nan(scores), _as_np(weights), _as_np(value_norms)  # (K,) each
    if not (len(labels) == s.shape[0] == w.shape[0] == n.shape[0]):
        raise ValueError(f"{len(labels)} tokens but {s.shape[0]} scores, {w.shape[0]} weights, {n.shape[0]} norms")
    masked = ~np.isfinite(_as_np(scores))
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=["1. scores q·kⱼ·scale (before softmax)", "2. weights αⱼ = softmax(scores)",
                                        "3. value size ‖vⱼ‖"])
    s_colours = np.where(np.nan_to_num(s) >= 0, "#4c72b0", "#c44e52")
    fig.add_trace(go.Bar(x=labels, y=np.nan_to_num(s), marker_color=s_colours, name="score",
                         text=["masked" if m else "" for m in masked], textposition="outside",
                         hovertemplate="key: %{x}<br>score: %{y:.3f}<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Bar(x=labels, y=w, marker_color="#08519c", name="weight",
                         hovertemplate="key: %{x}<br>weight: %{y:.3f}<extra></extra>"), row=2, col=1)
    fig.add_trace(go.Bar(x=labels, y=n, marker_color="#55a868", name="‖v‖",
                         hovertemplate="key: %{x}<br>‖v‖: %{y:.3f}<extra></extra>"), row=3, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=1)  # not fixed at 0-1: over 20+ keys most weights are small
    # The query's own column, outlined in every row.
    for row in (1, 2, 3):
        fig.add_vrect(x0=query - 0.5, x1=query + 0.5, line_width=1.5, line_color="#222", fillcolor="rgba(0,0,0,0)",
                      row=row, col=1)
    fig.update_layout(template="none", title=dict(text=html.escape(title, quote=False), font=dict(size=13)),
                      height=520, showlegend=False, font=_FONT, margin=dict(l=50, r=10, t=60, b=70))
    fig.update_xaxes(tickangle=-60, tickfont=dict(size=max(6, min(10, int(700 / max(len(labels), 1))))))
    for annotation in fig.layout.annotations:
        annotation.font = dict(size=11)
    return fig


def weighted_sum_figure(tokens: list[str], weighted: torch.Tensor, total: torch.Tensor, title: str) -> go.Figure:
    """The weighted sum as a picture: one row per key, αⱼ vⱼ (K, dh), and under them their sum z (dh,), on one
    symmetric red-blue scale, so the rows that make up z stand out."""
    z_rows = _as_np(weighted)  # (K, dh)
    z = np.vstack([z_rows, _as_np(total)[None]])  # (K + 1, dh)
    labels = axis_labels(tokens) + ["Σ = z"]
    if z_rows.shape[0] != len(labels) - 1:
        raise ValueError(f"{len(labels) - 1} tokens for {z_rows.shape[0]} weighted value rows")
    bound = max(float(np.nanmax(np.abs(z))) if z.size else 0.0, 1e-6)
    trace = dict(type="heatmap", z=z, y=labels, zmin=-bound, zmax=bound, zmid=0.0, colorscale=DIFF_SCALE,
                 hovertemplate="%{y}<br>dim %{x}: %{z:+.3f}<extra></extra>", showscale=True)
    layout = dict(template=NO_TEMPLATE, title=dict(text=html.escape(title, quote=False), font=dict(size=13)),
                  height=min(900, 110 + 16 * len(labels)), font=_FONT, margin=dict(l=90, r=10, t=40, b=30),
                  yaxis=dict(autorange="reversed", tickfont=dict(size=9)), xaxis=dict(title="dimension of the head"))
    return _fast_figure(trace, layout)


def heads_combine_figure(names: list[str], norms: torch.Tensor, along: torch.Tensor, off: list[bool],
                         bias_along: float, total_norm: float, title: str) -> go.Figure:
    """How the heads of a layer add up for one token: per head its contribution's size ‖c_h‖ (light) and its
    signed length along the layer's total (dark; negative = against it), then the output bias and the total.
    The dark bars plus the bias's sum to the total's length."""
    norms_np, along_np = _as_np(norms), _as_np(along)  # (H,), (H,)
    if not (len(names) == norms_np.shape[0] == along_np.shape[0] == len(off)):
        raise ValueError(f"{len(names)} names for {norms_np.shape[0]} norms and {along_np.shape[0]} components")
    labels = [html.escape(n, quote=False) + (" (off)" if o else "") for n, o in zip(names, off)]
    colours = [OFF_COLOUR if o else head_colour(i) for i, o in enumerate(off)]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=norms_np, name="size ‖c_h‖", marker_color=colours, opacity=0.35,
                         hovertemplate="%{x}<br>‖c_h‖: %{y:.3f}<extra></extra>"))
    fig.add_trace(go.Bar(x=labels + ["bias", "total"], y=np.append(along_np, [bias_along, total_norm]),
                         name="along the total", marker_color=colours + ["#999999", "#222222"],
                         hovertemplate="%{x}<br>along the total: %{y:+.3f}<extra></extra>"))
    fig.update_layout(template="none", barmode="group", title=dict(text=html.escape(title, quote=False),
                                                                   font=dict(size=13)),
                      height=320, font=_FONT, margin=dict(l=50, r=10, t=40, b=60),
                      legend=dict(orientation="h", y=-0.25), yaxis=dict(zeroline=True, zerolinecolor="#444"))
    return fig


# The narrowest plot area Follow a token gets: the main column of a 1000 px wide window less the figure's margins
# (measured: 18 cells of 24 px). A character of its cell font is about 0.46 of the font size wide.
FOLLOW_PLOT_PX = 430
_CHAR_EM = 0.46


def cell_words(tokens: list[str], plot_px: float = FOLLOW_PLOT_PX) -> tuple[list[str] | None, int]:
    """(the words written in Follow a token's cells, their font size), so that no word runs into the next cell
    (at 1000 px "cabinet" ran over "were"): at 10 px if every token fits its cell, else at 9 px with a word that
    still does not fit cut to the cell with "…" (hover names the whole token); None when a cell holds fewer than
    three characters even so, and the tokens go to the axis instead."""
    labels = [safe_label(t) for t in tokens]
    cell = plot_px / max(len(tokens), 1) - 2  # the cells' gap
    longest = max((len(html.unescape(lab)) for lab in labels), default=1)
    if longest <= cell / (_CHAR_EM * 10):
        return labels, 10
    room = int(cell / (_CHAR_EM * 9))
    if room < 3:
        return None, 10

    def cut(label: str) -> str:
        text = html.unescape(label)
        return label if len(text) <= room else html.escape(text[:room - 1], quote=False) + "…"

    return [cut(lab) for lab in labels], 9


def follow_figure(tokens: list[str], rows: torch.Tensor, row_names: list[str], row_heads: list[int],
                  off: list[bool], query: int, title: str, *, shared_scale: bool = False) -> go.Figure:
    """Where one token's attention goes in many heads, on the sentence itself: one row per head, the tokens as
    cells, each cell shaded in its head's colour by the weight. rows (R, K): the query's row of each head's
    pattern; row_heads: the head index that picks each row's colour.

    ONE heatmap trace (not one per head, which would be R traces): row r's values are mapped into its own band
    [r, r + 1) of the z range, and the colour scale runs white -> head colour inside every band.
    """
    w = _as_np(rows)  # (R, K)
    if w.ndim != 2 or w.shape[0] != len(row_names) or w.shape[1] != len(tokens):
        raise ValueError(f"rows must be ({len(row_names)}, {len(tokens)}); got {w.shape}")
    n_rows, n_keys = w.shape
    top = np.ones((n_rows, 1), np.float32) if shared_scale else np.maximum(w.max(axis=1, keepdims=True), 1e-6)
    shade = np.clip(w / top, 0.0, 0.999)  # (R, K) in [0, 1)
    band = np.arange(n_rows, dtype=np.float32)[:, None]  # (R, 1)
    z = (band + shade) / n_rows  # (R, K): row r in [r / R, (r + 1) / R)
    scale = []
    for r in range(n_rows):
        colour = OFF_COLOUR if off[r] else head_colour(row_heads[r])
        scale += [[r / n_rows, "#ffffff"], [(r + 0.999) / n_rows, colour]]
    scale[-1][0] = 1.0
    names = [html.escape(n, quote=False) + (" (off)" if o else "") for n, o in zip(row_names, off)]
    # The sentence is written in the cells only while it fits; past that the cells are too narrow for words, and
    # a (rows x tokens) array of strings (270 x 512 for SmolLM2) would only weigh down the page. Hover names the key.
    words, font = cell_words(tokens)
    written = words is not None
    trace = dict(type="heatmap", z=z, zmin=0.0, zmax=1.0, colorscale=scale, showscale=False, x=axis_labels(tokens),
                 y=names, customdata=w, textfont=dict(size=font), xgap=2 if written else 0, ygap=3,
                 hovertemplate="%{y}<br>key: %{x}<br>weight: %{customdata:.3f}<extra></extra>")
    if written:
        trace.update(text=np.array([words] * n_rows), texttemplate="%{text}")
    layout = dict(template=NO_TEMPLATE, title=dict(text=html.escape(title, quote=False), font=dict(size=13)),
                  height=min(4000, 70 + 24 * n_rows), font=_FONT, margin=dict(l=90, r=10, t=40, b=10),
                  xaxis=dict(showticklabels=not written, side="top", tickangle=-90, showgrid=False, zeroline=False),
                  yaxis=dict(autorange="reversed", showgrid=False, tickfont=dict(size=10)),
                  shapes=[dict(type="rect", xref="x", yref="paper", x0=query - 0.5, x1=query + 0.5, y0=0, y1=1,
                               line=dict(color="#222", width=2))])
    return _fast_figure(trace, layout)


CLICKABLE_ROWS_UP_TO = 80  # one transparent click target per cell: 6,400 points at most


def pattern_pick_figure(pattern: torch.Tensor, tokens: list[str], title: str, query: int, *, off: bool = False,
                        size: int = 360) -> go.Figure:
    """One head's pattern (Q, K) with the query's row outlined. Plotly reports no clicks on heatmap cells, so for
    up to CLICKABLE_ROWS_UP_TO tokens a transparent scatter point sits on every cell, carrying its query row as
    customdata: a click on any cell picks that row."""
    fig = head_figure(pattern, tokens, title, off=off, size=size, colorbar=True)
    labels = list(fig.data[0].x)
    n = len(labels)
    # On a category axis position i is the i-th category, so the row spans i - 0.5 .. i + 0.5.
    fig.layout.shapes = [dict(type="rect", xref="x", x0=-0.5, x1=n - 0.5, yref="y", y0=query - 0.5, y1=query + 0.5,
                              line=dict(color="#d62728", width=2), layer="above")]
    if n <= CLICKABLE_ROWS_UP_TO:
        # Plotly sends clicks only to points that take hover, so the scatter carries the hover and the heatmap none.
        z = _as_np(pattern)  # (Q, K)
        rows, keys = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)  # (Q * K,) each
        fig.data[0].hoverinfo = "skip"
        fig.add_trace(dict(type="scatter", x=[labels[k] for k in keys], y=[labels[q] for q in rows],
                           customdata=rows, text=[f"{w:.3f}" for w in z.reshape(-1)], mode="markers",
                           marker=dict(size=max(4, int(size / max(n, 1))), color="rgba(0,0,0,0)", symbol="square"),
                           hovertemplate="query: %{y}<br>key: %{x}<br>weight: %{text}<br>"
                                         "click to open this row<extra></extra>", showlegend=False))
        # The click targets' markers would pad the axes' automatic ranges: the cells fill the plot, as without them.
        fig.layout.xaxis.range = [-0.5, n - 0.5]
        fig.layout.yaxis.autorange = False
        fig.layout.yaxis.range = [n - 0.5, -0.5]
    return fig


def vectors_figure(vectors: torch.Tensor, tokens: list[str], title: str, *, row: int | None = None,
                   height: int = 360) -> go.Figure:
    """One vector per token as a row, (T, dh), on a symmetric red-blue scale: a head's queries, keys or values.
    `row` (e.g. the query token) is outlined."""
    z = _as_np(vectors)  # (T, dh)
    labels = axis_labels(tokens)
    if z.ndim != 2 or z.shape[0] != len(labels):
        raise ValueError(f"vectors must be ({len(labels)}, dh), one row per token; got {z.shape}")
    bound = max(float(np.nanmax(np.abs(z))) if z.size else 0.0, 1e-6)
    trace = dict(type="heatmap", z=z, y=labels, zmin=-bound, zmax=bound, zmid=0.0, colorscale=DIFF_SCALE,
                 showscale=False, hovertemplate="%{y}<br>dim %{x}: %{z:+.3f}<extra></extra>")
    shapes = [] if row is None else [dict(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=row - 0.5,
                                          y1=row + 0.5, line=dict(color="#222", width=2))]
    layout = dict(template=NO_TEMPLATE, title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  height=height, font=_FONT, margin=dict(l=70, r=6, t=34, b=24), shapes=shapes,
                  yaxis=dict(autorange="reversed", tickfont=dict(size=max(6, min(9, int(500 / max(len(labels), 1)))))),
                  xaxis=dict(title="dimension"))
    return _fast_figure(trace, layout)


def signed_layer_head_map(values: torch.Tensor, title: str, colorbar_title: str, *, fmt: str = ".3f",
                          marked=frozenset()) -> go.Figure:
    """`layer_head_map` for numbers with a sign (patching effects, direct effects): blue below 0, red above,
    white at 0 on a scale symmetric about it, so a head that pushes the other way is not mistaken for a small one."""
    fig = layer_head_map(values, title, colorbar_title, off=marked, fmt=fmt, colorscale="RdBu_r")
    bound = float(values.abs().max()) or 1.0
    fig.update_traces(zmid=0.0, zmin=-bound, zmax=bound)
    return fig



def timeline_figure(
    log_steps: list[int], log_loss: list[float], steps: list[int], scores: dict[str, np.ndarray],
    baselines: dict[str, float], layer: int, current: int, *, height: int = 640,
) -> go.Figure:
    """The training loss and each head's measured scores against the training step, one panel each, with the
    shown step marked. scores: {panel title: (S, L, H)} for the S saved `steps`; the heads of `layer` are drawn in
    colour, every other head in light grey, and each panel's uniform baseline as a dotted line.
    The step axis is logarithmic (patterns form early and fast); step 0 is drawn at step 1."""
    panels = ["training loss (nats)", *scores]
    n = len(panels)
    gap = 0.06
    h = (1 - gap * (n - 1)) / n
    x_steps = [max(s, 1) for s in steps]  # a log axis has no 0: the initialisation sits at 1, labelled 0
    top = max([*steps, *log_steps, 10])
    tickvals = [v for v in (1, 10, 100, 1_000, 10_000, 100_000) if v <= 10 * top]
    xaxis = dict(type="log", tickvals=tickvals, ticktext=["0" if v == 1 else f"{v:,}" for v in tickvals],
                 showgrid=True, gridcolor="#eee", zeroline=False)
    data: list[dict] = []
    layout = dict(template=NO_TEMPLATE, height=height, font=_FONT, showlegend=True, hovermode="closest",
                  margin=dict(l=44, r=8, t=20, b=110), legend=dict(orientation="h", y=-0.1, yanchor="top", x=0),
                  annotations=[], shapes=[])
    for i, title in enumerate(panels):
        xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
        y0 = max(0.0, round(1 - (i + 1) * h - i * gap, 6))  # no -5e-17 from rounding: plotly refuses it
        layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = dict(
            xaxis, domain=[0, 1], anchor=ya, showticklabels=i == n - 1, matches=None if i == 0 else "x",
            title=dict(text="training step (log scale)") if i == n - 1 else None)
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = dict(
            domain=[y0, min(1.0, y0 + h)], anchor=xa, showgrid=True, gridcolor="#eee", zeroline=False,
            range=None if i == 0 else [0, 1.02], tickformat=None if i == 0 else ".0%")
        layout["annotations"].append(dict(text=f"<b>{html.escape(title, quote=False)}</b>", x=0, y=y0 + h,
                                          xref="paper", yref="paper", xanchor="left", yanchor="bottom",
                                          showarrow=False, font=dict(size=11)))
        layout["shapes"].append(dict(type="line", xref=xa, yref=f"{ya} domain", x0=max(current, 1),
                                     x1=max(current, 1), y0=0, y1=1, line=dict(color="#222", width=1.5, dash="dot")))
        if i == 0:
            data.append(dict(type="scatter", mode="lines", x=np.asarray(log_steps), y=np.asarray(log_loss),
                             xaxis=xa, yaxis=ya, line=dict(color="#222", width=1.5), name="training loss",
                             showlegend=False, hovertemplate="step %{x}<br>loss %{y:.3f}<extra></extra>"))
            continue
        z = np.asarray(scores[title], dtype=np.float32)  # (S, L, H)
        n_layers, n_heads = z.shape[1:]
        # The chosen layer's heads last, so their coloured lines are drawn over the grey ones.
        for l in sorted(range(n_layers), key=lambda x: x == layer):
            for hd in range(n_heads):
                mine = l == layer
                name = f"L{l} H{hd}"
                data.append(dict(
                    type="scatter", mode="lines+markers" if mine else "lines", x=x_steps, y=z[:, l, hd],
                    xaxis=xa, yaxis=ya, name=name, legendgroup=name, showlegend=mine and i == 1,
                    line=dict(color=head_colour(hd) if mine else "#d0d0d0",
                              width=2 if mine else 1),
                    marker=dict(size=5), hovertemplate=f"{name}<br>step %{{customdata}}<br>%{{y:.1%}}<extra></extra>",
                    customdata=steps,
                ))
        data.append(dict(type="scatter", mode="lines", x=[x_steps[0], x_steps[-1]], y=[baselines[title]] * 2,
                         xaxis=xa, yaxis=ya, name="uniform attention", legendgroup="uniform",
                         showlegend=i == 1, line=dict(color="#999", width=1, dash="dot"), hoverinfo="skip"))
    return go.Figure(data=data, layout=layout, _validate=False)


# -- head census (the Census view) ----------------------------------------------------------------------------------
def census_map(scores: torch.Tensor, title: str, uniform: float, baseline_text: str = "",
               zmax: float | None = None, reverse: bool = False) -> go.Figure:
    """One census score as a layers x heads map (rows L0 at the top), its baselines in the colour bar's title.

    scores: (L, H); uniform: what uniform attention scores there; baseline_text: e.g. "best offset -1: 0.51";
    reverse: for scores whose low values are notable (distance, entropy). An invisible scatter over the cells
    carries (layer, head) as customdata, since plotly reports no clicks on heatmap cells."""
    z = np.asarray(scores.detach().float(), dtype=np.float32)  # (L, H)
    n_layers, n_heads = z.shape
    finite = z[np.isfinite(z)]
    top = zmax if zmax is not None else max(1.0, float(finite.max()) if finite.size else 1.0)
    legend = f"uniform {uniform:.2f}" + (f"<br>{baseline_text}" if baseline_text else "")
    layers, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")  # (L, H) each
    data = [
        dict(type="heatmap", z=z, x=[f"H{h}" for h in range(n_heads)], y=[f"L{l}" for l in range(n_layers)],
             zmin=0.0, zmax=top, colorscale="Viridis", reversescale=reverse,
             colorbar=dict(title=dict(text=legend, side="right"), thickness=12),
             hovertemplate="%{y} %{x}: %{z:.3f}<extra></extra>"),
        dict(type="scatter", mode="markers", x=[f"H{h}" for h in heads.ravel()],
             y=[f"L{l}" for l in layers.ravel()], customdata=np.stack([layers.ravel(), heads.ravel()], 1),
             marker=dict(size=max(4, min(18, 600 // max(n_heads, n_layers))), opacity=0.0), hoverinfo="skip",
             showlegend=False),
    ]
    layout = dict(template=NO_TEMPLATE, font=_FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  height=min(900, 120 + 22 * n_layers), margin=dict(l=40, r=10, t=36, b=30),
                  yaxis=dict(autorange="reversed", type="category"), xaxis=dict(type="category", side="bottom"),
                  clickmode="event+select")
    return go.Figure(data=data, layout=layout, _validate=False)


def census_scatter(x: torch.Tensor, y: torch.Tensor, x_title: str, y_title: str,
                   x_base: float | None = None, y_base: float | None = None) -> go.Figure:
    """Every head as a point at (score x, score y), coloured by layer, with each score's baseline as a dotted line:
    the continuum between patterns (few heads are "pure"). customdata is (layer, head) for clicks."""
    xs = np.asarray(x.detach().float(), dtype=np.float32)  # (L, H)
    ys = np.asarray(y.detach().float(), dtype=np.float32)  # (L, H)
    n_layers, n_heads = xs.shape
    layers, heads = np.meshgrid(np.arange(n_layers), np.arange(n_heads), indexing="ij")  # (L, H) each
    names = [f"L{l} H{h}" for l, h in zip(layers.ravel(), heads.ravel())]
    data = [dict(type="scatter", mode="markers", x=xs.ravel(), y=ys.ravel(), text=names,
                 customdata=np.stack([layers.ravel(), heads.ravel()], 1),
                 marker=dict(color=layers.ravel(), colorscale="Plasma", size=9, line=dict(width=0.5, color="#333"),
                             colorbar=dict(title=dict(text="layer"), thickness=10)),
                 hovertemplate="%{text}<br>" + html.escape(x_title) + " %{x:.3f}<br>" + html.escape(y_title)
                               + " %{y:.3f}<extra></extra>", showlegend=False)]
    shapes = []
    if x_base is not None and np.isfinite(x_base):
        shapes.append(dict(type="line", xref="x", yref="paper", x0=x_base, x1=x_base, y0=0, y1=1,
                           line=dict(color="#999", dash="dot", width=1)))
    if y_base is not None and np.isfinite(y_base):
        shapes.append(dict(type="line", xref="paper", yref="y", x0=0, x1=1, y0=y_base, y1=y_base,
                           line=dict(color="#999", dash="dot", width=1)))
    layout = dict(template=NO_TEMPLATE, font=_FONT, height=420, margin=dict(l=50, r=10, t=20, b=40), shapes=shapes,
                  xaxis=dict(title=dict(text=html.escape(x_title)), zeroline=False, showgrid=True, gridcolor="#eee"),
                  yaxis=dict(title=dict(text=html.escape(y_title)), zeroline=False, showgrid=True, gridcolor="#eee"),
                  clickmode="event+select")
    return go.Figure(data=data, layout=layout, _validate=False)


def census_maps_side_by_side(maps: list[torch.Tensor], titles: list[str], zmax: float = 1.0) -> go.Figure:
    """The same census score of several models of one architecture (e.g. training seeds) as maps side by side on
    one colour scale: one figure, one heatmap per panel. maps: each (L, H)."""
    n = len(maps)
    gap = 0.04
    w = (1 - gap * (n - 1)) / n
    data, layout = [], dict(template=NO_TEMPLATE, font=_FONT, height=60 + 26 * maps[0].shape[0] + 40,
                            margin=dict(l=40, r=10, t=30, b=30), annotations=[])
    for i, (m, title) in enumerate(zip(maps, titles)):
        z = np.asarray(m.detach().float(), dtype=np.float32)  # (L, H)
        xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
        x0 = i * (w + gap)
        layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = dict(domain=[x0, x0 + w], anchor=ya, type="category")
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = dict(anchor=xa, autorange="reversed", type="category",
                                                               showticklabels=i == 0)
        data.append(dict(type="heatmap", z=z, x=[f"H{h}" for h in range(z.shape[1])],
                         y=[f"L{l}" for l in range(z.shape[0])], zmin=0.0, zmax=zmax, colorscale="Viridis",
                         showscale=i == n - 1, xaxis=xa, yaxis=ya,
                         hovertemplate=html.escape(title, quote=False) + " %{y} %{x}: %{z:.2f}<extra></extra>"))
        layout["annotations"].append(dict(text=f"<b>{html.escape(title, quote=False)}</b>", x=x0 + w / 2, y=1.0,
                                          xref="paper", yref="paper", xanchor="center", yanchor="bottom",
                                          showarrow=False, font=dict(size=11)))
    return go.Figure(data=data, layout=layout, _validate=False)


# -- circuits in the weights (analysis/circuits.py) ----------------------------------------------------------------
COMPOSITION_TITLES = {"q": "Q-composition", "k": "K-composition", "v": "V-composition"}
# Spelled out, as ATTN_SCALE: the fast path hands a name straight to plotly.js, whose named scales can run the other
# way from plotly.py's. White = at or below the random baseline, dark red = the largest score.
COMPOSITION_SCALE = _scale(["#ffffff", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d", "#99000d"])


def composition_map_figure(scores: torch.Tensor, baseline: float, title: str, *, marked=None,
                           height: int = 520) -> go.Figure:
    """Composition scores (L, H, L, H) as one map: a row per later head, a column per earlier head, blank where
    the earlier layer is not earlier. White at or below `baseline` (the random matrices' mean score), dark red
    at the largest score, so a cell is coloured only as far as it exceeds what unrelated maps would score.
    `marked` ((l1, h1), (l2, h2)) outlines one pair."""
    z = _as_np(scores)  # (L, H, L, H)
    n_layers, n_heads = z.shape[:2]
    n = n_layers * n_heads
    grid = z.reshape(n, n).T  # (N later, N earlier)
    labels = [f"L{layer} H{head}" for layer in range(n_layers) for head in range(n_heads)]
    top = float(np.nanmax(grid)) if np.isfinite(grid).any() else baseline + 1e-6
    ratio = grid / baseline  # (N, N)
    trace = dict(type="heatmap", z=grid, x=labels, y=labels, customdata=ratio, zmin=baseline,
                 zmax=max(top, baseline + 1e-6), colorscale=COMPOSITION_SCALE, hoverongaps=False,
                 colorbar=dict(title=dict(text="score"), tickformat=".2f"),
                 hovertemplate="from %{x} into %{y}<br>score %{z:.3f} (%{customdata:.2f} x random)<extra></extra>")
    shapes = []
    if marked is not None:
        (l1, h1), (l2, h2) = marked
        x, y = l1 * n_heads + h1, l2 * n_heads + h2
        shapes.append(dict(type="rect", x0=x - 0.5, x1=x + 0.5, y0=y - 0.5, y1=y + 0.5,
                           line=dict(color="#222", width=2)))
    small = max(5, min(10, int(600 / max(n, 1))))
    layout = dict(template=NO_TEMPLATE, height=height, font=_FONT, shapes=shapes,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=60, r=10, t=40, b=60),
                  xaxis=dict(title=dict(text="earlier head (writes)"), tickfont=dict(size=small),
                             showticklabels=n <= 72),
                  yaxis=dict(title=dict(text="later head (reads)"), autorange="reversed", tickfont=dict(size=small),
                             showticklabels=n <= 72))
    return _fast_figure(trace, layout)


def difference_map_figure(a: torch.Tensor, b: torch.Tensor, title: str, *, height: int = 520) -> go.Figure:
    """b - a of two composition score tensors (L, H, L, H), on a scale symmetric about 0: red where b is higher."""
    d = _as_np(b) - _as_np(a)  # (L, H, L, H)
    n_layers, n_heads = d.shape[:2]
    n = n_layers * n_heads
    grid = d.reshape(n, n).T  # (N later, N earlier)
    labels = [f"L{layer} H{head}" for layer in range(n_layers) for head in range(n_heads)]
    bound = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
    trace = dict(type="heatmap", z=grid, x=labels, y=labels, zmid=0.0, zmin=-bound, zmax=bound, colorscale=DIFF_SCALE,
                 hoverongaps=False, colorbar=dict(title=dict(text="change")),
                 hovertemplate="from %{x} into %{y}<br>change %{z:+.3f}<extra></extra>")
    layout = dict(template=NO_TEMPLATE, height=height, font=_FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=60, r=10, t=40, b=60), xaxis=dict(title=dict(text="earlier head (writes)")),
                  yaxis=dict(title=dict(text="later head (reads)"), autorange="reversed"))
    return _fast_figure(trace, layout)


def weight_map_figure(values: torch.Tensor, row_labels: list[str], col_labels: list[str], title: str, *,
                      x_title: str, y_title: str, height: int = 560, name: str = "",
                      saturate: float | None = None) -> go.Figure:
    """One head's QK or OV map (token x token, or position x position), blue below 0 and red above on a scale
    symmetric about 0; NaN cells (keys a causal query cannot see) blank. `saturate` (a quantile, e.g. 0.99) puts
    the ends of the scale at that quantile of |value| instead of the largest, so a few extreme rows or columns do
    not wash the rest out; `layout.meta` then says {"bound", "largest"} for the page to state. Token labels are
    thinned as `tick_plan` does (never under TICK_FONT_MIN px)."""
    z = _as_np(values)  # (R, C)
    finite = np.abs(z[np.isfinite(z)])
    largest = float(finite.max()) if finite.size else 1.0
    bound = largest
    if saturate is not None and finite.size:
        bound = min(largest, max(float(np.quantile(finite, saturate)), 1e-6))
    rows, cols = [safe_label(t) for t in row_labels], [safe_label(t) for t in col_labels]
    trace = dict(type="heatmap", z=z, x=cols, y=rows,
                 zmid=0.0, zmin=-bound, zmax=bound, colorscale=DIFF_SCALE, hoverongaps=False, name=name,
                 colorbar=dict(title=dict(text="value")),
                 hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>%{{z:+.3f}}<extra></extra>")
    px = (height - 110) / max(len(rows), 1)  # the plot's height (margins and title off) per row
    y_font, y_ticks, _ = tick_plan(rows, px, max_font=9)
    x_font, x_ticks, _ = tick_plan(cols, px, max_font=9)
    layout = dict(template=NO_TEMPLATE, height=height, font=_FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=70, r=10, t=40, b=70), meta=dict(bound=bound, largest=largest),
                  xaxis=dict(title=dict(text=x_title), tickfont=x_font, **x_ticks),
                  yaxis=dict(title=dict(text=y_title), autorange="reversed", tickfont=y_font, **y_ticks))
    return _fast_figure(trace, layout)


def top_tokens_figure(values: torch.Tensor, labels: list[str], title: str, *, height: int = 360,
                      x_title: str = "logit change per unit of attention") -> go.Figure:
    """The tokens one row of an OV map raises most, as horizontal bars, largest on top."""
    v = _as_np(values)  # (k,)
    trace = dict(type="bar", orientation="h", x=v, y=[safe_label(t) for t in labels], marker=dict(color="#b2182b"),
                 hovertemplate="%{y}: %{x:+.3f}<extra></extra>")
    layout = dict(template=NO_TEMPLATE, height=height, font=_FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=90, r=10, t=40, b=30), yaxis=dict(autorange="reversed", type="category"),
                  xaxis=dict(title=dict(text=x_title)))
    return _fast_figure(trace, layout)


def singular_values_figure(qk: torch.Tensor, ov: torch.Tensor, qk_rank: float, ov_rank: float, title: str, *,
                           height: int = 300) -> go.Figure:
    """The singular values of one head's QK and OV maps (dh each, descending), each scaled by its largest, with
    their effective ranks in the legend."""
    data = []
    for name, s, rank, colour in (("QK", qk, qk_rank, "#2166ac"), ("OV", ov, ov_rank, "#b2182b")):
        v = _as_np(s)  # (dh,)
        data.append(dict(type="scatter", mode="lines+markers", x=np.arange(1, len(v) + 1), y=v / max(v[0], 1e-30),
                         name=f"{name} (effective rank {rank:.1f} of {len(v)})", line=dict(color=colour),
                         hovertemplate=f"{name} #%{{x}}: %{{y:.3f}} of the largest<extra></extra>"))
    layout = dict(template=NO_TEMPLATE, height=height, font=_FONT,
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=50, r=10, t=40, b=40), legend=dict(orientation="h", y=-0.25),
                  xaxis=dict(title=dict(text="singular value #")), yaxis=dict(range=[0, 1.05], title="of the largest"))
    return go.Figure(data=data, layout=layout, _validate=False)


def causal_check_figure(on: torch.Tensor, off: torch.Tensor, title: str, switched_off: str, *,
                        height: int = 320) -> go.Figure:
    """Every head's score with all heads on and with one head switched off, as paired bars (L*H heads)."""
    a, b = _as_np(on).reshape(-1), _as_np(off).reshape(-1)  # (N,)
    n_layers, n_heads = _as_np(on).shape
    labels = [f"L{layer} H{head}" for layer in range(n_layers) for head in range(n_heads)]
    data = [dict(type="bar", x=labels, y=a, name="all heads on", marker=dict(color="#4292c6"),
                 hovertemplate="%{x}: %{y:.1%}<extra>all on</extra>"),
            dict(type="bar", x=labels, y=b, name=f"{switched_off} off", marker=dict(color="#ef8a62"),
                 hovertemplate="%{x}: %{y:.1%}<extra>" + html.escape(switched_off) + " off</extra>")]
    layout = dict(template=NO_TEMPLATE, height=height, font=_FONT, barmode="group",
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12)),
                  margin=dict(l=50, r=10, t=40, b=60), legend=dict(orientation="h", y=1.12),
                  yaxis=dict(tickformat=".0%", range=[0, 1.02]), xaxis=dict(type="category"))
    return go.Figure(data=data, layout=layout, _validate=False)


def circuits_timeline_figure(steps: list[int], pairs: dict[str, np.ndarray], baseline: float,
                             copying: np.ndarray | dict[str, np.ndarray] | None,
                             pattern: dict[str, np.ndarray] | None = None,
                             current: int | None = None, *, height: int = 620) -> go.Figure:
    """Circuit scores against the training step, one panel each: composition scores of chosen head pairs
    ({name: (S,)}) with the random baseline dotted; OV copying scores (every head's, (S, L, H), one thin line per
    head; or chosen heads' lines {name: (S,)}; None: no such panel);
    and, when given, measured pattern scores ({name: (S,)}, e.g. the later head's induction score from the probe
    file) so a composition can be read against the behaviour it may explain. Line j of each dict has colour j, so
    a model's lines match across panels. NaN (a step one model did not save) is bridged. Logarithmic step axis,
    step 0 at 1."""
    x = [max(s, 1) for s in steps]
    panels = (["composition score"] + (["OV copying score"] if copying is not None else [])
              + (["measured pattern score"] if pattern else []))
    n = len(panels)
    gap = 0.08
    h = (1 - gap * (n - 1)) / n
    top = max([*steps, 10])
    tickvals = [v for v in (1, 10, 100, 1_000, 10_000, 100_000) if v <= 10 * top]
    base_x = dict(type="log", tickvals=tickvals, ticktext=["0" if v == 1 else f"{v:,}" for v in tickvals],
                  showgrid=True, gridcolor="#eee")
    layout = dict(template=NO_TEMPLATE, height=height, font=_FONT, hovermode="closest", showlegend=True,
                  margin=dict(l=50, r=8, t=20, b=90), legend=dict(orientation="h", y=-0.12, yanchor="top"),
                  annotations=[], shapes=[])
    data: list[dict] = []
    for i, title in enumerate(panels):
        xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
        y0 = max(0.0, round(1 - (i + 1) * h - i * gap, 6))
        layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = dict(
            base_x, domain=[0, 1], anchor=ya, showticklabels=i == n - 1, matches=None if i == 0 else "x",
            title=dict(text="training step (log scale)") if i == n - 1 else None)
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = dict(
            domain=[y0, min(1.0, y0 + h)], anchor=xa, showgrid=True, gridcolor="#eee",
            range=[-1.05, 1.05] if title == "OV copying score" else None,
            tickformat=".0%" if title == "measured pattern score" else None)
        layout["annotations"].append(dict(text=f"<b>{html.escape(title, quote=False)}</b>", x=0, y=y0 + h,
                                          xref="paper", yref="paper", xanchor="left", yanchor="bottom",
                                          showarrow=False, font=dict(size=11)))
        if current is not None:
            layout["shapes"].append(dict(type="line", xref=xa, yref=f"{ya} domain", x0=max(current, 1),
                                         x1=max(current, 1), y0=0, y1=1, line=dict(color="#222", width=1, dash="dot")))
        if i == 0:
            for j, (name, values) in enumerate(pairs.items()):
                data.append(dict(type="scatter", mode="lines+markers", x=x, y=np.asarray(values), xaxis=xa, yaxis=ya,
                                 name=name, line=dict(color=head_colour(j), width=2), customdata=steps,
                                 connectgaps=True,
                                 hovertemplate=f"{html.escape(name)}<br>step %{{customdata}}: %{{y:.3f}}"
                                               "<extra></extra>"))
            data.append(dict(type="scatter", mode="lines", x=[x[0], x[-1]], y=[baseline] * 2, xaxis=xa, yaxis=ya,
                             name="random matrices", line=dict(color="#999", dash="dot"), hoverinfo="skip"))
        elif title == "OV copying score" and isinstance(copying, dict):
            for j, (name, values) in enumerate(copying.items()):
                data.append(dict(type="scatter", mode="lines+markers", x=x, y=np.asarray(values), xaxis=xa,
                                 yaxis=ya, name=name, line=dict(color=head_colour(j), width=2, dash="dot"),
                                 connectgaps=True, customdata=steps,
                                 hovertemplate=f"{html.escape(name)}<br>step %{{customdata}}: %{{y:+.2f}}"
                                               "<extra></extra>"))
        elif title == "OV copying score":
            c = np.asarray(copying, dtype=np.float32)  # (S, L, H)
            for layer in range(c.shape[1]):
                for head in range(c.shape[2]):
                    name = f"L{layer} H{head}"
                    data.append(dict(type="scatter", mode="lines", x=x, y=c[:, layer, head], xaxis=xa, yaxis=ya,
                                     name=name, legendgroup="copying", showlegend=False,
                                     line=dict(color=head_colour(head), width=1 + (layer == c.shape[1] - 1)),
                                     customdata=steps,
                                     hovertemplate=f"{name} copying<br>step %{{customdata}}: %{{y:+.2f}}"
                                                   "<extra></extra>"))
        else:
            for j, (name, values) in enumerate(pattern.items()):
                data.append(dict(type="scatter", mode="lines+markers", x=x, y=np.asarray(values), xaxis=xa, yaxis=ya,
                                 name=name, line=dict(color=head_colour(j), width=2, dash="dash"), customdata=steps,
                                 connectgaps=True,
                                 hovertemplate=f"{html.escape(name)}<br>step %{{customdata}}: %{{y:.1%}}"
                                               "<extra></extra>"))
    return go.Figure(data=data, layout=layout, _validate=False)


def formation_figure(formations: list, current: int | None = None, *, height: int = 640) -> go.Figure:
    """`circuits_timeline_figure` for `analysis.circuits.Formation`s (one model or seed each): its K-composition
    from the previous-token head into the induction head, that head's OV copying score and its induction score,
    against the step, one colour per model. Steps one model did not save are bridged."""
    steps = sorted(set().union(*(f.steps for f in formations)))

    def on_steps(f, values) -> np.ndarray:  # (S,) on the union of the steps, NaN where f has no such step
        at = dict(zip(f.steps, _as_np(values).tolist()))
        return np.array([at.get(s, np.nan) for s in steps], dtype=np.float64)

    def pair(f) -> str:
        return f"L{f.previous_head[0]} H{f.previous_head[1]} → L{f.induction_head[0]} H{f.induction_head[1]}"

    def head(f) -> str:
        return f"L{f.induction_head[0]} H{f.induction_head[1]}"

    pairs = {f"{f.name}: K-composition {pair(f)}": on_steps(f, f.composition["k"]) for f in formations}
    copying = {f"{f.name}: {head(f)} copying": on_steps(f, f.copying) for f in formations}
    pattern = {f"{f.name}: {head(f)} induction score": on_steps(f, f.induction) for f in formations}
    return circuits_timeline_figure(steps, pairs, formations[0].baseline["k"].mean, copying, pattern, current,
                                    height=height)
