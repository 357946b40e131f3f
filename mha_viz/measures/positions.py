"""What a measure reads besides the attention: `Positions` (one input's token facts: its length, which positions
the tokenizer added, repeats, gold pairs, unknown tokens), the masks built from them (`allowed_keys`,
`nearby_mask`), the uniform-attention reference every baseline is computed on (`uniform_pattern`),
`is_punctuation`, and the constants of a reading's support (`SUPPORT_FLOOR`, `TOO_FEW`).

Axis letters: L layer, H head, Q query, K key, T token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

Pair = tuple[int, int]  # (query position, key position)
NEARBY_WINDOW = 2  # positions either side counted by `nearby`
# The fewest queries a reading on one input may average over and still be shown as a number: below it the mean is
# one or two attention rows, and one row of a head resting on a lone repeated word reads as "86% induction".
SUPPORT_FLOOR = 3
TOO_FEW = "too few queries on this input"
CONTINUATION = "##"  # WordPiece marks the pieces that continue a word
START_MARKERS = "▁Ġ "  # SentencePiece's and byte-level BPE's word starts, and a plain leading space


# -- what a measure reads besides the attention ------------------------------------------------------------------
@dataclass(frozen=True)
class Positions:
    """One input's token facts a measure may read. `added` are the positions the tokenizer added ([CLS], [SEP],
    <bos>: `AttentionRun.special`); every other position is content. `repeats` are the (earlier, later) position
    pairs where the later token repeats the earlier one: derived from `token_ids` (`Positions.of`) or given by a
    generator that knows them (the census's repeated sequences, and their controls with the repeats destroyed).
    `gold` are ground-truth (query, key) pairs of a relation (the census's templates). `unknown` are the positions
    the tokenizer mapped to its unknown token (`AttentionRun.unknown`): they share one id, but nothing says the words
    behind them are the same, so they never take part in a repeat (as query or as earlier occurrence)."""
    t: int
    causal: bool
    tokens: tuple[str, ...] = ()
    added: frozenset[int] = frozenset()
    repeats: tuple[Pair, ...] = ()
    gold: tuple[Pair, ...] = ()
    unknown: frozenset[int] = frozenset()

    @property
    def content(self) -> torch.Tensor:
        """(T,) bool: the positions the text itself produced."""
        c = torch.ones(self.t, dtype=torch.bool)  # (T,)
        for p in self.added:
            c[p] = False
        return c

    @staticmethod
    def of(t: int, causal: bool, tokens: Sequence[str] = (), token_ids: Sequence | None = None,
           added=(), gold: Sequence[Pair] = (), unknown=()) -> "Positions":
        """From one run: `repeats` are every pair of content positions holding the same token id (or token string,
        when no ids are given), unknown positions left out (two unknowns are not "the same token")."""
        added = frozenset(int(p) for p in added)
        unknown = frozenset(int(p) for p in unknown)
        ids = list(token_ids) if token_ids is not None and len(token_ids) else list(tokens)
        if ids and len(ids) != t:
            raise ValueError(f"token_ids must hold one id per position ({t}); got {len(ids)}. "
                             "Pass run.token_ids (or run.tokens) of the same run.")
        if isinstance(token_ids, torch.Tensor):
            ids = token_ids.tolist()
        seen: dict = {}
        repeats = []
        for q, tok in enumerate(ids):
            if q in added or q in unknown:
                continue
            for k in seen.get(tok, ()):
                repeats.append((k, q))
            seen.setdefault(tok, []).append(q)
        return Positions(t, causal, tuple(tokens), added, tuple(repeats), tuple(gold), unknown)


def allowed_keys(t: int, causal: bool) -> torch.Tensor:
    """(Q, K) bool: the keys each query may attend to."""
    return torch.ones(t, t, dtype=torch.bool).tril() if causal else torch.ones(t, t, dtype=torch.bool)  # (Q, K)


def uniform_pattern(t: int, causal: bool) -> torch.Tensor:
    """Attention spread evenly over every allowed key -> (T, T): 1/T, or 1/(q+1) on and below the diagonal for a
    causal model. The reference every measure's baseline is computed on."""
    if t < 1:
        raise ValueError(f"t must be a positive number of tokens; got {t}")
    allowed = allowed_keys(t, causal).float()  # (Q, K)
    return allowed / allowed.sum(-1, keepdim=True)  # (Q, K)


def nearby_mask(t: int, window: int, content: Sequence[bool], causal: bool) -> torch.Tensor:
    """(Q, K) bool: for each content query q from position 2 on, the content keys k with 1 <= |q - k| <= window
    that q may see (position 0 is never a target: it is <bos>/[CLS] or the attention sink of models without one)."""
    if window < 1:
        raise ValueError(f"window must be at least 1; got {window}")
    c = torch.as_tensor(list(content), dtype=torch.bool)  # (T,)
    pos = torch.arange(t)
    dist = (pos[:, None] - pos[None, :]).abs()  # (Q, K)
    mask = (dist >= 1) & (dist <= window) & allowed_keys(t, causal) & c[:, None] & c[None, :]  # (Q, K)
    mask[:, 0] = False
    mask[:2] = False
    return mask


def is_punctuation(token: str) -> bool:
    """Only punctuation or symbols once word markers and spaces are gone: ".", ",", "##!", "Ġ(", "▁."."""
    text = token[len(CONTINUATION):] if token.startswith(CONTINUATION) else token.lstrip(START_MARKERS)
    text = text.strip()
    return bool(text) and not any(ch.isalnum() for ch in text)

