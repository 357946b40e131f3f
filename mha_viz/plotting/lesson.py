"""The Lesson's figures: panels of square cells laid out in a grid sized from the main column's width, so every
token is labelled at a readable size (or the figure says which labels it left out); a row of heads' patterns; the
mechanism of two heads for one query (queries, keys and values, the scaled q·k scores with the causal mask, the
softmax and the weighted sum of values); the heads' outputs placed into the concatenation, each head's slice of the
output projection W_O as a matrix, the contributions, the bias and their sum.

A figure is planned `column` pixels wide (the main column's width as the page measured it; `COLUMN_PX` until it
has), and drawn at that width (width="content"), so its cells stay square. Every title is centred on its panel
(`xanchor="center"`) and broken onto two lines, or shrunk, where one line would run past its panel: no title
runs into its neighbour. The head a step names is marked: its title bold with a ▶ and its panels outlined
(`MARK`). Its panels' and titles' `name` carry the head's name, so the page's hover hook can find it.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import torch

from mha_viz.plotting.colours import ATTN_SCALE, DIFF_SCALE, OFF_SCALE, sqrt_scale
from mha_viz.plotting.layout import FONT, NO_TEMPLATE, _as_np, _label_room
from mha_viz.plotting.tokens import axis_labels

COLUMN_PX = 540  # the main column's width at 1000x800, sidebar open: the plan until the page has measured it
CELL_MAX = 64.0  # px: a cell no larger (a short input would draw huge squares)
FONT_PX = 10  # px: token labels and tick labels are never smaller
LABEL_PX = 12.0  # px a token label needs at `FONT_PX` (1.2 line height)
GAP = 16  # px between panels
MARK = "#e6550d"  # the outline and title colour of the head the step names
TITLE_FONT = 11  # px: a panel's title
LINE_PX = 15  # px: one line of a panel's title
CHAR_EM = 0.6  # a title character's width in em (plotly's default sans-serif, a little generous)


def positions(tokens: list[str]) -> list[str]:
    """Axis labels "3 the": each token with its position (the step's words name positions), unique."""
    return axis_labels([f"{i} {t}" for i, t in enumerate(tokens)])


def text_px(text: str, size: float, bold: bool = False) -> float:
    """About how many pixels `text` takes at `size` px (tags left out)."""
    plain = html.unescape(text.replace("<b>", "").replace("</b>", ""))
    return len(plain) * size * CHAR_EM * (1.08 if bold else 1.0)


def fit_title(title: str, width: float, bold: bool = False) -> tuple[str, int, int]:
    """(the title's HTML, its lines, its font size): one line where it fits `width` px; else broken at " · " or
    ": " or a space into lines that fit; the font shrinks (to `FONT_PX` - 1 at least) only where a line still does
    not. Escaped here."""
    size = TITLE_FONT
    lines = [title]
    if text_px(title, size, bold) > width:
        words = title.replace(" · ", " ·\x00").replace(": ", ":\x00").replace(" ", "\x01").split("\x00")
        pieces = [p for w in words for p in w.split("\x01") if p] if len(words) == 1 else \
            [w.replace("\x01", " ") for w in words]
        lines, line = [], ""
        for p in pieces:
            candidate = f"{line} {p}".strip() if line else p
            if line and text_px(candidate, size, bold) > width:
                lines.append(line)
                line = p
            else:
                line = candidate
        lines.append(line)
    while size > FONT_PX - 1 and max(text_px(x, size, bold) for x in lines) > width:
        size -= 1
    body = "<br>".join(html.escape(x, quote=False) for x in lines)
    return (f"<b>{body}</b>" if bold else body), len(lines), size


@dataclass(frozen=True)
class Panel:
    """One heatmap of a grid: `z` (rows, columns), the row labels (tokens), the column labels (tokens or None for
    numbered dimensions), its colour range, its title, and whether it shows the step's named head (`marked`)."""
    z: np.ndarray
    title: str
    y: list[str]
    x: list[str] | None = None
    colorscale: list | None = None
    zmin: float = 0.0
    zmax: float = 1.0
    hover: str = "weight"
    marked: bool = False
    name: str = ""
    mask: np.ndarray | None = None  # (rows, columns) bool: cells drawn grey under the values (a causal mask)
    row: int | None = None  # a row outlined in black: the one query the step follows


def _cell(widest: int, n_panels: int, n_tokens: int, column: float, y_room: float) -> tuple[float, int]:
    """(cell px, label every k-th token): the largest square cell that fits `widest` cells across the column, and
    the step between labelled tokens (1 where every token fits at `FONT_PX`)."""
    cell = min(CELL_MAX, (column - y_room - 26 - GAP * (n_panels - 1)) / max(widest, 1))
    return cell, max(1, math.ceil(LABEL_PX / cell)) if n_tokens > 1 else 1



def _unit(domain: list[float]) -> list[float]:
    """An axis domain with each end inside [0, 1] (floating-point sums land a hair outside)."""
    return [min(1.0, max(0.0, v)) for v in domain]

def panel_grid(rows: list[list[Panel]], title: str = "", column: float = COLUMN_PX) -> go.Figure:
    """Panels in rows, one square cell size for all, as large as `column` px allows, every token labelled where
    it allows. The figure's `layout.meta["labelled"]` says how many token labels each axis shows of how many (the
    caller says it under the figure when it is not all)."""
    n_tokens = max(len(p.y) for row in rows for p in row)
    widest = max(sum(p.z.shape[1] for p in row) for row in rows)
    most = max(len(r) for r in rows)
    font = dict(size=FONT_PX)
    y_room = _label_room(rows[0][0].y, FONT_PX)
    cell, every = _cell(widest, most, n_tokens, column, y_room)
    shown = lambda labels: labels[::every]  # noqa: E731
    y_room = _label_room(shown(rows[0][0].y), FONT_PX)
    heights, tops, fitted = [], [], []
    for row in rows:
        x_room = max((_label_room(shown(p.x), FONT_PX) for p in row if p.x), default=18)
        titles = [fit_title(("▶ " if p.marked else "") + p.title, p.z.shape[1] * cell + GAP - 4, p.marked)
                  for p in row]
        fitted.append(titles)
        tops.append(max(lines for _, lines, _ in titles) * LINE_PX + 4 + x_room)
        heights.append(max(p.z.shape[0] for p in row) * cell)
    plot_w = widest * cell + GAP * (most - 1)
    plot_h = sum(heights) + sum(tops) + GAP * (len(rows) - 1)
    top_margin = 22 if title else 4
    layout = dict(template=NO_TEMPLATE, font=FONT, showlegend=False, width=int(plot_w + y_room + 26),
                  height=int(plot_h + top_margin + 6), margin=dict(l=y_room + 20, r=6, t=top_margin, b=6),
                  annotations=[], shapes=[],
                  meta=dict(labelled=len(shown(rows[0][0].y)), tokens=n_tokens, cell=cell, font=FONT_PX))
    if title:
        layout["title"] = dict(text=html.escape(title, quote=False), font=dict(size=12), x=0, xanchor="left",
                               y=1, yref="container", yanchor="top", pad=dict(t=4))
    data, y_at, i = [], 0.0, 0
    for row, top, h, titles in zip(rows, tops, heights, fitted):
        x_at = 0.0
        y_at += top
        for j, (p, (text, _, size)) in enumerate(zip(row, titles)):
            w = p.z.shape[1] * cell
            xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
            # Clamped to [0, 1]: the last row's bottom is 1 - plot_h / plot_h, which rounds to -2e-16 on some
            # sizes (11 tokens at 1600 px), a value plotly refuses.
            dom_x = _unit([x_at / plot_w, (x_at + w) / plot_w])
            dom_y = _unit([1 - (y_at + p.z.shape[0] * cell) / plot_h, 1 - y_at / plot_h])
            x = p.x if p.x is not None else list(range(p.z.shape[1]))
            if p.mask is not None:  # grey where masked, under the values (NaN there leaves it showing)
                data.append(dict(type="heatmap", z=np.where(p.mask, 1.0, np.nan).astype(np.float32), x=x, y=p.y,
                                 xaxis=xa, yaxis=ya, zmin=0.0, zmax=1.0, colorscale=[[0, "#bdbdbd"], [1, "#bdbdbd"]],
                                 showscale=False, hoverinfo="skip", name=f"{p.title} (masked)"))
            data.append(dict(type="heatmap", z=p.z, x=x, y=p.y, xaxis=xa, yaxis=ya, zmin=p.zmin, zmax=p.zmax,
                             colorscale=p.colorscale or ATTN_SCALE, showscale=False, name=p.title,
                             xgap=0, ygap=0,
                             hovertemplate=f"{html.escape(p.title, quote=False)}<br>%{{y}}<br>"
                                           f"{'key' if p.x else 'dim'}: %{{x}}<br>{p.hover}: %{{z:.3f}}"
                                           "<extra></extra>"))
            token_x = dict(tickmode="array", tickvals=shown(p.x), tickangle=-90) if p.x else \
                dict(tickmode="array", tickvals=[0, p.z.shape[1] - 1], tickangle=0)
            layout["xaxis" if i == 0 else f"xaxis{i + 1}"] = dict(
                domain=dom_x, anchor=ya, side="top", tickfont=font, showgrid=False, fixedrange=True, **token_x)
            layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = dict(
                domain=dom_y, anchor=xa, autorange="reversed", tickfont=font, showgrid=False, fixedrange=True,
                tickmode="array", tickvals=shown(p.y), showticklabels=j == 0)
            layout["annotations"].append(dict(
                text=text, x=(dom_x[0] + dom_x[1]) / 2, xanchor="center", y=1 - (y_at - top) / plot_h,
                xref="paper", yref="paper", yanchor="top", showarrow=False, name=p.name or p.title,
                font=dict(size=size, color=MARK if p.marked else "#222")))
            if p.marked:
                layout["shapes"].append(dict(type="rect", xref="paper", yref="paper", x0=dom_x[0], x1=dom_x[1],
                                             y0=dom_y[0], y1=dom_y[1], line=dict(color=MARK, width=3),
                                             name=p.name))
            if p.row is not None:  # the query the step follows: its row outlined
                layout["shapes"].append(dict(type="rect", xref=xa, yref=ya, x0=-0.5, x1=p.z.shape[1] - 0.5,
                                             y0=p.row - 0.5, y1=p.row + 0.5, line=dict(color="#000", width=2),
                                             name=f"{p.title} (query {p.row})"))
            x_at += w + GAP
            i += 1
        y_at += h + GAP
    return go.Figure(data=data, layout=layout, _validate=False)


def labels_note(fig: go.Figure) -> str:
    """"" where every token is labelled; else which are (the figure's `meta`), for a caption under it."""
    meta = fig.layout.meta or {}
    labelled, tokens = meta.get("labelled", 0), meta.get("tokens", 0)
    if labelled >= tokens:
        return ""
    step = math.ceil(tokens / max(labelled, 1))
    nth = {2: "2nd", 3: "3rd"}.get(step, f"{step}th")
    return (f"{tokens} tokens: every {nth} is labelled on the axes (from position 0), the rest left out to fit "
            "the column; hover a cell for its token.")


def heads_grid(patterns: torch.Tensor, tokens: list[str], titles: list[str], off: list[bool],
               marked: list[bool], names: list[str], column: float = COLUMN_PX) -> go.Figure:
    """(N, Q, K) patterns, as many heads a row as the column holds at a readable cell, the named head marked."""
    z_all = _as_np(patterns)  # (N, Q, K)
    labels = positions(tokens)
    n, t = z_all.shape[0], z_all.shape[-1]
    per_row = max(1, min(n, int((column - 90) // (t * LABEL_PX + GAP))))  # heads a row, every token labelled
    per_row = math.ceil(n / math.ceil(n / per_row))  # rows as even as they can be
    panels = [Panel(z_all[i], titles[i] + (" (off)" if off[i] else ""), labels, labels,
                    OFF_SCALE if off[i] else sqrt_scale(ATTN_SCALE), 0.0, 1.0, "weight", marked[i], names[i])
              for i in range(n)]
    return panel_grid([panels[i:i + per_row] for i in range(0, n, per_row)], column=column)


def _bound(*tensors: torch.Tensor) -> float:
    finite = [float(t[torch.isfinite(t)].abs().max()) for t in tensors if torch.isfinite(t).any()]
    return max(finite + [1e-6])


def _flow(panels: list[Panel], room: float) -> list[list[Panel]]:
    """`panels` in order, as many a row as fit `room` px with every token labelled (a cell of `LABEL_PX`)."""
    rows: list[list[Panel]] = [[]]
    for p in panels:
        row = rows[-1] + [p]
        if rows[-1] and sum(q.z.shape[1] for q in row) * LABEL_PX + GAP * (len(row) - 1) > room:
            rows.append([p])
        else:
            rows[-1] = row
    return rows


def mechanism_figure(tokens: list[str], heads: list[dict], query: int | None = None,
                     column: float = COLUMN_PX) -> go.Figure:
    """Two (or more) heads of one layer on the same tokens, one head a block of two rows: its queries Q, keys K and
    values V (tokens x the head's dimensions, one red-blue scale for the three), then its scores q·k as the model
    scales them (grey where the causal mask forbids the key), their softmax (the attention pattern) and the
    weighted sum of values, the head's output (tokens x dimensions). `query`: the row outlined in Q, the scores,
    the softmax and the output, the one query the step follows. Each entry of `heads`: name, q, k, v (T, dh),
    scores (Q, K) with -inf where masked, weights (Q, K), marked."""
    labels = positions(tokens)
    rows = []
    room = column - _label_room(labels, FONT_PX) - 26  # px across for cells and gaps, every token labelled
    for h in heads:
        out = h["weights"] @ h["v"]  # (Q, dh): each query's weighted sum of the values
        qkv = _bound(h["q"], h["k"], h["v"], out)
        scores = h["scores"].clone()  # (Q, K), -inf where masked
        masked = ~torch.isfinite(scores)  # (Q, K)
        s = _bound(scores)
        shown = scores.masked_fill(masked, float("nan"))  # NaN: drawn as the grey background, the mask
        mark = dict(marked=h["marked"], name=h["name"])
        # In reading order: Q and K, their scaled scores, the softmax, then V and the weighted sum.
        panels = [Panel(_as_np(h["q"]), f"{h['name']} · Q", labels, None, DIFF_SCALE, -qkv, qkv, "value",
                        row=query, **mark),
                  Panel(_as_np(h["k"]), f"{h['name']} · K", labels, None, DIFF_SCALE, -qkv, qkv, "value", **mark),
                  Panel(_as_np(shown), f"{h['name']} · q·k scaled", labels, labels, DIFF_SCALE, -s, s, "score",
                        mask=masked.numpy(), row=query, **mark),
                  Panel(_as_np(h["weights"]), f"{h['name']} · softmax", labels, labels, ATTN_SCALE, 0.0, 1.0,
                        "weight", row=query, **mark),
                  Panel(_as_np(h["v"]), f"{h['name']} · V", labels, None, DIFF_SCALE, -qkv, qkv, "value", **mark),
                  Panel(_as_np(out), f"{h['name']} · weights × V", labels, None, DIFF_SCALE, -qkv, qkv, "value",
                        row=query, **mark)]
        rows += _flow(panels, room)
    return panel_grid(rows, column=column)


def _tiny_axis(**extra) -> dict:
    return dict(fixedrange=True, showgrid=False, zeroline=False, tickfont=dict(size=FONT_PX), **extra)


def concat_figure(names: list[str], outputs: torch.Tensor, w_o: torch.Tensor, contributions: torch.Tensor,
                  bias: torch.Tensor | None, off: list[bool], marked: int | None, bounds: tuple[float, float, float],
                  title: str, column: float = COLUMN_PX) -> go.Figure:
    """One token through the combination, drawn as the matrix product it is. Top: the concatenation z, the heads'
    outputs (H, dh) stood head under head as one column of H x dh numbers, beside the output projection W_O
    (H x dh rows, D columns), cut into each head's slice (its dh rows). Below: each head's part of z times its
    slice, its contribution (H, D); the bias (D,); and their sum, the layer's output for the token (D,).
    `bounds`: the colour ranges of z, W_O and the projected rows, fixed by the caller so the picture with a head
    off is read on the same scale as with every head on. Cells are square where the column allows, and the
    projected rows at least one label high."""
    out, wo, con = _as_np(outputs), _as_np(w_o), _as_np(contributions)  # (H, dh), (H, dh, D), (H, D)
    n_heads, dh = out.shape
    d = con.shape[1]
    b = np.zeros(d, dtype=np.float32) if bias is None else _as_np(bias)
    total = con.sum(0) + b  # (D,)
    bound_z, bound_w, bound_c = bounds
    rows_c = [f"{'▶ ' if marked == h else ''}{names[h]}{' (off)' if off[h] else ''}" for h in range(n_heads)]
    y_c = rows_c + ["bias", "sum = output"]
    left = 20 + _label_room(y_c, FONT_PX)
    z_cells = 3  # z's one column drawn 3 cells wide, so its colours can be read
    cell = min(CELL_MAX, (column - left - 10 - GAP) / (d + z_cells))
    row_c = max(cell, LABEL_PX + 2)  # a projected row: at least its label's line
    plot_w = (d + z_cells) * cell + GAP
    t_top, lines_top, size_top = fit_title(f"z, the concatenation: {n_heads} heads' outputs ({dh} numbers each) "
                                           f"one under another · W_O, the output projection: {n_heads * dh} rows "
                                           f"x {d}, each head's {dh} rows its slice", plot_w)
    t_bot, lines_bot, size_bot = fit_title("each head's part of z × its slice of W_O = its contribution; then the "
                                           "bias; their sum is the layer's output for this token", plot_w)
    axis_room = 36  # under a panel: its tick numbers and its axis title
    h_top, h_bot = n_heads * dh * cell, len(y_c) * row_c
    head_top, head_bot = lines_top * LINE_PX + 6, lines_bot * LINE_PX + 6
    plot_h = head_top + h_top + axis_room + head_bot + h_bot + axis_room
    y = lambda px: 1 - px / plot_h  # noqa: E731  (pixels from the top of the plot -> paper)
    dom_top = [y(head_top + h_top), y(head_top)]
    dom_bot = [y(head_top + h_top + axis_room + head_bot + h_bot), y(head_top + h_top + axis_room + head_bot)]
    x_z = [0, z_cells * cell / plot_w]
    x_w = [(z_cells * cell + GAP) / plot_w, 1.0]
    concat = out.reshape(-1, 1)  # (H * dh, 1)
    who = np.repeat(np.array(names), dh)  # (H * dh,) whose output each row of z is
    data = [dict(type="heatmap", z=concat, x=[0], y=list(range(n_heads * dh)), customdata=who[:, None],
                 zmin=-bound_z, zmax=bound_z, colorscale=DIFF_SCALE, showscale=False, name="concatenation z",
                 hovertemplate="z: %{customdata}, its dim %{y}: %{z:+.3f}<extra></extra>"),
            dict(type="heatmap", z=wo.reshape(n_heads * dh, d), x=list(range(d)), y=list(range(n_heads * dh)),
                 customdata=np.repeat(who[:, None], d, 1), xaxis="x2", yaxis="y2", zmin=-bound_w, zmax=bound_w,
                 colorscale=DIFF_SCALE, showscale=False, name="W_O",
                 hovertemplate="W_O: %{customdata}'s slice, row %{y}, output dim %{x}: %{z:+.3f}<extra></extra>"),
            dict(type="heatmap", z=np.vstack([con, b[None], total[None]]), x=list(range(d)), y=y_c, xaxis="x3",
                 yaxis="y3", zmin=-bound_c, zmax=bound_c, colorscale=DIFF_SCALE, showscale=False, name="projected",
                 hovertemplate="%{y}<br>output dim %{x}: %{z:+.3f}<extra></extra>")]
    shapes = []
    for h in range(1, n_heads):  # where one head's part (and its slice) ends and the next begins
        for xa, ya, x1 in (("x", "y", 0.5), ("x2", "y2", d - 0.5)):
            shapes.append(dict(type="line", xref=xa, yref=ya, x0=-0.5, x1=x1, y0=h * dh - 0.5, y1=h * dh - 0.5,
                               line=dict(color="#222", width=2)))
    shapes.append(dict(type="line", xref="x3", yref="y3", x0=-0.5, x1=d - 0.5, y0=n_heads + 0.5, y1=n_heads + 0.5,
                       line=dict(color="#222", width=2)))  # the sum under its parts
    if marked is not None:
        for xa, ya, x1 in (("x", "y", 0.5), ("x2", "y2", d - 0.5)):
            shapes.append(dict(type="rect", xref=xa, yref=ya, x0=-0.5, x1=x1, y0=marked * dh - 0.5,
                               y1=(marked + 1) * dh - 0.5, line=dict(color=MARK, width=3), name=names[marked]))
        shapes.append(dict(type="rect", xref="x3", yref="y3", x0=-0.5, x1=d - 0.5, y0=marked - 0.5,
                           y1=marked + 0.5, line=dict(color=MARK, width=3), name=names[marked]))
    annotations = [dict(text=t_top, x=0.5, xanchor="center", xref="paper", y=1, yref="paper", yanchor="top",
                        showarrow=False, font=dict(size=size_top, color="#222"), name="z and W_O"),
                   dict(text=t_bot, x=0.5, xanchor="center", xref="paper", y=y(head_top + h_top + axis_room),
                        yref="paper", yanchor="top", showarrow=False, font=dict(size=size_bot, color="#222"),
                        name="contributions")]
    dims = dict(tickmode="array", tickvals=[0, d - 1])
    layout = dict(template=NO_TEMPLATE, font=FONT, showlegend=False, width=int(plot_w + left + 10),
                  height=int(plot_h + 30), margin=dict(l=left, r=10, t=26, b=4),
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12), x=0, xanchor="left",
                             y=1, yref="container", yanchor="top", pad=dict(t=4)),
                  xaxis=_tiny_axis(domain=x_z, anchor="y", showticklabels=False),
                  yaxis=_tiny_axis(domain=dom_top, anchor="x", autorange="reversed", tickmode="array",
                                   tickvals=[h * dh + (dh - 1) / 2 for h in range(n_heads)],
                                   ticktext=[f"{'▶ ' if marked == h else ''}{names[h]}" for h in range(n_heads)]),
                  xaxis2=_tiny_axis(domain=x_w, anchor="y2", **dims,
                                    title=dict(text="output dimension (what the layer adds to the token's vector)",
                                               font=dict(size=FONT_PX), standoff=2)),
                  yaxis2=_tiny_axis(domain=dom_top, anchor="x2", autorange="reversed", showticklabels=False),
                  xaxis3=_tiny_axis(domain=x_w, anchor="y3", **dims,
                                    title=dict(text="output dimension", font=dict(size=FONT_PX), standoff=2)),
                  yaxis3=_tiny_axis(domain=dom_bot, anchor="x3", autorange="reversed", tickmode="array",
                                    tickvals=y_c),
                  shapes=shapes, annotations=annotations,
                  meta=dict(cell=cell, font=FONT_PX, row_px=row_c))
    return go.Figure(data=data, layout=layout, _validate=False)


def square_maps(fig: go.Figure, column: float) -> go.Figure:
    """A figure of heatmaps side by side (each axis pair `x{i}`/`y{i}`, as census maps are drawn) made `column` px
    wide with square cells: each y axis held to its x axis's scale, and the height from the widest map's cells."""
    layout = fig.layout
    pairs = [(k, "yaxis" + k[5:]) for k in layout.to_plotly_json() if k.startswith("xaxis")]
    cells = []
    for xk, yk in pairs:
        trace = next((t for t in fig.data if (t.xaxis or "x") == "x" + xk[5:]), None)
        if trace is None or trace.z is None:
            continue
        z = np.asarray(trace.z)
        dom = layout[xk].domain or (0, 1)
        cells.append((dom[1] - dom[0], z.shape[1], z.shape[0]))
        layout[yk].update(scaleanchor="x" + xk[5:], scaleratio=1, constrain="domain")
    if not cells:
        return fig
    margin = (layout.margin.l or 80) + (layout.margin.r or 80)
    cell = min(80.0, min(share * (column - margin) / cols for share, cols, _ in cells))  # a map is small
    rows = max(r for _, _, r in cells)
    height = rows * cell / max(1e-6, min((layout[yk].domain or (0, 1))[1] - (layout[yk].domain or (0, 1))[0]
                                         for _, yk in pairs))
    fig.update_layout(width=int(column), height=int(height + (layout.margin.t or 80) + (layout.margin.b or 80)))
    return fig


def query_row(weights: torch.Tensor, tokens: list[str], query: int, head: str, column: float = COLUMN_PX
              ) -> go.Figure:
    """One query's attention weights (K,) in one head, as bars over the keys it may read (up to itself)."""
    labels = positions(tokens)[: query + 1]
    w = _as_np(weights)[: query + 1]  # (query + 1,)
    room = _label_room(labels, FONT_PX)
    text, lines, size = fit_title(f"{head}: the weights of query {query}, {tokens[query]}, over the keys "
                                  "(they sum to 1)", column - 60)
    fig = go.Figure(go.Bar(x=labels, y=w, marker_color="#08519c", name=head,
                           hovertemplate="key %{x}: weight %{y:.2f}<extra></extra>"))
    fig.update_layout(template=NO_TEMPLATE, font=FONT, showlegend=False, width=int(column),
                      height=int(150 + room + lines * LINE_PX), margin=dict(l=50, r=10, t=10 + lines * LINE_PX,
                                                                              b=room + 24),
                      title=dict(text=text, font=dict(size=size), x=0, xanchor="left", y=1, yref="container",
                                 yanchor="top", pad=dict(t=4)),
                      yaxis=dict(title=dict(text="weight", font=dict(size=FONT_PX)), range=[0, 1], fixedrange=True,
                                 tickfont=dict(size=FONT_PX)),
                      xaxis=dict(tickmode="array", tickvals=labels, tickangle=-90, tickfont=dict(size=FONT_PX),
                                 fixedrange=True, title=dict(text="key", font=dict(size=FONT_PX), standoff=4)),
                      meta=dict(font=FONT_PX))
    return fig
