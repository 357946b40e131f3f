"""The named points an architecture's forward calls, and what the forward hands back: the whole interface between
an adapter's one forward pass and the engine (models/interventions.py).

A forward calls, on the `HeadEdit` made for that call (never stored on the shared model):

    edit.skips(l), edit.resumed(B)      whether block l runs; the state to continue from     (schedule.py)
    edit.grown(l, x)                    x (B, T, D) entering block l -> with a growing batch's new rows
    edit.entering(l, x)                 the residual stream entering block l                  (records.py)
    edit.attended(l, q, k, v, w, ...)   what layer l's attention computed with
    edit(l, z) -> z                     z (B, H, T, dh), the head outputs before W_O: changed (edits.py), then
                                        recorded; the forward ends here when the call needs nothing later
    edit.block_done(l, out)             block l's output
    edit.finished(resid, normed)        the final norm's input and output

as TransformerLens names `hook_resid_pre`, `hook_pattern`, `hook_z`, ... but with one per-call object instead of
hooks registered on the model (nnsight's per-call graphs): one loaded model serves every session at once.
The in-repo stacks share one loop that calls them (models/attention.run_stack); transformers models call them from
a registered attention function and block wrappers (models/hf/ablation.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from mha_viz.models.edits import Change
from mha_viz.models.records import Records
from mha_viz.models.schedule import Schedule


class HeadEdit(Change, Records, Schedule):
    """One forward call's edit: what it changes (`Change`: keep, replace), what it records (`Records`: capture,
    grad, inspect, values, inputs, final, states, patterns) and how it is scheduled (`Schedule`: start and prefix,
    rows and bases, past, logits_at, stop_after). Each argument is documented where its concern lives."""

    def __init__(self, keep: torch.Tensor | None = None, replace: torch.Tensor | None = None,
                 capture: bool = False, grad: bool = False, inspect: Iterable[int] = (), values: bool = False,
                 inputs: bool = False, final: bool = False, states: bool = False, patterns: bool = False,
                 start: int = 0,
                 prefix=None, logits_at: list[int] | None = None, stop_after: int | None = None,
                 rows: Sequence[int] | None = None, bases: Sequence | None = None,
                 past: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None):
        Change.__init__(self, keep, replace)
        Records.__init__(self, capture, grad, inspect, values, inputs, final, states, patterns)
        Schedule.__init__(self, start, prefix, logits_at, stop_after, rows, bases, past,
                          batch=None if keep is None else keep.shape[0])

    @classmethod
    def keeping(cls, head_keep: torch.Tensor) -> "HeadEdit":
        """The edit that only switches heads off: head_keep (B, L, H), 1 = on, 0 = output set to 0."""
        return cls(keep=head_keep)

    def __call__(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """z (B, H, T, dh): one layer's head outputs -> the outputs the output projection should see."""
        z = self.changed(layer, z, self.offset)  # (B, H, T, dh)
        z = self.recorded(layer, z)  # (B, H, T, dh), the same values
        self.stop(layer)  # this layer's head outputs may be all the call needed: skip W_O onwards
        return z


@dataclass(frozen=True)
class Forward:
    hidden: torch.Tensor  # (B, T, D) final hidden states (after the final norm where the model has one)
    logits: torch.Tensor | None  # (B, T, V)
    attentions: torch.Tensor | None  # (B, L, H, Q, K), when asked for


@dataclass(frozen=True)
class FinalParts:
    """The final norm (its gain, bias and whether it centres: LayerNorm yes, RMSNorm no) and the LM head."""

    gain: torch.Tensor  # (D,)
    bias: torch.Tensor | None  # (D,)
    centered: bool
    unembed: torch.Tensor  # (V, D)
    unembed_bias: torch.Tensor | None  # (V,)
