"""What happens to each head's output in one forward pass: keep it, or replace it with a given vector.

A head's *output* is its slice of the output projection's input: the context vector `weights @ v`, before W_O
mixes the heads. Every intervention mha-viz offers is a choice per head between keeping that output and
replacing it:

    zero ablation   replace with 0
    mean ablation   replace with the head's mean output over reference texts (one vector, every position)
    patching        replace with the head's output in a run on another text (one vector per position)

`HeadEdit` is built for one forward call and handed to the model as an argument (the tiny model) or through a
ContextVar (transformers, see hf/ablation.py); it is never stored on a model, which every session shares. It is
applied at the head-combine step of every layer, so every later layer is recomputed from the edited outputs,
and it can record the outputs (for means, patching sources and direct effects) and add a zero "delta" leaf per
layer whose gradient is d(metric)/d(head output) (attribution patching).

Axis letters as in mha_viz.contract; dh = one head's width.
"""
from __future__ import annotations

import torch


class HeadEdit:
    """keep (B, L, H): 1 keeps a head's output, 0 replaces it with `replace` (B or 1, L, H, T or 1, dh), or with
    0 when `replace` is None. `capture` records each layer's edited outputs in `outputs`; `grad` adds a zero leaf
    to each layer's outputs and records it in `deltas`, so autograd gives d(metric)/d(output).

    Not frozen: `outputs` and `deltas` fill up during the one call this object is made for.
    """

    def __init__(self, keep: torch.Tensor | None = None, replace: torch.Tensor | None = None,
                 capture: bool = False, grad: bool = False):
        if replace is not None and keep is None:
            raise ValueError("replace needs a keep mask saying which heads take it (0 = replace)")
        if keep is not None and keep.ndim != 3:
            raise ValueError(f"keep must be (B, L, H); got {tuple(keep.shape)}")
        if replace is not None and (replace.ndim != 5 or replace.shape[1:3] != keep.shape[1:3]):
            raise ValueError(f"replace must be (B or 1, L, H, T or 1, dh) matching keep {tuple(keep.shape)}; "
                             f"got {tuple(replace.shape)}")
        self.keep, self.replace, self.capture, self.grad = keep, replace, capture, grad
        self.outputs: list[torch.Tensor] = []  # per layer (B, H, T, dh)
        self.deltas: list[torch.Tensor] = []  # per layer (B, H, T, dh), leaves with requires_grad

    def __call__(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """z (B, H, T, dh): one layer's head outputs -> the outputs the output projection should see."""
        if self.keep is not None:
            keep = self.keep[:, layer].to(z.dtype)[:, :, None, None]  # (B, H, 1, 1)
            z = z * keep  # (B, H, T, dh)
            if self.replace is not None:
                z = z + (1.0 - keep) * self.replace[:, layer].to(z.dtype)  # (B, H, T, dh)
        if self.grad:
            delta = torch.zeros_like(z, requires_grad=True)  # (B, H, T, dh)
            self.deltas.append(delta)
            z = z + delta  # (B, H, T, dh): same values, and now a gradient with respect to this layer's outputs
        if self.capture:
            self.outputs.append(z)
        return z

    def stacked(self) -> torch.Tensor:
        """The captured outputs of batch row 0 -> (L, H, T, dh), float32 on the CPU."""
        return torch.stack([z[0] for z in self.outputs]).detach().float().cpu()  # (L, H, T, dh)

