"""A Tracr-compiled model behind the contract: its tokenizer (whitespace-separated vocabulary items, BOS first) and
one forward through the shared loop; everything else (switching heads off, patching, inside a head, the census) is
the engine's. No jax: the folder holds torch weights (`config.py`).

Its readout is the program's decoded output per position (`program_output`), not next-token predictions: a compiled
model has no language-model head, so `run.logits` is None and the views that read predictions say so.
"""
from __future__ import annotations

import random
from pathlib import Path

import torch

from mha_viz.contract import Embeddings, HeadWeights, InputError, Lexicon, ModelInfo, check_index
from mha_viz.models.compiled import config as C
from mha_viz.models.compiled.architecture import CompiledStack, build, decode
from mha_viz.models.interventions import EditableModel, Encoded, Forward, HeadEdit
from mha_viz.models.placement import module_device, place
from mha_viz.models.special import added_positions

N_EXAMPLES = 4


class CompiledModel(EditableModel):
    """A compiled program's transformer. Read-only after construction, so one instance serves every session."""

    def __init__(self, config: C.CompiledConfig, tensors: dict[str, torch.Tensor], name: str | None = None,
                 folder: str | Path | None = None):
        self.config = config
        self.tensors = tensors
        # On MHA_VIZ_DEVICE, always float32: the program's weights are exact values (large scores, one-hot
        # embeddings) that bfloat16 would round, changing what the program computes.
        self.stack: CompiledStack = place(build(config, tensors), float32=True)
        self._device = module_device(self.stack)
        self.folder = None if folder is None else Path(folder)
        self._decode_ids = {i: t for t, i in config.encoding.items()}
        self.info = ModelInfo(
            name=name or config.name, title=f"{config.name} (compiled from a RASP program by Tracr)",
            kind="program", n_layers=config.n_layers, n_heads=config.n_heads, max_tokens=config.max_seq_len + 1,
            causal=config.causal)

    # -- tokenising -------------------------------------------------------------------------------------------
    def encoding(self, text: str) -> Encoded:
        items = text.split()
        unknown = sorted({t for t in items if t not in self.config.vocab}, key=items.index)
        if unknown or not items:
            raise InputError(f"{self.config.name} reads whitespace-separated items of its vocabulary "
                             f"({' '.join(self.config.vocab)}), at most {self.config.max_seq_len} of them; "
                             + (f"not in it: {', '.join(repr(u) for u in unknown[:5])}" if unknown
                                else "the text has none"))
        if len(items) > self.config.max_seq_len:
            raise InputError(f"{len(items)} items is more than {self.config.name} was compiled for "
                             f"(max_seq_len {self.config.max_seq_len}); shorten the text to at most "
                             f"{self.config.max_seq_len} items of: {' '.join(self.config.vocab)}")
        ids = [self.config.encoding[self.config.bos]] + [self.config.encoding[t] for t in items]
        return Encoded(ids=ids, labels=[self.config.bos] + items, dropped=0,
                       special=added_positions([1] + [0] * len(items)), unknown=())

    def decode(self, token_id: int) -> str:
        return self._decode_ids[int(token_id)]

    def token_id(self, piece: str) -> int:
        piece = piece.strip()
        if piece not in self.config.vocab:
            raise InputError(f"{piece!r} is not in {self.config.name}'s vocabulary: {' '.join(self.config.vocab)}")
        return self.config.encoding[piece]

    # -- one forward ----------------------------------------------------------------------------------------
    pads = True  # no position's output depends on padding to its right when causal; encoders get a key mask
    can_resume = True  # CompiledStack runs the shared loop (models/attention.run_stack), which resumes at edit.start

    def forward(self, ids: torch.Tensor, edit: HeadEdit, attentions: bool = False, lengths=None) -> Forward:
        keys = None
        ids = ids.to(self._device)  # (B, T)
        if lengths is not None and not self.config.causal:
            keys = (torch.arange(ids.shape[1])[None, :] < torch.as_tensor(list(lengths))[:, None]).to(
                self._device)  # (B, T)
        if lengths is not None:  # padding: any id of the vocabulary (its rows are discarded)
            ids = ids.clamp(0, len(self.config.encoding) - 1)  # (B, T)
        x, _, att = self.stack(ids, edit, patterns=attentions, keys=keys)
        return Forward(hidden=x, logits=None, attentions=att)

    def output_projection(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.stack.blocks[layer].attn.out
        return out.weight.detach().float().cpu(), out.bias.detach().float().cpu()  # (D, H * k), (D,)

    def head_weights(self, layer: int) -> HeadWeights:
        attn = self.stack.blocks[check_index(layer, self.n_layers, "layer")].attn
        return self.head_weights_from(layer, attn.query.weight, attn.key.weight, attn.value.weight,
                                      attn.query.bias, attn.key.bias, attn.value.bias, rotary=False)

    def embeddings(self) -> Embeddings:
        labels = [self._decode_ids[i] for i in range(len(self._decode_ids))]
        return Embeddings(tokens=self.stack.tok.weight.detach().float().cpu(),
                          positions=self.stack.pos.weight.detach().float().cpu(), unembed=None, labels=labels)

    # -- what a program has that a learned model has not ----------------------------------------------------------
    def program_output(self, run) -> list:
        """The program's decoded output at each position of a run (BOS first reads as BOS), from the run's final
        residual stream: what the compiled model computes, with whatever heads the run switched off."""
        return decode(self.config, run.output.float().cpu() @ self.stack.unembed.cpu())

    def written_heads(self) -> dict:
        """(layer, head) -> the `WrittenHead` its program wrote; a head no Select wrote is absent (Tracr pads a
        layer with fewer heads with zero heads)."""
        return {(w.layer, w.head): w for w in self.config.heads}

    def examples(self) -> list[tuple[str, str, str]]:
        """Random texts of the vocabulary, each item once then again (so repeats are there for the heads that read
        them), seeded, at most max_seq_len items."""
        rng = random.Random(0)
        vocab, n = list(self.config.vocab), self.config.max_seq_len
        out = []
        for i in range(N_EXAMPLES):
            half = [rng.choice(vocab) for _ in range(max(1, min(n // 2, 3 + i)))]
            text = " ".join((half + half)[:n])
            out.append((f"items {i + 1}: {text}"[:48], text, "a text of the vocabulary said twice"))
        return out

    def lexicon(self) -> Lexicon:
        """The program's vocabulary: every item is one token. No parts of speech: the census generates random and
        repeated sequences of these items, and no template sentences."""
        return Lexicon(words=tuple(self.config.vocab), nouns=(), adjectives=(), prepositions=(), verbs=(),
                       determiner="", object_determiner="", period="",
                       source=f"the vocabulary {self.config.name} was compiled for")


def load_compiled(folder, name: str | None = None) -> CompiledModel:
    """A compiled model folder (`config.save`), with torch alone."""
    config, tensors = C.load(folder)
    return CompiledModel(config, tensors, name=name or str(folder), folder=folder)
