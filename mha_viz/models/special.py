"""Which positions are special: one rule for every adapter's `Encoded.special` (and so `AttentionRun.special`).

A position is special when the tokenizer *added* it around the text ([CLS] and [SEP], <bos>, <s> ... </s>): where
the tokenizer's own special-tokens mask is 1. A special token the text itself produced is an ordinary position: a
typed "[MASK]" or "<|im_start|>", or the [UNK] an emoji becomes (that one is listed in `unknown` instead, as the
tiny model lists its <unk>). Mean ablation leaves special positions out of a head's mean, and the pattern scores
read them, so a word the user typed must not change which positions they are.

Where the mask comes from: the `tokenizers` Encoding's `special_tokens_mask` (the in-repo BERT adapter), or
transformers' `tokenizer(..., return_special_tokens_mask=True)`, which for Python tokenizers is
`get_special_tokens_mask(ids, already_has_special_tokens=False)` on the ids *before* the specials were added.
The id is not the test: `get_special_tokens_mask(ids, already_has_special_tokens=True)` and `all_special_ids`
compare ids, so they mark a typed "[MASK]" too.
"""
from __future__ import annotations

from typing import Iterable


def added_positions(special_tokens_mask: Iterable[int]) -> tuple[int, ...]:
    """The positions a tokenizer's special-tokens mask marks (1 = added by the tokenizer, 0 = from the text)."""
    return tuple(i for i, added in enumerate(special_tokens_mask) if added)
