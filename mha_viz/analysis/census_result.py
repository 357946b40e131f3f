"""What a head census is once made, and what is read from it: `CensusConfig` (how many inputs of each kind, and their
sizes), `HeadCensus` (every score per head with its uniform baseline, bootstrap interval, control and fixed-offset
baseline; which heads it names, in words; its CSV rows and JSON export), `InContext` (the in-context loss check of a
causal LM), and the readings across censuses: `holders` (the heads that hold a pattern) and `seed_roles` (which head
holds the previous-token, induction and subject patterns in each of several censuses).

`analysis.census_run.head_census` makes a `HeadCensus`; this module drives no model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from mha_viz import measures
from mha_viz.analysis.census import CONTROL_SHARE, TIE_TOLERANCE, Naming
from mha_viz.contract import Head, Model
from mha_viz.names import head_name, head_names

# The one naming rule and its two numbers live with the pooling (`analysis.census.name_heads`); every view, export and
# comparison reads a census's names through `HeadCensus.named`.
RULE_WORDS = (f"A head is named for a score when it beats its control (the low end of the paired 95% interval of "
              f"head minus control, over the same inputs, lies {CONTROL_SHARE:.0%} of the way from the control to "
              "the score's notable end), is not clearly below the "
              f"leading head (the paired interval of leader minus head reaches below {TIE_TOLERANCE}), and no head "
              "that beats its control with a higher score is left out: heads the data cannot tell apart are named "
              "together as a tie, whatever their order.")
@dataclass(frozen=True)
class CensusConfig:
    """How many inputs of each kind, and their sizes. `for_model` scales them down for models with many heads."""
    n_random: int = 24
    random_length: int = 24
    n_repeated: int = 24
    repeated_lengths: tuple[int, int] = (6, 16)
    n_templates: int = 48
    n_loss: int = 8  # repeated inputs for the in-context loss and its ablation check (causal LMs)
    # induction heads switched off together; None: as many as hold the pattern (census_run's in-context check)
    k: int | None = None
    n_other_sets: int = 4  # sets of k other heads to compare with
    n_boot: int = 200  # bootstrap resamples
    # The counts above are the most the census reads of each generated set, so it stays within the time it took when
    # it read them all at once: it reads `first` of each, then, where a score's leader ties a head that more data may
    # yet separate, adds the rest of that set in `rounds` equal rounds (a fresh draw each), until none is undecided.
    first: float = 2 / 3
    rounds: int = 2

    def first_read(self) -> "CensusConfig":
        """The counts of the first read."""
        return self._counts(self.first)

    def one_round(self) -> "CensusConfig":
        """The counts one more round adds."""
        return self._counts((1 - self.first) / max(1, self.rounds))

    def _counts(self, share: float) -> "CensusConfig":
        from dataclasses import replace

        return replace(self, **{k: math.ceil(getattr(self, k) * share) if getattr(self, k) else 0
                                for k in ("n_random", "n_repeated", "n_templates")})

    @classmethod
    def for_model(cls, model: Model) -> "CensusConfig":
        n = model.n_layers * model.n_heads
        if n <= 100:
            return cls()
        # SmolLM2's 270 heads: a forward costs 30x tiny's; half the inputs keep the default census bounded.
        return cls(n_random=12, n_repeated=12, n_templates=24, n_loss=4, n_other_sets=3)


@dataclass(frozen=True)
class InContext:
    """Olsson et al. 2022's in-context check on repeated random sequences (causal LMs): mean next-token loss
    (nats) on the first copy and on the second, and the share of that drop lost when heads are switched off."""
    loss_first: float
    loss_second: float
    k: int
    top_heads: tuple[Head, ...]
    partners: tuple[Head, ...]  # the previous-token heads, switched off on their own
    other_sets: tuple[tuple[Head, ...], ...]
    # "top k induction, <off>", "previous-token heads ..., <off>", "other k, <off>" (mean over the sets), one of each
    # per meaning of "off" measured (<off>: an `Ablation.kinds()` key)
    lost: dict[str, float]
    others_lost: dict[str, tuple[float, ...]]  # meaning of "off" -> the share lost with each other set
    n_inputs: int
    mean_over: str  # the reference texts the meanings that take outputs from texts (mean, resample) read
    unavailable: dict[str, str] = field(default_factory=dict)  # meaning of "off" -> why it was not measured

    @property
    def drop(self) -> float:
        return self.loss_first - self.loss_second


@dataclass(frozen=True)
class HeadCensus:
    """One census of one model. `scores[name]` is (L, H); `uniform[name]` what uniform attention over the allowed
    keys scores on the same positions; `low`/`high` the bootstrap interval over inputs; `control[name]` the same
    score on the control (`control_kind`; `no_control[name]` says why a score has none); `offset[relation]` the
    best fixed-offset baseline (offset, accuracy) of a dependency relation."""
    model: str
    seed: int
    n_layers: int
    n_heads: int
    causal: bool
    scores: dict[str, torch.Tensor]
    uniform: dict[str, float]
    low: dict[str, torch.Tensor]
    high: dict[str, torch.Tensor]
    n_inputs: dict[str, int]
    inputs: dict[str, str]
    offset: dict[str, tuple[int, float]]
    control: dict[str, torch.Tensor]
    control_kind: str
    no_control: dict[str, str]
    in_context: InContext | None
    texts: tuple[str, ...]
    text_values: dict[str, torch.Tensor]  # (N, L, H): the per-text values of the text scores, for top examples
    lexicon_source: str
    mass: dict[str, torch.Tensor] = field(default_factory=dict)  # relations: mean attention on the gold word (L, H)
    skipped: int = 0  # generated inputs dropped because the tokenizer did not read each word as one token
    notes: tuple[str, ...] = field(default_factory=tuple)
    # (L, H) int: the offset (key - query; -3 = 3 back) each head's fixed-offset score is read at: where its mean
    # attention over the random inputs is highest (`measures.offset_table`); None for a census made without it
    offset_at: torch.Tensor | None = None
    # score -> the one naming rule's decision and the paired intervals it rests on (`analysis.census.name_heads`)
    naming: dict[str, Naming] = field(default_factory=dict)
    control_of: dict[str, str] = field(default_factory=dict)  # score -> what its control is, in words

    @property
    def names(self) -> list[str]:
        return list(self.scores)

    @staticmethod
    def lower_is_notable(name: str) -> bool:
        """Scores whose notable heads are the lowest, as their registered measure says (distance, entropy)."""
        return measures.get(name).lower_is_notable

    def baseline(self, name: str) -> float:
        """The stronger of the uniform and fixed-offset baselines: what a head must beat."""
        base = self.uniform[name]
        if name in self.offset and not math.isnan(self.offset[name][1]):
            base = max(base, self.offset[name][1])
        return base

    def top(self, name: str, n: int = 3) -> list[tuple[Head, float]]:
        """The n heads with the highest score (the lowest for `lower_is_notable` scores; NaN last); ties (a
        relation's accuracy saturates at 1) go to the head with more attention on the gold word, then to the lower
        (layer, head)."""
        s = -self.scores[name] if self.lower_is_notable(name) else self.scores[name]
        tie = self.mass.get(name, torch.zeros_like(s))
        heads = [(l, h) for l in range(self.n_layers) for h in range(self.n_heads)]

        def key(lh):
            v = float(s[lh])
            return (math.isnan(v), 0.0 if math.isnan(v) else -v, -float(tie[lh]), lh)

        return [(lh, float(self.scores[name][lh])) for lh in sorted(heads, key=key)[:n]]

    def named(self, name: str) -> list[tuple[Head, float]]:
        """The heads this census names for score `name`, best first, by the one naming rule
        (`analysis.census.name_heads`): each beats its control by `CONTROL_SHARE` of the way to the score's notable
        end (at the low end of the paired interval), is not clearly below the leader (`TIE_TOLERANCE`), and no head
        that beats its control and scores higher is left out. Heads the data cannot separate are all named (a tie);
        [] when none beats its control."""
        naming = self.naming.get(name)
        if naming is None:
            return []
        return [(lh, float(self.scores[name][lh])) for lh in naming.named]

    def evidence(self, name: str, head: Head) -> str:
        """What a head's name for `name` rests on, in words: its value and interval, the paired difference from its
        control, the inputs, and where it ties, the paired gap to the leader."""
        n = self.naming.get(name)
        v, lo, hi = (float(t[head]) for t in (self.scores[name], self.low[name], self.high[name]))
        words = f"{v:.2f} [{lo:.2f}–{hi:.2f}] over {self.n_inputs[name]} inputs"
        if n is None:
            return words
        # the control itself is said once per score (`control_of`, the Census view's column), not per head
        words += f", {float(n.against_low[head]):.2f} or more above its control (needs {float(n.margin[head]):.2f})"
        if n.leader is not None and head != n.leader and head in n.named:
            words += (f", {float(n.gap_low[head]):.3f}–{float(n.gap_high[head]):.3f} below {head_name(n.leader)} "
                      f"(under {TIE_TOLERANCE}: a tie)")
        return words

    def head_label(self, name: str, head: Head) -> str:
        """A score's label for one head: the fixed offset says which ("fixed offset, 3 back")."""
        label = measures.score_label(name)
        if measures.of_score(name)[0].name == "offset" and self.offset_at is not None:
            label += ", " + measures.offset_words(int(self.offset_at[head]))
        return label

    def naming_words(self, name: str) -> str:
        """One sentence: which heads the census names for `name`, ties said as ties with their intervals ("L0 H1 and
        L0 H2 tie on fixed offset: ..."), or that none beats its control."""
        named = self.named(name)
        label = measures.score_label(name)
        if not named:
            return (f"No head is named for {label}: none beats its control "
                    f"({self.control_of.get(name, self.control_kind)}) by {CONTROL_SHARE:.0%} of the way to the "
                    "score's notable end, at the low end of the paired interval.")
        if len(named) == 1:
            (lh, v), = named
            return f"{head_name(lh)} is named for {self.head_label(name, lh)} ({self.evidence(name, lh)})."
        heads = ", ".join(head_name(lh) for lh, _ in named[:-1]) + f" and {head_name(named[-1][0])}"
        each = "; ".join(f"{head_name(lh)} {self.head_label(name, lh).removeprefix(label + ', ')} "
                         f"{self.evidence(name, lh)}" for lh, _ in named)
        return (f"{heads} tie on {label}: the data cannot tell them apart, so each is named ({each}).")

    def rows(self) -> list[dict]:
        """One row per head with every score, its interval and its control: for the CSV download."""
        out = []
        for layer in range(self.n_layers):
            for head in range(self.n_heads):
                row: dict = {"layer": layer, "head": head}
                for name, s in self.scores.items():
                    row[name] = _num(s[layer, head])
                    row[f"{name} low"] = _num(self.low[name][layer, head])
                    row[f"{name} high"] = _num(self.high[name][layer, head])
                    if name in self.control:
                        row[f"{name} control"] = _num(self.control[name][layer, head])
                    if name in self.mass:
                        row[f"{name} mass"] = _num(self.mass[name][layer, head])
                    if name == "offset" and self.offset_at is not None:
                        row["offset at"] = int(self.offset_at[layer, head])
                out.append(row)
        return out

    def to_json(self) -> dict:
        """Everything measured, as plain lists and numbers."""
        lists = lambda d: {k: [[_num(v) for v in row] for row in t.tolist()] for k, t in d.items()}  # noqa: E731
        ic = None
        if self.in_context is not None:
            c = self.in_context
            ic = {"loss_first": c.loss_first, "loss_second": c.loss_second, "drop": c.drop, "k": c.k,
                  "top_heads": [list(h) for h in c.top_heads], "partners": [list(h) for h in c.partners],
                  "other_sets": [[list(h) for h in s] for s in c.other_sets], "lost": c.lost,
                  "others_lost": {k: list(v) for k, v in c.others_lost.items()}, "n_inputs": c.n_inputs,
                  "mean_over": c.mean_over, "unavailable": c.unavailable}
        return {"model": self.model, "seed": self.seed, "layers": self.n_layers, "heads": self.n_heads,
                "causal": self.causal, "scores": lists(self.scores), "uniform": self.uniform, "low": lists(self.low),
                "high": lists(self.high), "mass": lists(self.mass), "n_inputs": self.n_inputs, "inputs": self.inputs,
                "offset": {k: list(v) for k, v in self.offset.items()}, "control_kind": self.control_kind,
                "control": lists(self.control), "no_control": self.no_control, "in_context": ic,
                "texts": list(self.texts), "lexicon": self.lexicon_source, "skipped": self.skipped,
                "notes": list(self.notes), "measures": {n: _words(n) for n in self.scores},
                "offset_at": None if self.offset_at is None else self.offset_at.tolist(),
                "named": {n: [list(lh) for lh, _ in self.named(n)] for n in self.scores},
                "naming": {n: _naming_json(k) for n, k in self.naming.items()}, "control_of": self.control_of,
                "rule": {"control_share": CONTROL_SHARE, "tie_tolerance": TIE_TOLERANCE}}


def _naming_json(k: Naming) -> dict:
    """The paired intervals a score's names rest on (`Naming`), as plain lists."""
    rows = lambda t: [[_num(v) for v in row] for row in t.tolist()]  # noqa: E731
    return {"leader": None if k.leader is None else list(k.leader), "named": [list(h) for h in k.named],
            "inputs": k.n, "against_control_low": rows(k.against_low), "against_control_high": rows(k.against_high),
            "margin": rows(k.margin),
            "below_leader_low": rows(k.gap_low), "below_leader_high": rows(k.gap_high)}


def _words(score: str) -> dict:
    """What an export says about one score: its registered measure's words (`mha_viz.measures`)."""
    m, inputs = measures.of_score(score)
    return {"measure": m.name, "label": measures.score_label(score), "meaning": m.meaning,
            "inputs": measures.INPUTS[inputs], "citation": m.citation, "notable": m.notable}


def _num(x) -> float | None:
    v = float(x)
    return None if math.isnan(v) else round(v, 4)


def role_scores(causal: bool) -> dict[str, str]:
    """The score each role of `seed_roles` is read from; a causal model's subject is read where the verb is
    predicted (it cannot see the verb itself)."""
    return {"previous token": "previous", "induction": "induction",
            "subject": "pre-verb→subject" if causal else "verb→subject"}


def holders(made: HeadCensus, score: str) -> list[tuple[Head, float]]:
    """The heads that hold a pattern in the census `made`: the heads it names for `score` (`HeadCensus.named`, the
    one naming rule), best first; [] when none beats its control."""
    return made.named(score)


def seed_roles(censuses: list[HeadCensus]) -> dict:
    """Which head holds the previous-token, induction and subject patterns in each census (e.g. one per training
    seed of the same recipe), worded from the measurement: {"scores": role -> score name, "rows": one table row per
    census, "sentences": what is true across them (a role on the same or another head index, split over heads, a
    head holding two roles)}."""
    if not censuses:
        return {"scores": {}, "rows": [], "sentences": []}
    # A census without a role's inputs (a program's vocabulary has no template sentences for the subject) has no row
    # for it: only the roles every census measured.
    scores = {role: s for role, s in role_scores(censuses[0].causal).items() if all(s in c.scores for c in censuses)}
    rows, sentences, leaders = [], [], {role: [] for role in scores}
    for c in censuses:
        row = {"model": c.model}
        held: dict[Head, list[str]] = {}
        for role, score in scores.items():
            hs = holders(c, score)
            leaders[role].append(hs[0][0] if hs else None)
            row[role] = ", ".join(f"{head_name(lh)} {v:.2f}" for lh, v in hs) or "none beats its control"
            for lh, _ in hs:
                held.setdefault(lh, []).append(role)
            if len(hs) > 1:
                sentences.append(f"{c.model}: the {role} pattern is split over {len(hs)} heads "
                                 f"({head_names(lh for lh, _ in hs)}) that the census cannot tell apart.")
        for lh, roles in held.items():
            if len(roles) > 1:
                sentences.append(f"{c.model}: {head_name(lh)} holds more than one pattern ({', '.join(roles)}).")
        rows.append(row)
    for role, heads in leaders.items():
        found = [(c.model, h) for c, h in zip(censuses, heads) if h is not None]
        if not found:
            sentences.insert(0, f"No census has a head holding the {role} pattern.")
            continue
        where = "; ".join(f"{m}: {head_name(h)}" for m, h in found)
        same = len({h for _, h in found}) == 1
        same_layer = len({h[0] for _, h in found}) == 1
        sentences.insert(0, f"The {role} pattern leads on "
                         + ("the same head index in every census" if same else
                            "another head index from census to census" + (", always in the same layer" if same_layer
                                                                          else ""))
                         + f" ({where})" + ("" if len(found) == len(censuses) else
                                             f"; {len(censuses) - len(found)} census(es) have no such head") + ".")
    return {"scores": scores, "rows": rows, "sentences": sentences}
