"""The scoring functions the registry's entries are written with: each maps one input's attention (L, H, Q, K)
and its `Positions` to (L, H), NaN where the input has nothing to measure (`previous_score`, `induction_score`,
`entropy_score`, `dependency_score`, ...), with the query counts that say how many queries each averages over
(`mask_rows`, `key_queries`, `diagonal_queries`, ...), and the fixed-offset table (`offsets`, `offset_table`,
`best_offsets`, `offset_words`).

Axis letters: L layer, H head, Q query, K key, T token. Attention is (L, H, Q, K) probabilities.
"""
from __future__ import annotations

import torch

from mha_viz.measures.positions import NEARBY_WINDOW, Positions, allowed_keys, is_punctuation, nearby_mask


def _nan(att: torch.Tensor) -> torch.Tensor:
    return torch.full(att.shape[:2], float("nan"))  # (L, H)


def _row_mean(att: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Attention mass on the keys `mask` (Q, K) marks, averaged over the queries with at least one -> (L, H).
    Only the marked cells are read (the masks mark a few keys per query): the Layer grid measures every head of
    every layer at each new sentence, and `att * mask` over all of them was most of that work."""
    rows = mask.any(-1)  # (Q,)
    if not rows.any():
        return _nan(att)
    q, k = mask.nonzero(as_tuple=True)  # (N,), (N,): the marked cells
    mass = att.new_zeros(*att.shape[:-1]).index_add_(-1, q, att[..., q, k])  # (L, H, Q)  from (L, H, N)
    return mass[..., rows].mean(-1)  # (L, H)  from (L, H, R)


def _diagonal(att: torch.Tensor, offset: int, first_query: int) -> torch.Tensor:
    """att[q, q + offset] averaged over queries from `first_query` on -> (L, H)."""
    d = att.diagonal(offset=offset, dim1=-2, dim2=-1)  # (L, H, T - |offset|)
    start = max(0, first_query - max(0, -offset))
    d = d[..., start:]
    return d.mean(-1) if d.shape[-1] else _nan(att)  # (L, H)


def diagonal_queries(t: int, offset: int, first_query: int) -> int:
    """How many queries `_diagonal` averages over."""
    return max(0, t - abs(offset) - max(0, first_query - max(0, -offset)))


def mask_rows(mask: torch.Tensor) -> int:
    """How many queries `_row_mean` averages over: the rows of `mask` (Q, K) with at least one key."""
    return int(mask.any(-1).sum())


def previous_score(att, pos: Positions):
    return _diagonal(att, -1, 2)


def next_score(att, pos: Positions):
    return _diagonal(att, 1, 0)


OFFSET_MAX = 5  # Clark et al. 2019's fixed offsets: the word up to 5 away


def offsets(causal: bool) -> tuple[int, ...]:
    """The fixed offsets `offset` reads, as key - query, nearest first and back before ahead: -1, -2 .. -5 for a
    causal model, -1, +1, -2, +2 .. for an encoder."""
    return tuple(d for k in range(1, OFFSET_MAX + 1) for d in ((-k,) if causal else (-k, k)))


def offset_table(att, pos: Positions) -> torch.Tensor:
    """(D, L, H): the mean attention on the key d away for each offset d of `offsets` (att (L, H, T, T)), over the
    queries whose key d away exists and is not position 0 (as `previous`); -1 where no query has that key."""
    return torch.stack([_diagonal(att, d, 1 - d if d < 0 else 1).nan_to_num(nan=-1.0)
                        for d in offsets(pos.causal)])  # (D, L, H)


def best_offset_score(att, pos: Positions):
    """The largest, over fixed offsets d = 1..5 back (and forward, for an encoder), of the mean attention on the key
    d away, over the queries whose key d away exists and is not position 0 (as `previous`)."""
    best = offset_table(att, pos).amax(0)  # (L, H)
    return best.masked_fill(best < 0, float("nan"))  # (L, H): NaN where no offset has a query


def best_offsets(att: torch.Tensor, pos: Positions) -> torch.Tensor:
    """(L, H) int: the offset (key - query: -3 is 3 back) at which each head's `offset` score is read; of equal
    offsets the nearest, back before ahead."""
    table = offset_table(att.float(), pos)  # (D, L, H)
    return torch.tensor(offsets(pos.causal))[table.argmax(0)]  # (L, H); argmax takes the first of equal maxima


def offset_words(offset: int) -> str:
    """-3 -> "3 back", 2 -> "2 ahead"."""
    return f"{abs(int(offset))} {'back' if offset < 0 else 'ahead'}"


def self_score(att, pos: Positions):
    return _diagonal(att, 0, 0)


def first_score(att, pos: Positions):
    return att[..., 1:, 0].mean(-1) if pos.t > 1 else _nan(att)  # (L, H)


def nearby_score(att, pos: Positions):
    return _row_mean(att, nearby_mask(pos.t, NEARBY_WINDOW, pos.content.tolist(), pos.causal))


def _key_mass(att, pos: Positions, keys: torch.Tensor) -> torch.Tensor:
    """Mass on the keys `keys` (K,) marks, over every query that may see one."""
    if not keys.any():
        return _nan(att)
    return _row_mean(att, keys[None, :] & allowed_keys(pos.t, pos.causal))


def key_queries(pos: Positions, keys: torch.Tensor | None) -> int:
    """How many queries `_key_mass` averages over."""
    return 0 if keys is None or not keys.any() else mask_rows(keys[None, :] & allowed_keys(pos.t, pos.causal))


def special_keys(pos: Positions) -> torch.Tensor:
    return ~pos.content  # (K,)


def punctuation_keys(pos: Positions) -> torch.Tensor | None:
    if len(pos.tokens) != pos.t:
        return None
    return torch.tensor([is_punctuation(tok) for tok in pos.tokens], dtype=torch.bool) & pos.content  # (K,)


def special_score(att, pos: Positions):
    return _key_mass(att, pos, special_keys(pos))


def punctuation_score(att, pos: Positions):
    keys = punctuation_keys(pos)
    return _nan(att) if keys is None else _key_mass(att, pos, keys)


def repeat_mask(pos: Positions, step: int) -> torch.Tensor:
    """(Q, K) bool: for each later occurrence q of a repeated token, its earlier occurrences k (step 0: the
    duplicate-token targets) or the tokens right after them (step 1: the induction targets), content keys only,
    never the query itself. An unknown position takes no part: not as query, earlier occurrence or target (an
    unknown target is a word the model cannot read, so attention to it shows no copying of that word)."""
    mask = torch.zeros(pos.t, pos.t, dtype=torch.bool)  # (Q, K)
    content = pos.content.tolist()  # Python bools: a long text has thousands of repeated pairs
    queries, targets = [], []
    for k, q in pos.repeats:
        target = k + step
        if k in pos.unknown or q in pos.unknown or target in pos.unknown:  # a generator's repeats too
            continue
        if k < q and target < q and content[q] and content[k] and content[target]:
            queries.append(q)
            targets.append(target)
    mask[queries, targets] = True
    return mask


def duplicate_score(att, pos: Positions):
    return _row_mean(att, repeat_mask(pos, 0))


def induction_score(att, pos: Positions):
    return _row_mean(att, repeat_mask(pos, 1))


def _n_allowed(pos: Positions) -> torch.Tensor:
    return torch.arange(1, pos.t + 1) if pos.causal else torch.full((pos.t,), pos.t)  # (Q,)


def spread_rows(pos: Positions) -> torch.Tensor:
    """(Q,) bool: the queries that may see more than one key (a single allowed key has no spread to measure)."""
    return _n_allowed(pos) > 1  # (Q,)


def entropy_score(att, pos: Positions):
    n_allowed = _n_allowed(pos)  # (Q,)
    rows = spread_rows(pos)  # (Q,)
    if not rows.any():
        return _nan(att)
    ent = -torch.xlogy(att, att).sum(-1)  # (L, H, Q)  nats
    return (ent[..., rows] / n_allowed[rows].float().log()).clamp(0.0, 1.0).mean(-1)  # (L, H)


def row_max_score(att, pos: Positions):
    rows = spread_rows(pos)  # (Q,)  a single allowed key is always the maximum
    return att.amax(-1)[..., rows].mean(-1) if rows.any() else _nan(att)  # (L, H)


def distance_rows(pos: Positions) -> torch.Tensor:
    """(Q,) bool: the content queries that see at least two content keys."""
    keys = allowed_keys(pos.t, pos.causal) & pos.content[None, :]  # (Q, K)
    return pos.content & (keys.sum(-1) >= 2)  # (Q,)


def distance_score(att, pos: Positions):
    t = pos.t
    c = pos.content
    keys = allowed_keys(t, pos.causal) & c[None, :]  # (Q, K)
    rows = distance_rows(pos)  # (Q,)
    if not rows.any():
        return _nan(att)
    p = torch.arange(t)
    dist = (p[:, None] - p[None, :]).abs().float() * keys  # (Q, K)
    uniform = dist.sum(-1) / keys.sum(-1).clamp_min(1)  # (Q,)
    w = att * keys  # (L, H, Q, K)
    mean = (w * dist).sum(-1) / w.sum(-1).clamp_min(1e-12)  # (L, H, Q)
    return (mean / uniform.clamp_min(1e-12))[..., rows].mean(-1)  # (L, H)


def gold_mass(att, pos: Positions):
    mask = torch.zeros(pos.t, pos.t, dtype=torch.bool)  # (Q, K)
    for q, k in pos.gold:
        mask[q, k] = True
    return _row_mean(att, mask)


def dependency_candidates(query: int, pos: Positions) -> torch.Tensor:
    """(K,) bool: the keys Clark et al.'s classifier picks from: the other content positions the query sees."""
    c = pos.content.clone()  # (K,)
    c[query] = False
    if pos.causal:
        c[query + 1:] = False
    return c


def dependency_score(att, pos: Positions):
    if not pos.gold:
        return _nan(att)
    hits = []
    for q, k in pos.gold:
        cand = dependency_candidates(q, pos)  # (K,)
        if not cand[k]:
            raise ValueError(f"gold key {k} of query {q} is not a candidate (special, the query itself, or ahead)")
        idx = cand.nonzero().flatten()  # (C,)
        hits.append((idx[att[..., q, idx].argmax(-1)] == k).float())  # (L, H)
    return torch.stack(hits).mean(0)  # (L, H)


def dependency_chance(pos: Positions) -> float:
    """Uniform attention has no single most-attended key: its baseline is the chance of picking the gold key at
    random among the candidates, mean 1 / #candidates."""
    if not pos.gold:
        return float("nan")
    return sum(1.0 / float(dependency_candidates(q, pos).sum()) for q, _ in pos.gold) / len(pos.gold)

