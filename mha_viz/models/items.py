"""What the models that read a program's vocabulary share: the written models compiled by Tracr
(`models/compiled/`) and their learned twins (`models/twins/`). Their text is whitespace-separated items of a fixed
vocabulary with BOS first (`ItemText`: encoding, decoding, one item's id, each id's label), and `ItemsModel` answers
the contract's text side, example texts, lexicon, batch padding and output projection from it, so the two families
tokenise, pad and slice their heads alike.

Axis letters: B batch, T token position, D d_model, H heads, dh head width.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

import torch
from torch import nn

from mha_viz.contract import InputError, Lexicon
from mha_viz.models.interventions import EditableModel, Encoded
from mha_viz.models.special import added_positions

N_EXAMPLES = 4  # example texts a model of items offers


@dataclass(frozen=True)
class ItemText:
    """One program's text: `vocab` its items, `ids` item -> token id (BOS among them), at most `max_items` items
    after BOS. `name` and `limit` word the errors ("<n> items is more than <name> <limit>"), `source` the
    lexicon's origin."""
    name: str
    vocab: tuple[str, ...]
    ids: Mapping[str, int]
    bos: str
    max_items: int
    limit: str  # why at most max_items: "was compiled for (max_seq_len 5)", "was trained for (at most 5)"
    source: str  # where the vocabulary comes from, in words: "the vocabulary sort was compiled for"

    def encode(self, text: str) -> Encoded:
        items = text.split()
        unknown = sorted({t for t in items if t not in self.vocab}, key=items.index)
        if unknown or not items:
            raise InputError(f"{self.name} reads whitespace-separated items of its vocabulary "
                             f"({' '.join(self.vocab)}), at most {self.max_items} of them; "
                             + (f"not in it: {', '.join(repr(u) for u in unknown[:5])}" if unknown
                                else "the text has none"))
        if len(items) > self.max_items:
            raise InputError(f"{len(items)} items is more than {self.name} {self.limit}; shorten the text to at "
                             f"most {self.max_items} items of: {' '.join(self.vocab)}")
        ids = [self.ids[self.bos]] + [self.ids[t] for t in items]
        return Encoded(ids=ids, labels=[self.bos] + items, dropped=0,
                       special=added_positions([1] + [0] * len(items)), unknown=())

    @cached_property
    def labels(self) -> tuple[str, ...]:
        """Each token id's item, in id order."""
        by_id = {i: t for t, i in self.ids.items()}
        return tuple(by_id[i] for i in range(len(by_id)))

    def decode(self, token_id: int) -> str:
        return self.labels[int(token_id)]

    def token_id(self, piece: str) -> int:
        piece = piece.strip()
        if piece not in self.vocab:
            raise InputError(f"{piece!r} is not in {self.name}'s vocabulary: {' '.join(self.vocab)}")
        return self.ids[piece]

    def examples(self) -> list[tuple[str, str, str]]:
        """Random texts of the vocabulary, each said twice (so repeats are there for the heads that read them),
        seeded, at most max_items items."""
        rng = random.Random(0)
        vocab, n = list(self.vocab), self.max_items
        out = []
        for i in range(N_EXAMPLES):
            half = [rng.choice(vocab) for _ in range(max(1, min(n // 2, 3 + i)))]
            text = " ".join((half + half)[:n])
            out.append((f"items {i + 1}: {text}"[:48], text, "a text of the vocabulary said twice"))
        return out


class ItemsModel(EditableModel):
    """An engine model that reads `items` (an `ItemText`), with `blocks` its stack's blocks (each `.attn.out` the
    layer's output projection, an nn.Linear) and `_device` where its stack runs: both set by the subclass."""

    items: ItemText
    blocks: nn.ModuleList
    _device: torch.device

    def encoding(self, text: str) -> Encoded:
        return self.items.encode(text)

    def decode(self, token_id: int) -> str:
        return self.items.decode(token_id)

    def token_id(self, piece: str) -> int:
        return self.items.token_id(piece)

    def examples(self) -> list[tuple[str, str, str]]:
        return self.items.examples()

    def lexicon(self) -> Lexicon:
        """The program's vocabulary, every item one token. No parts of speech: the census generates random and
        repeated sequences of these items, and no template sentences."""
        return Lexicon(words=self.items.vocab, nouns=(), adjectives=(), prepositions=(), verbs=(), determiner="",
                       object_determiner="", period="", source=self.items.source)

    def batch(self, ids: torch.Tensor, lengths=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A batch's ids (B, T) on the stack's device with the padding made a valid id (its rows are discarded),
        and the key mask (B, T) an encoder needs to ignore the padding (None without `lengths`, or when causal: no
        position sees the padding to its right)."""
        ids = ids.to(self._device)  # (B, T)
        if lengths is None:
            return ids, None
        keys = None
        if not self.causal:
            keys = (torch.arange(ids.shape[1])[None, :] < torch.as_tensor(list(lengths))[:, None]).to(
                self._device)  # (B, T)
        return ids.clamp(0, len(self.items.ids) - 1), keys  # (B, T)

    def output_projection(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.blocks[layer].attn.out
        return out.weight.detach().float().cpu(), out.bias.detach().float().cpu()  # (D, H * dh), (D,)
