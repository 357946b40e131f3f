"""What a run records: the recorders of one forward call, filled at the named points an architecture calls
(models/points.py, `HeadEdit`).

    capture  every layer's (edited) head outputs, in `outputs`       grad     a zero leaf per layer, in `deltas`
    inspect  the layers whose q, k, v, weights are kept, in `seen`   values   every layer's values, in `values`
    inputs   the residual stream entering each layer, in `inputs`    final    the final norm's (input, output)
    states   each block's output, in `states` (what a later run resumes from, models/schedule.py)
    patterns every layer's attention weights, in `patterns` (what `run` shows; kept for a later run to reuse),
             each also handed to `on_pattern` as it is computed, where one is set

Nothing here changes a number of the forward: a recorder only keeps what it is handed (the gradient leaf adds
zero). Axis letters as in mha_viz.contract; dh = one head's width, H_kv = key/value heads (grouped-query attention).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import torch


@dataclass(frozen=True)
class Attended:
    """What one layer's attention computed with, for one forward (batch row 0 is the one shown).

    q (B, H, Q, dh) and k (B, H_kv, K, dh) as they enter the dot product (after rotary embeddings where the model
    uses them), v (B, H_kv, K, dh), weights (B, H, Q, K), allowed (Q, K) bool or None (where a query may look),
    scale: what q . k^T is multiplied by; query_scale (Q,) or None: a further factor per query
    (length-scaled attention, `mha_viz.models.attention.length_scale`); score_bias (B or 1, H, Q or 1, K) or None:
    what the model adds to the scaled scores before the mask and softmax (ALiBi's per-head position bias)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    weights: torch.Tensor
    allowed: torch.Tensor | None
    scale: float
    query_scale: torch.Tensor | None = None
    score_bias: torch.Tensor | None = None


class Records:
    """The recorders of one call (see the module docstring); a part of `HeadEdit`. Not frozen: the records fill up
    during the one call this object is made for."""

    def __init__(self, capture: bool = False, grad: bool = False, inspect: Iterable[int] = (),
                 values: bool = False, inputs: bool = False, final: bool = False, states: bool = False,
                 patterns: bool = False):
        self.capture, self.grad = capture, grad
        self.inspect, self.want_values, self.want_inputs, self.want_final = frozenset(inspect), values, inputs, final
        self.want_states, self.want_patterns = states, patterns
        # Called with (layer, weights (B, H, Q, K)) as each layer's attention is computed, where patterns are kept:
        # a run hands each layer on as soon as it is known (`run(..., on_layer=...)`).
        self.on_pattern: Callable[[int, torch.Tensor], None] | None = None
        self.states: dict[int, object] = {}  # layer -> that block's output, as the block returned it
        self.patterns: dict[int, torch.Tensor] = {}  # layer -> its attention weights (B, H, Q, K)
        self.outputs: list[torch.Tensor] = []  # per layer (B, H, T, dh)
        self.deltas: list[torch.Tensor] = []  # per layer (B, H, T, dh), leaves with requires_grad
        self.seen: dict[int, Attended] = {}
        self.values: dict[int, torch.Tensor] = {}  # layer -> (B, H_kv, K, dh)
        self.inputs: dict[int, torch.Tensor] = {}  # layer -> (B, T, D)
        self.final_io: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, T, D) in, (B, T, D) out
        self.final_out: torch.Tensor | None = None  # (B, T, D) the final norm's output

    def recorded(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """z (B, H, T, dh): one layer's head outputs after the edit -> the same values, with a gradient leaf added
        where `grad` asks and kept where `capture` asks."""
        if self.grad:
            delta = torch.zeros_like(z, requires_grad=True)  # (B, H, T, dh)
            self.deltas.append(delta)
            z = z + delta  # (B, H, T, dh): same values, and now a gradient with respect to this layer's outputs
        if self.capture:
            self.outputs.append(z)
        return z

    def wants(self, layer: int) -> bool:
        """Whether `attended` keeps anything of this layer (so an adapter can skip converting a mask)."""
        return layer in self.inspect or self.want_values or self.want_patterns

    def attended(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, weights: torch.Tensor,
                 allowed: torch.Tensor | Callable[[], torch.Tensor | None] | None, scale: float,
                 query_scale: torch.Tensor | None = None, score_bias: torch.Tensor | None = None) -> None:
        """Called by every layer's attention with what it computed (see `Attended`); keeps what was asked.
        `allowed` may be a function, called only when this layer is inspected."""
        if self.want_values:
            self.values[layer] = v
        if self.want_patterns:
            self.patterns[layer] = weights
            if self.on_pattern is not None:
                self.on_pattern(layer, weights)
        if layer in self.inspect:
            if callable(allowed):
                allowed = allowed()
            self.seen[layer] = Attended(q=q, k=k, v=v, weights=weights, allowed=allowed, scale=float(scale),
                                        query_scale=query_scale, score_bias=score_bias)

    def entering(self, layer: int, x: torch.Tensor) -> None:
        """x (B, T, D): the residual stream entering `layer` (the block's input)."""
        if self.want_inputs:
            self.inputs[layer] = x

    def block_done(self, layer: int, out) -> None:
        """A block's output (B, T, D), or the block's own return value, for a later run to resume from."""
        if self.want_states:
            self.states[layer] = out

    def finished(self, residual: torch.Tensor, normed: torch.Tensor) -> None:
        """The final norm's input (B, T, D) and output (B, T, D), for direct effects; the output is kept in
        `final_out` in any case (an adapter may read its final hidden states there)."""
        self.final_out = normed
        if self.want_final:
            self.final_io = (residual, normed)

    def stacked(self) -> torch.Tensor:
        """The captured outputs of batch row 0 -> (L, H, T, dh), float32 on the CPU."""
        return torch.stack([z[0] for z in self.outputs]).detach().float().cpu()  # (L, H, T, dh)
