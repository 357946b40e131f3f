"""The Lesson's figures: panels of square cells laid out in a grid sized for a narrow window's column, so every
token is labelled at 1000x800 as at 1600x1000 (or the figure says which labels it left out); a row of heads'
patterns; the mechanism of two heads (their queries and keys, the scaled q·k scores with the causal mask, the
softmax); and the heads' outputs placed into the concatenation, projected and summed.

A figure is planned `COLUMN_PX` wide at most (the main column at 1000x800 with the sidebar open), and the page
draws it at that width (width="content"): a wider window leaves it as it is, so its cells stay square there too.
The head a step names is marked: its title bold with a ▶ and its panels outlined (`MARK`). Its panels' and
titles' `name` carry the head's name, so the page's hover hook can find it.
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

COLUMN_PX = 540  # the main column's width at 1000x800, sidebar open: what a Lesson figure is planned for
CELL_MAX = 14.0  # px: a cell no larger (a short input would draw huge squares)
LABEL_PX = 9.6  # px a token label needs at the smallest font (8 px, 1.2 line height)
GAP = 14  # px between panels
MARK = "#e6550d"  # the outline and title colour of the head the step names
TITLE_PX = 18  # a panel's title line


def positions(tokens: list[str]) -> list[str]:
    """Axis labels "3 the": each token with its position (the step's words name positions), unique."""
    return axis_labels([f"{i} {t}" for i, t in enumerate(tokens)])


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


def _cell(widest: int, rows: int, n_tokens: int) -> tuple[float, int]:
    """(cell px, label every k-th token): the largest square cell that fits `widest` cells across the column, and
    the step between labelled tokens (1 where every token fits)."""
    cell = min(CELL_MAX, (COLUMN_PX - 90 - GAP * 3) / max(widest, 1))
    return cell, max(1, math.ceil(LABEL_PX / cell)) if n_tokens > 1 else 1


def panel_grid(rows: list[list[Panel]], title: str = "") -> go.Figure:
    """Panels in rows, one square cell size for all, every token labelled where the column allows it. The
    figure's `layout.meta["labelled"]` says how many token labels each axis shows of how many (the caller says it
    under the figure when it is not all)."""
    n_tokens = max(len(p.y) for row in rows for p in row)
    widest = max(sum(p.z.shape[1] for p in row) for row in rows)
    cell, every = _cell(widest, len(rows), n_tokens)
    font = dict(size=9 if cell >= 11 and every == 1 else 8)
    shown = lambda labels: labels[::every]  # noqa: E731
    y_room = _label_room(shown(rows[0][0].y), font["size"])
    heights, tops = [], []
    for row in rows:
        x_room = max((_label_room(shown(p.x), font["size"]) for p in row if p.x), default=12)
        tops.append(TITLE_PX + x_room)
        heights.append(max(p.z.shape[0] for p in row) * cell)
    plot_w = widest * cell + GAP * (max(len(r) for r in rows) - 1)
    plot_h = sum(heights) + sum(tops) + GAP * (len(rows) - 1)
    top_margin = 22 if title else 4
    layout = dict(template=NO_TEMPLATE, font=FONT, showlegend=False, width=int(plot_w + y_room + 26),
                  height=int(plot_h + top_margin + 6), margin=dict(l=y_room + 20, r=6, t=top_margin, b=6),
                  annotations=[], shapes=[], meta=dict(labelled=len(shown(rows[0][0].y)), tokens=n_tokens))
    if title:
        layout["title"] = dict(text=html.escape(title, quote=False), font=dict(size=12), x=0, xanchor="left",
                               y=1, yref="container", yanchor="top", pad=dict(t=4))
    data, y_at, i = [], 0.0, 0
    for row, top, h in zip(rows, tops, heights):
        x_at = 0.0
        y_at += top
        for j, p in enumerate(row):
            w = p.z.shape[1] * cell
            xa, ya = ("x", "y") if i == 0 else (f"x{i + 1}", f"y{i + 1}")
            dom_x = [x_at / plot_w, (x_at + w) / plot_w]
            dom_y = [1 - (y_at + p.z.shape[0] * cell) / plot_h, 1 - y_at / plot_h]
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
            name = html.escape(p.title, quote=False)
            layout["annotations"].append(dict(
                text=f"<b>▶ {name}</b>" if p.marked else name, x=(dom_x[0] + dom_x[1]) / 2, y=1 - (y_at - top) / plot_h,
                xref="paper", yref="paper", yanchor="top", showarrow=False, name=p.name or p.title,
                font=dict(size=11, color=MARK if p.marked else "#222")))
            if p.marked:
                layout["shapes"].append(dict(type="rect", xref="paper", yref="paper", x0=dom_x[0], x1=dom_x[1],
                                             y0=dom_y[0], y1=dom_y[1], line=dict(color=MARK, width=3),
                                             name=p.name))
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
               marked: list[bool], names: list[str]) -> go.Figure:
    """(N, Q, K) patterns, as many heads a row as the column holds at a readable cell, the named head marked."""
    z_all = _as_np(patterns)  # (N, Q, K)
    labels = positions(tokens)
    n, t = z_all.shape[0], z_all.shape[-1]
    per_row = max(1, min(n, int((COLUMN_PX - 90) // (t * 10 + GAP))))  # heads a row at 10 px a cell or more
    panels = [Panel(z_all[i], titles[i] + (" (off)" if off[i] else ""), labels, labels,
                    OFF_SCALE if off[i] else sqrt_scale(ATTN_SCALE), 0.0, 1.0, "weight", marked[i], names[i])
              for i in range(n)]
    return panel_grid([panels[i:i + per_row] for i in range(0, n, per_row)])


def _bound(*tensors: torch.Tensor) -> float:
    finite = [float(t[torch.isfinite(t)].abs().max()) for t in tensors if torch.isfinite(t).any()]
    return max(finite + [1e-6])


def mechanism_figure(tokens: list[str], heads: list[dict]) -> go.Figure:
    """Two (or more) heads of one layer on the same tokens, one head a block of two rows: its queries and keys
    (tokens x the head's dimensions, one red-blue scale for both), then its scores q·k as the model scales them
    (grey where the causal mask forbids the key) and their softmax, the attention pattern. Each entry of `heads`:
    name, q (T, dh), k (T, dh), scores (Q, K) with -inf where masked, weights (Q, K), marked."""
    labels = positions(tokens)
    rows = []
    for h in heads:
        qk = _bound(h["q"], h["k"])
        scores = h["scores"].clone()  # (Q, K), -inf where masked
        masked = ~torch.isfinite(scores)  # (Q, K)
        s = _bound(scores)
        shown = scores.masked_fill(masked, float("nan"))  # NaN: drawn as the grey background, the mask
        mark = dict(marked=h["marked"], name=h["name"])
        rows.append([Panel(_as_np(h["q"]), f"{h['name']}: queries Q", labels, None, DIFF_SCALE, -qk, qk,
                           "value", **mark),
                     Panel(_as_np(h["k"]), f"{h['name']}: keys K", labels, None, DIFF_SCALE, -qk, qk, "value",
                           **mark)])
        rows.append([Panel(_as_np(shown), f"{h['name']}: q·k scaled", labels, labels, DIFF_SCALE, -s, s,
                           "score", mask=masked.numpy(), **mark),
                     Panel(_as_np(h["weights"]), f"{h['name']}: softmax", labels, labels, ATTN_SCALE,
                           0.0, 1.0, "weight", **mark)])
    return panel_grid(rows)


def concat_figure(names: list[str], outputs: torch.Tensor, contributions: torch.Tensor, bias: torch.Tensor | None,
                  off: list[bool], marked: int | None, bound_z: float, bound_c: float, title: str) -> go.Figure:
    """One token through the combination: the heads' outputs (H, dh) placed side by side as the concatenation
    (one strip, H x dh wide), each head's part projected by its slice of the output projection into its
    contribution (H, D), then the bias and their sum, the layer's output. `bound_z`, `bound_c`: the colour
    ranges, fixed by the caller so the picture with a head off is read on the same scale as with every head on."""
    out, con = _as_np(outputs), _as_np(contributions)  # (H, dh), (H, D)
    n_heads, dh = out.shape
    d = con.shape[1]
    b = np.zeros(d, dtype=np.float32) if bias is None else _as_np(bias)
    total = con.sum(0) + b  # (D,)
    cell = min(CELL_MAX, (COLUMN_PX - 130) / max(d, n_heads * dh))
    row_h = 18  # px a row of the projected picture: its label's line
    rows_c = [f"{'▶ ' if marked == h else ''}{names[h]}{' (off)' if off[h] else ''}" for h in range(n_heads)]
    y_c = rows_c + ["bias", "sum = output"]
    z_c = np.vstack([con, b[None], total[None]])  # (H + 2, D)
    plot_w, h_top, h_bot = max(d, n_heads * dh) * cell, row_h, len(y_c) * row_h
    gap, head = 46, 40
    plot_h = h_top + gap + h_bot
    domain_top = [1 - h_top / plot_h, 1.0]
    domain_bot = [0.0, h_bot / plot_h]
    data = [dict(type="heatmap", z=out.reshape(1, -1), y=["concatenation"], x=list(range(n_heads * dh)),
                 customdata=np.repeat(np.array(names)[:, None], dh, 1).reshape(1, -1),
                 zmin=-bound_z, zmax=bound_z, colorscale=DIFF_SCALE, showscale=False, name="concatenation",
                 hovertemplate="%{customdata}, dim %{x}: %{z:+.3f}<extra>concatenation</extra>"),
            dict(type="heatmap", z=z_c, y=y_c, x=list(range(d)), xaxis="x2", yaxis="y2", zmin=-bound_c,
                 zmax=bound_c, colorscale=DIFF_SCALE, showscale=False, name="projected",
                 hovertemplate="%{y}<br>dim %{x}: %{z:+.3f}<extra></extra>")]
    shapes = [dict(type="line", xref="x", yref="paper", x0=h * dh - 0.5, x1=h * dh - 0.5, y0=domain_top[0],
                   y1=domain_top[1], line=dict(color="#222", width=2)) for h in range(1, n_heads)]
    shapes.append(dict(type="line", xref="x2", yref="y2", x0=-0.5, x1=d - 0.5, y0=n_heads + 0.5, y1=n_heads + 0.5,
                       line=dict(color="#222", width=2)))  # the sum under its parts
    annotations = [dict(text=f"<b>▶ {names[h]}</b>" if marked == h else names[h], x=h * dh + (dh - 1) / 2,
                        xref="x", y=domain_top[1], yref="paper", yanchor="bottom", showarrow=False,
                        name=names[h], font=dict(size=10, color=MARK if marked == h else "#222"))
                   for h in range(n_heads)]
    annotations.append(dict(text="each head's part × its slice of the output projection ↓ (then add them up)",
                            x=0, xref="paper", xanchor="left", y=(domain_top[0] + domain_bot[1]) / 2, yref="paper",
                            showarrow=False, font=dict(size=10, color="#555")))
    if marked is not None:
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=marked * dh - 0.5, x1=(marked + 1) * dh - 0.5,
                           y0=domain_top[0], y1=domain_top[1], line=dict(color=MARK, width=3)))
        shapes.append(dict(type="rect", xref="x2", yref="y2", x0=-0.5, x1=d - 0.5, y0=marked - 0.5,
                           y1=marked + 0.5, line=dict(color=MARK, width=3)))
    layout = dict(template=NO_TEMPLATE, font=FONT, showlegend=False, width=int(plot_w + 130),
                  height=int(plot_h + head + 50), margin=dict(l=110, r=10, t=head, b=50),  # b: the dims axis
                  title=dict(text=html.escape(title, quote=False), font=dict(size=12), x=0, xanchor="left",
                             y=1, yref="container", yanchor="top", pad=dict(t=4)),
                  xaxis=dict(domain=[0, n_heads * dh * cell / plot_w], anchor="y", showticklabels=False,
                             fixedrange=True, showgrid=False),
                  yaxis=dict(domain=domain_top, anchor="x", fixedrange=True, showgrid=False),
                  xaxis2=dict(domain=[0, d * cell / plot_w], anchor="y2", fixedrange=True, showgrid=False,
                              title=dict(text=f"the layer's {d} output dimensions", font=dict(size=10))),
                  yaxis2=dict(domain=domain_bot, anchor="x2", autorange="reversed", fixedrange=True,
                              showgrid=False, tickmode="array", tickvals=y_c),
                  shapes=shapes, annotations=annotations)
    return go.Figure(data=data, layout=layout, _validate=False)
