"""A Tracr-compiled model behind the contract: its program's items (whitespace-separated vocabulary items, BOS
first: `models.items`, shared with the learned twins) and one forward through the shared loop; everything else
(switching heads off, patching, inside a head, the census) is the engine's. No jax: the folder holds torch weights
(`config.py`).

Its readout is the program's decoded output per position (`program_output`), not next-token predictions: a compiled
model has no language-model head, so `run.logits` is None and the views that read predictions say so.
"""
from __future__ import annotations

from pathlib import Path

import torch

from mha_viz.contract import Embeddings, HeadWeights, ModelInfo, check_index
from mha_viz.models.compiled import config as C
from mha_viz.models.compiled.architecture import CompiledStack, build, decode
from mha_viz.models.interventions import Forward, HeadEdit
from mha_viz.models.items import ItemsModel, ItemText
from mha_viz.models.placement import module_device, place


class CompiledModel(ItemsModel):
    """A compiled program's transformer. Read-only after construction, so one instance serves every session."""

    def __init__(self, config: C.CompiledConfig, tensors: dict[str, torch.Tensor], name: str | None = None,
                 folder: str | Path | None = None):
        self.config = config
        self.tensors = tensors
        # On MHA_VIZ_DEVICE, always float32: the program's weights are exact values (large scores, one-hot
        # embeddings) that bfloat16 would round, changing what the program computes.
        self.stack: CompiledStack = place(build(config, tensors), float32=True)
        self._device = module_device(self.stack)
        self.blocks = self.stack.blocks
        self.folder = None if folder is None else Path(folder)
        self.items = ItemText(config.name, tuple(config.vocab), config.encoding, config.bos, config.max_seq_len,
                              f"was compiled for (max_seq_len {config.max_seq_len})",
                              f"the vocabulary {config.name} was compiled for")
        self.info = ModelInfo(
            name=name or config.name, title=f"{config.name} (compiled from a RASP program by Tracr)",
            kind="program", n_layers=config.n_layers, n_heads=config.n_heads, max_tokens=config.max_seq_len + 1,
            causal=config.causal)

    # -- one forward ----------------------------------------------------------------------------------------
    pads = True  # no position's output depends on padding to its right when causal; encoders get a key mask
    can_resume = True  # CompiledStack runs the shared loop (models/attention.run_stack), which resumes at edit.start

    def forward(self, ids: torch.Tensor, edit: HeadEdit, attentions: bool = False, lengths=None) -> Forward:
        ids, keys = self.batch(ids, lengths)  # (B, T), (B, T) or None
        x, _, att = self.stack(ids, edit, patterns=attentions, keys=keys)
        return Forward(hidden=x, logits=None, attentions=att)

    def head_weights(self, layer: int) -> HeadWeights:
        attn = self.stack.blocks[check_index(layer, self.n_layers, "layer")].attn
        return self.head_weights_from(layer, attn.query.weight, attn.key.weight, attn.value.weight,
                                      attn.query.bias, attn.key.bias, attn.value.bias, rotary=False)

    def embeddings(self) -> Embeddings:
        return Embeddings(tokens=self.stack.tok.weight.detach().float().cpu(),
                          positions=self.stack.pos.weight.detach().float().cpu(), unembed=None,
                          labels=list(self.items.labels))

    # -- what a program has that a learned model has not ----------------------------------------------------------
    def program_output(self, run) -> list:
        """The program's decoded output at each position of a run (BOS first reads as BOS), from the run's final
        residual stream: what the compiled model computes, with whatever heads the run switched off."""
        return decode(self.config, run.output.float().cpu() @ self.stack.unembed.cpu())

    def written_heads(self) -> dict:
        """(layer, head) -> the `WrittenHead` its program wrote; a head no Select wrote is absent (Tracr pads a
        layer with fewer heads with zero heads)."""
        return {(w.layer, w.head): w for w in self.config.heads}


def load_compiled(folder, name: str | None = None) -> CompiledModel:
    """A compiled model folder (`config.save`), with torch alone."""
    config, tensors = C.load(folder)
    return CompiledModel(config, tensors, name=name or str(folder), folder=folder)
