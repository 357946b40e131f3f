"""Token display transforms: hide special positions, merge word pieces into words.

Which positions are special is the model's (`AttentionRun.special`, `models/special.py`); this module only reads
the positions it is given.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch

from mha_viz.analysis._checks import attention as _attention
from mha_viz.analysis._checks import position_mask as _position_mask
from mha_viz.measures import is_punctuation

# Word-start markers of SentencePiece ("▁"), byte-level BPE ("Ġ") and labels already decoded to a space.
_START_MARKERS = ("▁", "Ġ", " ")
_CONTINUATION = "##"  # WordPiece marks the pieces that continue a word


def hide_positions(att: torch.Tensor, keep_mask) -> torch.Tensor:
    """Drop hidden positions from both axes and renormalise each remaining row to sum to 1
    -> (..., T', T'), T' = keep_mask.sum().

    Shows how a query's attention divides among the visible tokens, e.g. with [CLS]/[SEP] hidden, since
    those often take a large share of the weight in BERT (Clark et al. 2019, section 3), while the vectors read
    there are small (Kobayashi et al. 2020). A row whose kept mass is 0 stays all zeros.
    """
    att = _attention(att, "att", range(2, 9), "(..., Q, K)")
    keep = _position_mask(keep_mask, att.shape[-1], "keep_mask")  # (T,)
    if not keep.any():
        raise ValueError("keep_mask hides every position; keep at least one token")
    kept = att[..., keep, :][..., keep]  # (..., T', T')
    sums = kept.sum(-1, keepdim=True)  # (..., T', 1)
    return torch.where(sums > 0, kept / sums.clamp_min(1e-30), kept)  # (..., T', T')


def merge_word_pieces(att: torch.Tensor, groups: list[list[int]]) -> torch.Tensor:
    """Token-to-token attention -> word-to-word attention (..., W, W), as Clark et al. 2019 ("What Does
    BERT Look At?", section 4): attention *to* a word is the sum over its pieces, attention *from* a word
    is the mean over its pieces. Rows still sum to 1.

    groups: W lists of positions covering each of the T positions exactly once, in order (see
    `word_groups`).
    """
    att = _attention(att, "att", range(2, 9), "(..., Q, K)")
    t = att.shape[-1]
    flat = [int(i) for g in groups for i in g]
    if sorted(flat) != list(range(t)) or any(len(g) == 0 for g in groups):
        raise ValueError(f"groups must split positions 0-{t - 1} into non-empty words, each position "
                         f"exactly once; build them with word_groups(tokens)")
    member = torch.zeros(len(groups), t)  # (W, T)
    for w, g in enumerate(groups):
        member[w, g] = 1.0
    to_words = att @ member.T  # (..., Q, W)  sum over each word's key pieces
    mean_rows = member / member.sum(-1, keepdim=True)  # (W, T)
    return mean_rows @ to_words  # (..., W, W)  mean over each word's query pieces


def _looks_special(token: str) -> bool:
    """[CLS], [SEP], <s>, </s>, <|im_start|>, a SentencePiece byte like <0x0A>, and the like."""
    return len(token) > 2 and ((token[0] == "[" and token[-1] == "]") or (token[0] == "<" and token[-1] == ">"))


def _strip_marker(token: str) -> str:
    if token.startswith(_CONTINUATION):
        return token[len(_CONTINUATION):]
    return token.lstrip("".join(_START_MARKERS))


def _is_punct(token: str) -> bool:
    """Only punctuation or symbols once word markers and spaces are gone: the registry's `punctuation` rule."""
    return is_punctuation(token)


def _breaks_line(token: str) -> bool:
    """A line break in a decoded label. (SentencePiece's newline byte, <0x0A>, already looks special.)"""
    return any(ch in token for ch in "\n\r\u2028\u2029")


def word_groups(tokens: Sequence[str], starts: Sequence[bool] | None = None,
                special: Iterable[int] = ()) -> list[list[int]]:
    """Group subword tokens into words -> W lists of positions, for `merge_word_pieces`.

    starts: optional explicit word-start flags, one per token. Otherwise the scheme is detected:
    SentencePiece ("▁") and byte-level BPE ("Ġ", or a label decoded to a leading space) mark word
    *starts*; WordPiece marks *continuations* with "##"; with no markers every token is a word.
    Some tokens are always words of their own, and the token after them starts a new word: special tokens
    (positions in `special`, and [..]/<..>-shaped tokens), punctuation ("," is not part of the word before
    it) and tokens holding a newline (a word never runs from one line onto the next).
    """
    tokens = list(tokens)
    if not all(isinstance(tok, str) for tok in tokens):
        raise TypeError("tokens must be a list of strings, e.g. run.tokens")
    special = {int(i) for i in special}
    if starts is not None:
        starts = [bool(s) for s in starts]
        if len(starts) != len(tokens):
            raise ValueError(f"starts must have one flag per token ({len(tokens)}); got {len(starts)}")
    elif any(tok.startswith(_START_MARKERS) for tok in tokens[1:]):
        starts = [tok.startswith(_START_MARKERS) for tok in tokens]
    else:
        starts = [not tok.startswith(_CONTINUATION) for tok in tokens]
    alone = [i in special or _looks_special(tok) or _is_punct(tok) or _breaks_line(tok)
             for i, tok in enumerate(tokens)]
    groups: list[list[int]] = []
    for i in range(len(tokens)):
        if i == 0 or starts[i] or alone[i] or alone[i - 1]:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def word_labels(tokens: Sequence[str], groups: list[list[int]]) -> list[str]:
    """Labels for merged words when the run has no token ids to decode: each word's pieces joined, subword
    markers removed. With ids, a word's label is the model's decoding of them (`Model.decode_ids`), which also
    rejoins a character split across pieces."""
    return ["".join(_strip_marker(tokens[i]) for i in g) for g in groups]

