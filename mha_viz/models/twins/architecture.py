"""A learned twin's network: the tiny model's stack (`TinyLM`: embeddings, pre-LN blocks of
`MultiHeadSelfAttention`, a final LayerNorm) with its LM head replaced by a readout of the program's output values
at every position. Nothing else differs, so every view and intervention that works on tiny works on a twin.

Axis letters: B = batch, T = token position, D = d_model, O = the program's output values.
"""
from __future__ import annotations

import torch
from torch import nn

from mha_viz.models.tiny.architecture import TinyConfig, TinyLM


class TwinLM(TinyLM):
    """TinyLM whose head maps each position's final hidden state to scores over the program's O output values:
    forward(ids (B, T), ...) -> (readout scores (B, T, O), hidden (B, T, D), attentions (B, L, H, T, T)), the same
    signature as TinyLM's, so the shared forward loop and its edits apply unchanged."""

    def __init__(self, cfg: TinyConfig, n_outputs: int):
        super().__init__(cfg)
        if n_outputs < 1:
            raise ValueError(f"a twin needs at least one output value to read out; got {n_outputs}")
        self.n_outputs = n_outputs
        self.head = nn.Linear(cfg.d_model, n_outputs, bias=False)  # (O, D): the per-position readout
        self._init(self.head)


def build_twin(cfg: TinyConfig, n_outputs: int) -> TwinLM:
    """The twin at its seeded initialisation (cfg.seed), without disturbing the caller's global RNG state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return TwinLM(cfg, n_outputs)
