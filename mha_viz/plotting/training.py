"""Heads forming during training: the loss and every head's scores against the step, and circuit scores
(composition, OV copying) against the step, for one model or several seeds.
"""
from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from mha_viz.names import head_name
from mha_viz.plotting.colours import head_colour
from mha_viz.plotting.layout import FONT, NO_TEMPLATE, _as_np


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
    layout = dict(template=NO_TEMPLATE, height=height, font=FONT, showlegend=True, hovermode="closest",
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
                name = head_name((l, hd))
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
    layout = dict(template=NO_TEMPLATE, height=height, font=FONT, hovermode="closest", showlegend=True,
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
                    name = head_name((layer, head))
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
        return f"{head_name(f.previous_head)} → {head_name(f.induction_head)}"

    def head(f) -> str:
        return head_name(f.induction_head)

    pairs = {f"{f.name}: K-composition {pair(f)}": on_steps(f, f.composition["k"]) for f in formations}
    copying = {f"{f.name}: {head(f)} copying": on_steps(f, f.copying) for f in formations}
    pattern = {f"{f.name}: {head(f)} induction score": on_steps(f, f.induction) for f in formations}
    return circuits_timeline_figure(steps, pairs, formations[0].baseline["k"].mean, copying, pattern, current,
                                    height=height)
