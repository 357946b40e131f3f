"""The registry itself: `Measure` (one per-head measure: its function, its uniform-attention baseline, which end is
notable, its support and its words), every entry registered once (`REGISTRY`, in registration order), the census's
input sets (`INPUTS`) and dependency relations (`RELATIONS`), and the functions that read it: `get`, `of_score`,
`score_name`, `census_scores`, `score_label`, `score_words`, `markdown_table`.

Axis letters: L layer, H head, Q query, K key, T token. Attention is (L, H, Q, K) probabilities.
"""
from __future__ import annotations

import math
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Callable

import torch

from mha_viz.measures.positions import NEARBY_WINDOW, SUPPORT_FLOOR, TOO_FEW, Positions, nearby_mask, uniform_pattern
from mha_viz.measures.scoring import (
    OFFSET_MAX,
    best_offset_score,
    dependency_chance,
    dependency_score,
    diagonal_queries,
    distance_rows,
    distance_score,
    duplicate_score,
    entropy_score,
    first_score,
    gold_mass,
    induction_score,
    key_queries,
    mask_rows,
    nearby_score,
    next_score,
    previous_score,
    punctuation_keys,
    punctuation_score,
    repeat_mask,
    row_max_score,
    self_score,
    special_keys,
    special_score,
    spread_rows,
)

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
    previous_score, badge=True, target="the previous token", unmeasurable="the text has fewer than three tokens",
    census=("random", "texts"), queries=lambda pos: diagonal_queries(pos.t, -1, 2)))
_register(Measure(
    "next", "next token", "attention on the token right after the query (always 0 in a causal model)",
    "Clark et al. 2019, section 3.", next_score, badge=True, target="the next token",
    unmeasurable="the text has a single token",
    queries=lambda pos: 0 if pos.causal else diagonal_queries(pos.t, 1, 0)))  # a causal query never sees it
_register(Measure(
    "nearby", "nearby", f"attention on the content tokens within {NEARBY_WINDOW} positions of the query, itself "
    "excluded, averaged over content queries from position 2 on",
    "Ours: a windowed previous/next token; Voita et al. 2019 call heads that attend to adjacent tokens "
    "\"positional\" and count only the +-1 neighbour.",
    nearby_score, badge=True, target=f"the tokens within {NEARBY_WINDOW} positions of it (itself excluded)",
    unmeasurable="the text has fewer than three tokens", census=("random", "texts"),
    queries=lambda pos: mask_rows(nearby_mask(pos.t, NEARBY_WINDOW, pos.content.tolist(), pos.causal))))
_register(Measure(
    "offset", "fixed offset", f"attention on the key a fixed number of positions away, at the head's best offset "
    f"(1 to {OFFSET_MAX} back, or ahead in an encoder), averaged over the queries that have that key",
    "Clark et al. 2019, section 4.2 (the fixed-offset baselines, here as a score of the head). Ours: the best offset "
    "is chosen per head and input; position 0 is never the key, as for previous token.",
    best_offset_score, target="one key at a fixed distance (its best)",
    unmeasurable="the text has fewer than three tokens",
    census=("random",),
    queries=lambda pos: diagonal_queries(pos.t, -1, 2)))  # at offset 1; a longer offset has fewer
_register(Measure(
    "self", "itself", "attention of each token on itself", "Kovaleva et al. 2019 (diagonal patterns).", self_score,
    badge=True, target="the token itself", unmeasurable="the text has no tokens", queries=lambda pos: pos.t))
_register(Measure(
    "first", "first token", "attention on position 0, averaged over queries 1..T-1: the sink of most models",
    "Clark et al. 2019 ([CLS]); Xiao et al. 2023 (attention sinks).", first_score, badge=True,
    target="the first token", unmeasurable="the text has a single token", census=("texts",),
    queries=lambda pos: max(0, pos.t - 1)))
_register(Measure(
    "special", "special tokens", "attention on the positions the tokenizer added ([CLS], [SEP], <bos>), averaged "
    "over the queries that may see one",
    "Clark et al. 2019 ([CLS]/[SEP]). Ours: only tokenizer-added positions count, never a special token the text "
    "itself produced (a typed [MASK], an [UNK]); punctuation is its own measure.",
    special_score, badge=True, target="the tokens the tokenizer added ([CLS], [SEP], <bos>)",
    unmeasurable="the tokenizer added no special token (SmolLM2 adds no <bos>: see first token)",
    census=("texts",), queries=lambda pos: key_queries(pos, special_keys(pos))))
_register(Measure(
    "punctuation", "punctuation", "attention on tokens made only of punctuation or symbols",
    "Clark et al. 2019, section 3 (heads that attend to periods and commas).", punctuation_score, badge=True,
    target="punctuation tokens", unmeasurable="the text has no punctuation token", census=("texts",),
    queries=lambda pos: key_queries(pos, punctuation_keys(pos))))
_register(Measure(
    "duplicate", "same token earlier", "at a token that occurred before, attention on all its earlier "
    "occurrences, averaged over such queries",
    "Wang et al. 2022 (duplicate-token heads); Olsson et al. 2022 measure it on repeated random tokens.",
    duplicate_score, badge=True, target="earlier occurrences of the same token",
    unmeasurable="no token repeats an earlier one", census=("repeated",),
    note=" (averaged over tokens that repeat an earlier one)", queries=lambda pos: mask_rows(repeat_mask(pos, 0))))
_register(Measure(
    "induction", "induction", "at a token that occurred before, attention on the token right after each earlier "
    "occurrence, averaged over such queries",
    "Olsson et al. 2022 (induction heads, on repeated random tokens). Ours sums over every earlier occurrence and "
    "skips a target that is the query itself.",
    induction_score, badge=True, target="the tokens after earlier occurrences of the same token",
    unmeasurable="no token repeats an earlier one two or more positions back", census=("repeated",),
    note=" (averaged over tokens that repeat an earlier one)", queries=lambda pos: mask_rows(repeat_mask(pos, 1))))
_register(Measure(
    "distance", "distance", "attention-weighted mean distance to the content keys over uniform attention's: below "
    "1 a band near the diagonal",
    "Ours; Vig & Belinkov 2019 plot the mean attention distance per layer. Special positions are left out: "
    "[CLS]/[SEP] would count as far away wherever the query is.",
    distance_score, notable="low", unmeasurable="no token sees two content tokens", census=("random", "texts"),
    queries=lambda pos: int(distance_rows(pos).sum()),
    chance=lambda pos: 1.0,  # uniform attention's distance over itself, by definition (exactly, not to float error)
    unit="× uniform",
    template="The attention-weighted distance to the keys is {value:.2f} times uniform attention's on this input "
             "(below 1: near the diagonal)."))
_register(Measure(
    "entropy", "spread", "entropy of each query's attention over the keys it may see, over its maximum (1 = even, "
    "0 = all on one key)",
    "Clark et al. 2019, section 3 (attention entropy).", entropy_score, notable="low",
    unmeasurable="no token can attend to more than one token", census=("texts",),
    unit="0–1", queries=lambda pos: int(spread_rows(pos).sum()),
    template="Attention spread is {value:.2f} of its maximum on this input (1 = even over all tokens it may attend "
             "to, 0 = all on one token)."))
_register(Measure(
    "confidence", "confidence", "the largest weight of each query's attention, averaged over the queries that may "
    "see more than one key",
    "Voita et al. 2019, section 4.1 (a head's confidence: the average of its maximum attention weight).",
    lambda att, pos: row_max_score(att, pos), unit="0–1", queries=lambda pos: int(spread_rows(pos).sum()),
    unmeasurable="no token can attend to more than one token",
    census=("texts",), template="The largest attention weight is {value:.2f} on average on this input (1 = every "
    "token puts all its attention on one key)."))
_register(Measure(
    "gold", "attention on the gold word", "attention on the ground-truth key of each query of a relation",
    "Clark et al. 2019, section 4 (attention on the dependent word): the tie-break beside a relation's accuracy.",
    gold_mass, needs="gold", queries=lambda pos: len({q for q, _ in pos.gold})))

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
        dependency_score, unmeasurable="the input has no such relation", census=("templates",), needs="gold",
        queries=lambda pos: len(pos.gold),
        chance=dependency_chance))


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
    """The table of measures, made from the entries (the relations share one row): docs/measures.md holds it
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
