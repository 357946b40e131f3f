"""A census set against the heads a program wrote (`Model.written_heads`): for every written head, the census score
that names it, and whether that is the role the program gave it. This is the one place where the census's names can
be checked against ground truth no one here chose.

A head is *named* by a score when the census names it there (`HeadCensus.named`, the one naming rule every view
reads: it beats its control, is not clearly below the leader, and no higher head is left out), with the score's
notable end high (a share of attention). Of several such scores: `previous` over `offset` when the head's offset is
1 back (the same key, the more specific name), else the one it beats its baseline on most. Where no score names it,
the census says "no measured pattern explains it" rather than forcing the nearest name. Nothing here depends on the
order heads are listed in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mha_viz import measures
from mha_viz.names import head_name

NO_PATTERN = "no measured pattern explains it"


@dataclass(frozen=True)
class WrittenVsMeasured:
    head: tuple[int, int]
    written: str  # the census pattern the program wrote ("" where none of the census's patterns is it)
    text: str  # the program's expression for the head
    named: str  # the census score that names the head, or "" (NO_PATTERN)
    value: float  # its value on that score (the best score's where none names it)
    best: str  # the score with the head's largest excess over its baseline (what is nearest, named or not)
    runner_up: tuple[tuple[int, int], float] | None  # the best other head on the named (or best) score
    label: str = ""  # the named score's label for this head ("fixed offset, 3 back"); "" where none names it
    tied: tuple[tuple[int, int], ...] = ()  # the other heads named for the same score (their intervals overlap)

    @property
    def agrees(self) -> bool:
        """The census names the head with the role the program wrote, or names nothing where the program wrote a
        role no census score measures."""
        return self.named == self.written

    @property
    def outcome(self) -> str:
        """"as written" (named with the role the program wrote), "rightly none" (the program wrote no census role
        and the census names none), "missed" (a written role the census does not name), or "wrong" (named for a
        role the program did not write)."""
        if self.named:
            return "as written" if self.named == self.written else "wrong"
        return "rightly none" if not self.written else "missed"

    def words(self) -> str:
        if not self.named:
            return f"{NO_PATTERN} (nearest: {measures.score_label(self.best)} {self.value:.2f})"
        if self.tied:
            return (f"{self.label} {self.value:.2f}, tied with "
                    f"{', '.join(head_name(h) for h in self.tied)} (both named)")
        return f"{self.label} {self.value:.2f}, ranked first"


def _scores(census) -> list[str]:
    """The census scores that may name a head: shares of attention where high is notable, read on the census's own
    input set (a " (text)" copy says nothing more about a written head)."""
    return [name for name in census.names if not name.endswith(measures.TEXT_SUFFIX)
            and measures.get(name).is_share and not measures.get(name).lower_is_notable]


def written_vs_census(written: dict, census) -> list[WrittenVsMeasured]:
    """One row per written head (`written`: (layer, head) -> an object with `pattern` and `text`, as
    `Model.written_heads` gives), in head order."""
    names = _scores(census)
    named_by = {name: {h for h, _ in census.named(name)} for name in names}
    rows = []
    for head in sorted(written):
        w = written[head]
        named, value, best, best_excess, named_excess = "", float("nan"), "", -math.inf, -math.inf
        for name in names:
            v = float(census.scores[name][head])
            if math.isnan(v):
                continue
            excess = v - census.baseline(name)
            if excess > best_excess:
                best, best_excess, value = name, excess, v
            # Of the scores that would name it, the most specific: the largest excess over its baseline (a
            # previous-token head scores as high on nearby, whose two keys a uniform head also fills more of).
            if head in named_by[name] and excess > named_excess:
                named, named_excess = name, excess
        if named == "offset" and head in named_by.get("previous", ()) and _offset_of(census, head) == -1:
            named = "previous"  # a head whose best offset is 1 back is the previous-token head
        if named:
            value = float(census.scores[named][head])
        score = named or best
        others = sorted(((h, float(census.scores[score][h])) for h in _heads(census) if h != head),
                        key=lambda hv: (math.isnan(hv[1]), -hv[1] if not math.isnan(hv[1]) else 0.0, hv[0])
                        ) if score else []
        runner = others[0] if others else None
        tied = tuple(sorted(named_by[named] - {head})) if named else ()
        label = census.head_label(named, head) if named else ""
        rows.append(WrittenVsMeasured(head, w.pattern, w.text, named, value, best, runner, label, tied))
    return rows


def _heads(census) -> list[tuple[int, int]]:
    return [(layer, h) for layer in range(census.n_layers) for h in range(census.n_heads)]


def _offset_of(census, head) -> int | None:
    at = getattr(census, "offset_at", None)
    return None if at is None else int(at[head])


def summary(rows: list[WrittenVsMeasured]) -> str:
    """One sentence from the rows, each outcome counted apart (`WrittenVsMeasured.outcome`): how many written heads
    the census named as written, how many it rightly named nothing, how many it missed and how many it named
    wrongly."""
    count = {o: [r for r in rows if r.outcome == o] for o in ("as written", "rightly none", "missed", "wrong")}
    parts = [f"names {len(count['as written'])} of {len(rows)} written heads as their program wrote them"]
    if count["as written"]:
        parts[0] += f" ({'; '.join(f'{head_name(r.head)} {r.label} {r.value:.2f}' for r in count['as written'])})"
    parts.append(f"rightly names nothing for {len(count['rightly none'])} (no role it measures was written there)")
    missed = ": " + ", ".join(head_name(r.head) for r in count["missed"]) if count["missed"] else ""
    parts.append(f"misses {len(count['missed'])} (a role it measures was written, and it names none{missed})")
    parts.append(f"names {len(count['wrong'])} for a role their program did not write"
                 + (f" ({'; '.join(f'{head_name(r.head)} {r.label}' for r in count['wrong'])})"
                    if count["wrong"] else ""))
    return "The census " + "; ".join(parts[:-1]) + "; and " + parts[-1] + "."
