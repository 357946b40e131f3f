"""Lesson step 4: the heads' outputs are combined. Each head's output is placed into the concatenation, projected by
its slice of the output projection, and the layer's output is their sum and the bias."""
from __future__ import annotations

import streamlit as st
import torch

from mha_viz import plotting
from mha_viz.analysis import combine_heads, next_token_kl
from mha_viz.app.cache import side_model, side_result
from mha_viz.app.common import head_name
from mha_viz.app.lesson.frame import (
    Question,
    column_px,
    figure_config,
    look,
    named,
    saw,
    show,
    try_switch,
)
from mha_viz.app.lesson.readings import (
    lesson_inside,
    lesson_run,
    tok,
)
from mha_viz.contract import Head
from mha_viz.plotting import lesson as lesson_figures

LENGTH_CHOICES = ("It gets shorter", "It stays about the same", "It gets longer")


def _combined(name: str, text: str, off: frozenset[Head] = frozenset()):
    """(layer, position, the heads' combination for the last token) in the middle layer, with `off` zeroed."""
    model, run = side_model(name), lesson_run(name, text)
    layer = model.n_layers // 2  # a middle layer: it reads the first layer's output and feeds the last
    position = len(run.tokens) - 1
    inside = lesson_inside(name, text, layer, off)
    contributions = torch.stack([h.contribution[position] for h in inside])  # (H, D)
    return layer, position, combine_heads(contributions, inside[0].bias)


def _parts(name: str, text: str, layer: int, position: int, off: frozenset[Head]):
    """(the heads' outputs (H, dh), their contributions (H, D), the bias (D,) or None) for one token: a head
    switched off outputs 0, as the model's zero ablation does before the output projection."""
    inside = lesson_inside(name, text, layer, off)
    outputs = torch.stack([torch.zeros_like(h.v[0]) if (layer, h.head) in off else h.weights[position] @ h.v
                           for h in inside])  # (H, dh)
    return outputs, torch.stack([h.contribution[position] for h in inside]), inside[0].bias  # (H, D)


def slices(name: str, text: str, layer: int) -> torch.Tensor | None:
    """(H, dh, D): each head's slice of layer `layer`'s output projection W_O, the model's own weights (read off
    `Model.readout`); None where the model does not hand them over."""
    def make():
        readout = side_model(name).readout(text)
        return None if readout is None else readout.w_o[layer]
    return side_result(("lesson-wo", layer), name, make)


def _largest(contributions: torch.Tensor, bias: torch.Tensor | None) -> float:
    """The largest size of any number in the projected rows: the contributions (H, D), the bias and their sum."""
    bias = torch.zeros_like(contributions[0]) if bias is None else bias  # (D,)
    return float(torch.cat([contributions, bias[None], (contributions.sum(0) + bias)[None]]).abs().max())


def _biggest(name: str, text: str) -> Head:
    layer, _, combo = _combined(name, text)
    return layer, int(combo.along.argmax())


def question_combining(name: str, text: str) -> Question:
    layer, position, combo = _combined(name, text)
    biggest = _biggest(name, text)
    _, _, after = _combined(name, text, frozenset({biggest}))
    ratio = after.total_norm / combo.total_norm if combo.total_norm > 0 else 1.0
    answer = LENGTH_CHOICES[0] if ratio < 0.9 else LENGTH_CHOICES[2] if ratio > 1.1 else LENGTH_CHOICES[1]
    why = (f"The layer's output for this token had length {combo.total_norm:.2f}; with {head_name(biggest)} off it "
           f"is {after.total_norm:.2f}. The output is the sum of the heads' contributions and a bias: take one away "
           f"and the sum is what is left ({head_name(biggest)} had added {float(combo.along[biggest[1]]):.2f} along "
           "the total; other heads may point partly against it).")
    return Question(f"{head_name(biggest)} adds the most to what layer {layer} writes for the last token, "
                    f"{tok(lesson_run(name, text).tokens[position])}. Switch it off: what happens to the length of "
                    "the layer's output for that token?", LENGTH_CHOICES, answer, why)


def draw_combining(name: str, text: str, n: int) -> None:
    model, run = side_model(name), lesson_run(name, text)
    layer, position, combo = _combined(name, text)
    biggest = _biggest(name, text)
    _, _, without = _combined(name, text, frozenset({biggest}))
    switch = try_switch(f"switch {head_name(biggest)} off", f"lesson_try_{n}",
                  "Its contribution becomes 0; the layer's output is the sum of what is left.",
                  expect=f"its bars drop to 0 and the total bar changes from {combo.total_norm:.2f} to "
                         f"{without.total_norm:.2f}, on the same axis.")
    names = [head_name((layer, h)) for h in range(model.n_heads)]
    off = frozenset({biggest}) if switch else frozenset()
    shown = without if switch else combo
    fig = plotting.heads_combine_figure(names, shown.norms, shown.along, [(layer, h) in off for h in
                                                                         range(model.n_heads)],
                                        shown.bias_along, shown.total_norm,
                                        f"Layer {layer}, token {position}: the heads add up"
                                        + (f", {head_name(biggest)} off" if switch else ""))
    # One y axis for both states, so a switched-off head shows as a shorter total, not as a rescaled axis.
    values = [float(v) for c in (combo, without) for v in (*c.norms, *c.along, c.bias_along, c.total_norm)]
    pad = 0.08 * (max(values) - min(0.0, min(values)))
    fig.update_yaxes(range=[min(0.0, min(values)) - pad, max(values) + pad], title="length")
    fig.data[0].name, fig.data[1].name = "size of each contribution", "its share along the total"
    parts = {state: _parts(name, text, layer, position, frozenset({biggest}) if state else frozenset())
             for state in (False, True)}
    bound_z = max(float(z.abs().max()) for z, _, _ in parts.values())
    bound_c = max(_largest(c, b) for _, c, b in parts.values())
    z, c, b = parts[switch]
    w_o = slices(name, text, layer)
    st.caption(f"Token {position}, {tok(run.tokens[position])}, through layer {layer}'s combination (red +, blue −; "
               "one colour range each, the same with and without the head off). Top: z, the **concatenation**: each "
               f"head's output for this token (its weighted sum of values, {z.shape[1]} numbers) stood one under "
               f"another, {z.shape[0] * z.shape[1]} numbers; beside it W_O, the **output projection**, "
               f"{z.shape[0] * z.shape[1]} rows by the model's {c.shape[1]} dimensions: each head's {z.shape[1]} "
               "rows are its slice. Below: each head's part of z times its slice, its **contribution** "
               f"({c.shape[1]} numbers); the bias; and their sum, what the layer adds to the token's vector.")
    if w_o is None:
        st.caption("This model does not hand over its output projection, so the step draws no W_O.")
    else:
        bound_w = float(w_o.abs().max())
        show(lesson_figures.concat_figure(names, z, w_o, c, b, [(layer, h) in off for h in range(model.n_heads)],
                                          biggest[1], (bound_z, bound_w, bound_c),
                                          f"Layer {layer}, token {position}: concatenate, project, add"
                                          + (f" ({head_name(biggest)} off)" if switch else ""), column_px()),
             f"lesson_concat_{n}")
    st.plotly_chart(fig, width="stretch", key=f"lesson_fig_{n}", config=figure_config())
    look(f"{named(biggest)} (▶, outlined): its part of the concatenation, its contribution, and its dark bar, its "
         f"share of what layer {layer} writes for the last token, {tok(run.tokens[position])}. The bars add up, with "
         "the bias, to the total.", html=True)
    summed = float(shown.along.sum()) + shown.bias_along
    lines = [f"The heads' shares along the total, plus the bias, sum to {summed:.3f}; the total's length is "
             f"{shown.total_norm:.3f}: the layer's output is the heads' outputs added."
             + (f" ({head_name(biggest)} is off.)" if switch else ""),
             f"{head_name(biggest)} adds the most along the total with every head on: "
             f"{float(combo.along[biggest[1]]):.3f}."]
    if switch:
        cos = float(torch.nn.functional.cosine_similarity(shown.total, combo.total, dim=0))
        lines.append(f"With {head_name(biggest)} off, the layer's output for this token has length "
                     f"{shown.total_norm:.3f} (it was {combo.total_norm:.3f}) and cosine {cos:.2f} with the output "
                     "before.")
        if run.logits is not None:
            kl = next_token_kl(run.logits, lesson_run(name, text, off).logits)
            lines.append(f"The model's next-token prediction moved by KL {kl:.3f} nats.")
    saw(lines)
