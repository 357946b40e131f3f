"""The registry of per-head measures: every score the page, the census, the circuits and training views, the
notebook and the exports show for a head is declared here once, with its function, its uniform-attention baseline,
which end is notable, and its words (a short label, one sentence of meaning, the paper it comes from and where ours
differs). Everything that shows a per-head score reads it from here, so one name is one computation.

    from mha_viz import measures
    m = measures.get("previous")                  # or measures.REGISTRY["previous"]; iterate REGISTRY to walk them
    value, uniform = m.measure(att, Positions.of(tokens, token_ids, added, causal))   # (L, H), float

Adding a measure is one `_register(Measure(...))` below plus its test: the census map, the badges (`badge=True`),
the Similarity table and the notebook pick it up from here.

The module imports nothing of the package but `mha_viz.names` (it sits below analysis/, which builds on it), so the
models' own probes, analysis, plotting, the app and the notebook may all read it.

Axis letters: L layer, H head, Q query, K key, T token. Attention is (L, H, Q, K) probabilities.
"""
from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable, Sequence

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


# -- the scoring primitives every entry is written with --------------------------------------------------------
def _nan(att: torch.Tensor) -> torch.Tensor:
    return torch.full(att.shape[:2], float("nan"))  # (L, H)


def _row_mean(att: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Attention mass on the keys `mask` (Q, K) marks, averaged over the queries with at least one -> (L, H)."""
    rows = mask.any(-1)  # (Q,)
    if not rows.any():
        return _nan(att)
    return (att * mask).sum(-1)[..., rows].mean(-1)  # (L, H)  from (L, H, R)


def _diagonal(att: torch.Tensor, offset: int, first_query: int) -> torch.Tensor:
    """att[q, q + offset] averaged over queries from `first_query` on -> (L, H)."""
    d = att.diagonal(offset=offset, dim1=-2, dim2=-1)  # (L, H, T - |offset|)
    start = max(0, first_query - max(0, -offset))
    d = d[..., start:]
    return d.mean(-1) if d.shape[-1] else _nan(att)  # (L, H)


def _diagonal_queries(t: int, offset: int, first_query: int) -> int:
    """How many queries `_diagonal` averages over."""
    return max(0, t - abs(offset) - max(0, first_query - max(0, -offset)))


def _rows(mask: torch.Tensor) -> int:
    """How many queries `_row_mean` averages over: the rows of `mask` (Q, K) with at least one key."""
    return int(mask.any(-1).sum())


def _previous(att, pos: Positions):
    return _diagonal(att, -1, 2)


def _next(att, pos: Positions):
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


def _offset(att, pos: Positions):
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


def _self(att, pos: Positions):
    return _diagonal(att, 0, 0)


def _first(att, pos: Positions):
    return att[..., 1:, 0].mean(-1) if pos.t > 1 else _nan(att)  # (L, H)


def _nearby(att, pos: Positions):
    return _row_mean(att, nearby_mask(pos.t, NEARBY_WINDOW, pos.content.tolist(), pos.causal))


def _key_mass(att, pos: Positions, keys: torch.Tensor) -> torch.Tensor:
    """Mass on the keys `keys` (K,) marks, over every query that may see one."""
    if not keys.any():
        return _nan(att)
    return _row_mean(att, keys[None, :] & allowed_keys(pos.t, pos.causal))


def _key_queries(pos: Positions, keys: torch.Tensor | None) -> int:
    """How many queries `_key_mass` averages over."""
    return 0 if keys is None or not keys.any() else _rows(keys[None, :] & allowed_keys(pos.t, pos.causal))


def _special_keys(pos: Positions) -> torch.Tensor:
    return ~pos.content  # (K,)


def _punctuation_keys(pos: Positions) -> torch.Tensor | None:
    if len(pos.tokens) != pos.t:
        return None
    return torch.tensor([is_punctuation(tok) for tok in pos.tokens], dtype=torch.bool) & pos.content  # (K,)


def _special(att, pos: Positions):
    return _key_mass(att, pos, _special_keys(pos))


def _punctuation(att, pos: Positions):
    keys = _punctuation_keys(pos)
    return _nan(att) if keys is None else _key_mass(att, pos, keys)


def _repeat_mask(pos: Positions, step: int) -> torch.Tensor:
    """(Q, K) bool: for each later occurrence q of a repeated token, its earlier occurrences k (step 0: the
    duplicate-token targets) or the tokens right after them (step 1: the induction targets), content keys only,
    never the query itself."""
    mask = torch.zeros(pos.t, pos.t, dtype=torch.bool)  # (Q, K)
    content = pos.content
    for k, q in pos.repeats:
        target = k + step
        if k in pos.unknown or q in pos.unknown:  # a generator's repeats too: an unknown repeats nothing
            continue
        if k < q and target < q and content[q] and content[k] and content[target]:
            mask[q, target] = True
    return mask


def _duplicate(att, pos: Positions):
    return _row_mean(att, _repeat_mask(pos, 0))


def _induction(att, pos: Positions):
    return _row_mean(att, _repeat_mask(pos, 1))


def _n_allowed(pos: Positions) -> torch.Tensor:
    return torch.arange(1, pos.t + 1) if pos.causal else torch.full((pos.t,), pos.t)  # (Q,)


def _spread_rows(pos: Positions) -> torch.Tensor:
    """(Q,) bool: the queries that may see more than one key (a single allowed key has no spread to measure)."""
    return _n_allowed(pos) > 1  # (Q,)


def _entropy(att, pos: Positions):
    n_allowed = _n_allowed(pos)  # (Q,)
    rows = _spread_rows(pos)  # (Q,)
    if not rows.any():
        return _nan(att)
    ent = -torch.xlogy(att, att).sum(-1)  # (L, H, Q)  nats
    return (ent[..., rows] / n_allowed[rows].float().log()).clamp(0.0, 1.0).mean(-1)  # (L, H)


def _row_max(att, pos: Positions):
    rows = _spread_rows(pos)  # (Q,)  a single allowed key is always the maximum
    return att.amax(-1)[..., rows].mean(-1) if rows.any() else _nan(att)  # (L, H)


def _distance_rows(pos: Positions) -> torch.Tensor:
    """(Q,) bool: the content queries that see at least two content keys."""
    keys = allowed_keys(pos.t, pos.causal) & pos.content[None, :]  # (Q, K)
    return pos.content & (keys.sum(-1) >= 2)  # (Q,)


def _distance(att, pos: Positions):
    t = pos.t
    c = pos.content
    keys = allowed_keys(t, pos.causal) & c[None, :]  # (Q, K)
    rows = _distance_rows(pos)  # (Q,)
    if not rows.any():
        return _nan(att)
    p = torch.arange(t)
    dist = (p[:, None] - p[None, :]).abs().float() * keys  # (Q, K)
    uniform = dist.sum(-1) / keys.sum(-1).clamp_min(1)  # (Q,)
    w = att * keys  # (L, H, Q, K)
    mean = (w * dist).sum(-1) / w.sum(-1).clamp_min(1e-12)  # (L, H, Q)
    return (mean / uniform.clamp_min(1e-12))[..., rows].mean(-1)  # (L, H)


def _gold_mass(att, pos: Positions):
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


def _dependency(att, pos: Positions):
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


def _dependency_chance(pos: Positions) -> float:
    """Uniform attention has no single most-attended key: its baseline is the chance of picking the gold key at
    random among the candidates, mean 1 / #candidates."""
    if not pos.gold:
        return float("nan")
    return sum(1.0 / float(dependency_candidates(q, pos).sum()) for q, _ in pos.gold) / len(pos.gold)


# -- the entry -------------------------------------------------------------------------------------------------
INPUTS = {  # the census's input sets, as its words name them
    "random": "random word sequences",
    "texts": "natural text",
    "repeated": "random sequences said twice",
    "templates": "template sentences",
}
TEXT_SUFFIX = " (text)"  # a census score read on natural text when the measure's own input set is another


@dataclass(frozen=True)
class Measure:
    """One per-head measure. `compute(att, positions)` maps one input's attention (L, H, T, T) to (L, H), NaN where
    the input has nothing to measure; `baseline(positions)` is what uniform attention over the allowed keys scores
    on the same positions (a head counts only as far as it beats it).

    name       registry key; the census's score name (with " (text)" when read on natural text, `score_name`)
    label      short: a badge, a column header, a map title
    meaning    one sentence: what is measured
    citation   the paper, and where ours differs
    notable    "high" or "low": which end marks a head (distance and entropy: low)
    badge      shown as a per-head badge on the Layer view and the notebook grid
    target     completes "N% of attention goes to ...", None for a score that is not a share of attention
    unmeasurable  why the value is NaN on an input
    census     the input sets the census reads it on, its own first (() : not in the census)
    needs      "tokens" (any input), or "gold" (ground-truth pairs of a relation: the census's templates only)
    """
    name: str
    label: str
    meaning: str
    citation: str
    compute: Callable[[torch.Tensor, Positions], torch.Tensor] = field(repr=False)
    notable: str = "high"
    badge: bool = False
    target: str | None = None
    unmeasurable: str = "the input has nothing to measure it on"
    census: tuple[str, ...] = ()
    needs: str = "tokens"
    chance: Callable[[Positions], float] | None = field(default=None, repr=False)
    note: str = ""  # appended to the sentence (e.g. which queries were averaged)
    template: str | None = None  # the sentence of a score that is not a share of attention, "{value:.2f}" in it
    unit: str = ""  # how a value that is not a share of attention reads ("0–1", "× uniform"); "" for a share
    # How many queries `compute` averages over on an input (the support of one reading; `support`)
    queries: Callable[[Positions], int] | None = field(default=None, repr=False)

    @property
    def is_share(self) -> bool:
        """A share of attention in [0, 1], shown as a percentage; otherwise a number in `unit`."""
        return self.target is not None

    @property
    def column(self) -> str:
        """A table's column header: the label, with the unit where the value is not a share."""
        return f"{self.label} ({self.unit})" if self.unit else self.label

    @property
    def lower_is_notable(self) -> bool:
        return self.notable == "low"

    def __call__(self, att: torch.Tensor, positions: Positions) -> torch.Tensor:
        """(L, H, T, T) -> (L, H)."""
        if att.dim() != 4 or att.shape[-1] != att.shape[-2] or att.shape[-1] != positions.t:
            raise ValueError(f"{self.name}: attention must be (L, H, {positions.t}, {positions.t}) for a "
                             f"{positions.t}-token input; got {tuple(att.shape)}")
        return self.compute(att.float(), positions)

    def baseline(self, positions: Positions) -> float:
        """What uniform attention over the allowed keys scores on the same positions."""
        if self.chance is not None:
            return float(self.chance(positions))
        return float(self.compute(uniform_pattern(positions.t, positions.causal)[None, None], positions)[0, 0])

    def support(self, positions: Positions) -> int:
        """How many queries a reading on this input averages over (the same for every head): below `SUPPORT_FLOOR`
        a value says too little to be shown as one (`readable`)."""
        if self.queries is None:
            raise NotImplementedError(f"measure {self.name!r} does not say how many queries it averages over")
        return int(self.queries(positions))

    def readable(self, positions: Positions) -> bool:
        """Enough queries on this input for a value to be shown (`SUPPORT_FLOOR`)."""
        return self.support(positions) >= SUPPORT_FLOOR

    def measure(self, att: torch.Tensor, positions: Positions) -> tuple[torch.Tensor, float]:
        """((L, H) values, uniform baseline) on one input."""
        return self(att, positions), self.baseline(positions)

    def sentence(self, value: float) -> str:
        """Plain words for one measured value on one input: a measurement, never a role."""
        value = float(value)
        if math.isnan(value):
            return f"Not measurable on this input: {self.unmeasurable}."
        if self.target is None:
            template = self.template or "{label}: {value:.2f} on this input."
            return template.format(value=value, label=self.label)
        return f"{value:.0%} of attention goes to {self.target} on this input{self.note}."

    def reading(self, value: float, n: int) -> str:
        """`sentence`, with its support: how many queries it averaged over; below `SUPPORT_FLOOR`, no number."""
        if n < SUPPORT_FLOOR and not math.isnan(float(value)):
            return (f"{self.label.capitalize()}: {TOO_FEW} ({queries_words(n)}; a reading needs at least "
                    f"{SUPPORT_FLOOR}).")
        return self.sentence(value).removesuffix(".") + (f", over {queries_words(n)}." if n else ".")

    def words(self, inputs: str | None = None) -> str:
        """One line for a map or a picker: the meaning, and on which inputs (the source is `citation`)."""
        where = f" ({INPUTS[inputs]})" if inputs else ""
        return f"{self.meaning}{where}"


def queries_words(n: int) -> str:
    return f"{n} quer{'y' if n == 1 else 'ies'}"


_REGISTRY: dict[str, Measure] = {}


def _register(m: Measure) -> Measure:
    if m.name in _REGISTRY:
        raise ValueError(f"measure {m.name!r} is registered twice")
    if m.queries is None:
        raise ValueError(f"{m.name}: say how many queries it averages over (queries=...): a reading shows its support")
    if m.notable not in ("high", "low"):
        raise ValueError(f"{m.name}: notable must be 'high' or 'low'; got {m.notable!r}")
    _REGISTRY[m.name] = m
    return m


_SHARE = "A share of attention, in [0, 1]."
_register(Measure(
    "previous", "previous token", "attention on the token right before the query, averaged over queries 2..T-1",
    "Clark et al. 2019, section 3 (previous-token heads; Olsson et al. 2022). Ours leaves query 1 out: its previous "
    "token is position 0, <bos>/[CLS] or the attention sink, so a head resting there would count as reading the "
    "previous token; Clark et al. count every query.",
    _previous, badge=True, target="the previous token", unmeasurable="the text has fewer than three tokens",
    census=("random", "texts"), queries=lambda pos: _diagonal_queries(pos.t, -1, 2)))
_register(Measure(
    "next", "next token", "attention on the token right after the query (always 0 in a causal model)",
    "Clark et al. 2019, section 3.", _next, badge=True, target="the next token",
    unmeasurable="the text has a single token",
    queries=lambda pos: 0 if pos.causal else _diagonal_queries(pos.t, 1, 0)))  # a causal query never sees it
_register(Measure(
    "nearby", "nearby", f"attention on the content tokens within {NEARBY_WINDOW} positions of the query, itself "
    "excluded, averaged over content queries from position 2 on",
    "Ours: a windowed previous/next token; Voita et al. 2019 call heads that attend to adjacent tokens "
    "\"positional\" and count only the +-1 neighbour.",
    _nearby, badge=True, target=f"the tokens within {NEARBY_WINDOW} positions of it (itself excluded)",
    unmeasurable="the text has fewer than three tokens", census=("random", "texts"),
    queries=lambda pos: _rows(nearby_mask(pos.t, NEARBY_WINDOW, pos.content.tolist(), pos.causal))))
_register(Measure(
    "offset", "fixed offset", f"attention on the key a fixed number of positions away, at the head's best offset "
    f"(1 to {OFFSET_MAX} back, or ahead in an encoder), averaged over the queries that have that key",
    "Clark et al. 2019, section 4.2 (the fixed-offset baselines, here as a score of the head). Ours: the best offset "
    "is chosen per head and input; position 0 is never the key, as for previous token.",
    _offset, target="one key at a fixed distance (its best)", unmeasurable="the text has fewer than three tokens",
    census=("random",),
    queries=lambda pos: _diagonal_queries(pos.t, -1, 2)))  # at offset 1; a longer offset has fewer
_register(Measure(
    "self", "itself", "attention of each token on itself", "Kovaleva et al. 2019 (diagonal patterns).", _self,
    badge=True, target="the token itself", unmeasurable="the text has no tokens", queries=lambda pos: pos.t))
_register(Measure(
    "first", "first token", "attention on position 0, averaged over queries 1..T-1: the sink of most models",
    "Clark et al. 2019 ([CLS]); Xiao et al. 2023 (attention sinks).", _first, badge=True,
    target="the first token", unmeasurable="the text has a single token", census=("texts",),
    queries=lambda pos: max(0, pos.t - 1)))
_register(Measure(
    "special", "special tokens", "attention on the positions the tokenizer added ([CLS], [SEP], <bos>), averaged "
    "over the queries that may see one",
    "Clark et al. 2019 ([CLS]/[SEP]). Ours: only tokenizer-added positions count, never a special token the text "
    "itself produced (a typed [MASK], an [UNK]); punctuation is its own measure.",
    _special, badge=True, target="the tokens the tokenizer added ([CLS], [SEP], <bos>)",
    unmeasurable="the tokenizer added no special token (SmolLM2 adds no <bos>: see first token)",
    census=("texts",), queries=lambda pos: _key_queries(pos, _special_keys(pos))))
_register(Measure(
    "punctuation", "punctuation", "attention on tokens made only of punctuation or symbols",
    "Clark et al. 2019, section 3 (heads that attend to periods and commas).", _punctuation, badge=True,
    target="punctuation tokens", unmeasurable="the text has no punctuation token", census=("texts",),
    queries=lambda pos: _key_queries(pos, _punctuation_keys(pos))))
_register(Measure(
    "duplicate", "same token earlier", "at a token that occurred before, attention on all its earlier "
    "occurrences, averaged over such queries",
    "Wang et al. 2022 (duplicate-token heads); Olsson et al. 2022 measure it on repeated random tokens.",
    _duplicate, badge=True, target="earlier occurrences of the same token",
    unmeasurable="no token repeats an earlier one", census=("repeated",),
    note=" (averaged over tokens that repeat an earlier one)", queries=lambda pos: _rows(_repeat_mask(pos, 0))))
_register(Measure(
    "induction", "induction", "at a token that occurred before, attention on the token right after each earlier "
    "occurrence, averaged over such queries",
    "Olsson et al. 2022 (induction heads, on repeated random tokens). Ours sums over every earlier occurrence and "
    "skips a target that is the query itself.",
    _induction, badge=True, target="the tokens after earlier occurrences of the same token",
    unmeasurable="no token repeats an earlier one two or more positions back", census=("repeated",),
    note=" (averaged over tokens that repeat an earlier one)", queries=lambda pos: _rows(_repeat_mask(pos, 1))))
_register(Measure(
    "distance", "distance", "attention-weighted mean distance to the content keys over uniform attention's: below "
    "1 a band near the diagonal",
    "Ours; Vig & Belinkov 2019 plot the mean attention distance per layer. Special positions are left out: "
    "[CLS]/[SEP] would count as far away wherever the query is.",
    _distance, notable="low", unmeasurable="no token sees two content tokens", census=("random", "texts"),
    queries=lambda pos: int(_distance_rows(pos).sum()),
    chance=lambda pos: 1.0,  # uniform attention's distance over itself, by definition (exactly, not to float error)
    unit="× uniform",
    template="The attention-weighted distance to the keys is {value:.2f} times uniform attention's on this input "
             "(below 1: near the diagonal)."))
_register(Measure(
    "entropy", "spread", "entropy of each query's attention over the keys it may see, over its maximum (1 = even, "
    "0 = all on one key)",
    "Clark et al. 2019, section 3 (attention entropy).", _entropy, notable="low",
    unmeasurable="no token can attend to more than one token", census=("texts",),
    unit="0–1", queries=lambda pos: int(_spread_rows(pos).sum()),
    template="Attention spread is {value:.2f} of its maximum on this input (1 = even over all tokens it may attend "
             "to, 0 = all on one token)."))
_register(Measure(
    "confidence", "confidence", "the largest weight of each query's attention, averaged over the queries that may "
    "see more than one key",
    "Voita et al. 2019, section 4.1 (a head's confidence: the average of its maximum attention weight).",
    lambda att, pos: _row_max(att, pos), unit="0–1", queries=lambda pos: int(_spread_rows(pos).sum()),
    unmeasurable="no token can attend to more than one token",
    census=("texts",), template="The largest attention weight is {value:.2f} on average on this input (1 = every "
    "token puts all its attention on one key)."))
_register(Measure(
    "gold", "attention on the gold word", "attention on the ground-truth key of each query of a relation",
    "Clark et al. 2019, section 4 (attention on the dependent word): the tie-break beside a relation's accuracy.",
    _gold_mass, needs="gold", queries=lambda pos: len({q for q, _ in pos.gold})))

# Clark et al. 2019's dependency relations on the census's template sentences: one measure each.
RELATIONS = {
    "det→noun": "from a determiner to its noun",
    "noun→det": "from a noun to its determiner",
    "adj→noun": "from an adjective to its noun",
    "noun→adj": "from a noun to its adjective",
    "subject→verb": "from the subject to its verb, across the attractor noun",
    "verb→subject": "from the verb to its subject, across the attractor noun (the nearer noun has the other number)",
    "pre-verb→subject": "from the word where the verb is predicted (the attractor) to the subject",
    "verb→object": "from the verb to its object",
    "object→verb": "from the object to its verb",
}
for _rel, _words in RELATIONS.items():
    _register(Measure(
        _rel, _rel, f"how often the most-attended word is the gold word, {_words}",
        "Clark et al. 2019, section 4.2, against the best fixed offset as well as chance. Ours: the candidates are "
        "the other content positions the query may see (Clark et al. use word-level maps of parsed WSJ text).",
        _dependency, unmeasurable="the input has no such relation", census=("templates",), needs="gold",
        queries=lambda pos: len(pos.gold),
        chance=_dependency_chance))


# -- reading the registry ------------------------------------------------------------------------------------------
REGISTRY: Mapping[str, Measure] = types.MappingProxyType(_REGISTRY)
ONE_INPUT = tuple(n for n, m in _REGISTRY.items() if m.needs == "tokens")  # what any one run can be scored on
BADGES = tuple(n for n in ONE_INPUT if _REGISTRY[n].badge)


def get(name: str) -> Measure:
    """The measure of a registry name or a census score name ("previous (text)")."""
    return of_score(name)[0]


def score_name(name: str, inputs: str) -> str:
    """The census's name for measure `name` read on `inputs`: the measure's name on its own input set, with
    " (text)" on natural text when that is not its own."""
    m = _REGISTRY[name]
    return name if inputs == m.census[0] else name + TEXT_SUFFIX


def of_score(score: str) -> tuple[Measure, str | None]:
    """A census score name -> (its measure, the input set it was read on); a registry name -> (measure, its own
    input set or None). Raises a KeyError that lists the names there are."""
    base, inputs = score, None
    if score.endswith(TEXT_SUFFIX) and score[: -len(TEXT_SUFFIX)] in _REGISTRY:
        base, inputs = score[: -len(TEXT_SUFFIX)], "texts"
    if base not in _REGISTRY:
        raise KeyError(f"{score!r} is not a registered measure; use one of: {', '.join(_REGISTRY)}")
    m = _REGISTRY[base]
    return m, inputs or (m.census[0] if m.census else None)


def census_scores() -> list[tuple[str, Measure, str]]:
    """(score name, measure, input set) of every score the census reads, in registry order."""
    return [(score_name(m.name, inputs), m, inputs) for m in _REGISTRY.values() for inputs in m.census]


def score_label(score: str) -> str:
    """A census score's short label: its measure's, with " (text)" where it was read on natural text."""
    m, inputs = of_score(score)
    return m.label + (TEXT_SUFFIX if score.endswith(TEXT_SUFFIX) else "")


def score_words(score: str) -> str:
    """The one line that explains a score wherever it is listed: the census maps, the notebook, the exports."""
    m, inputs = of_score(score)
    return m.words(inputs)


def markdown_table() -> str:
    """The README's table of measures, made from the entries (the relations share one row): README.md holds it
    between `<!-- measures -->` markers and a test checks it is this."""
    rows = ["| name | label | what it measures | source (and where ours differs) |", "| --- | --- | --- | --- |"]
    relations = [n for n in _REGISTRY if n in RELATIONS]
    for m in _REGISTRY.values():
        if m.name in RELATIONS:
            continue
        rows.append(f"| `{m.name}` | {m.label} | {m.meaning} | {m.citation} |")
    first = _REGISTRY[relations[0]]
    rows.append(f"| {', '.join(f'`{n}`' for n in relations)} | the relation | how often the most-attended word is the "
                f"gold word of that dependency relation, on the census's template sentences | {first.citation} |")
    return "\n".join(rows).replace("<", "&lt;").replace(">", "&gt;")  # "<bos>" would vanish as an HTML tag
