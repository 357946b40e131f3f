"""A written model and a learned twin of it (the same task, the same layers x heads) set side by side, head by head:
whether the learned model took the roles the program wrote, and where. Every entry is a measurement:

    accuracy      each model's share of scored positions whose output equals the program's, on the same inputs. The
                  program's output is the written model's with every head on (its torch run is the compiled program:
                  the written model scores 1 by construction). A position is scored where the program has a value.
    distance      for each written head, the mean Jensen-Shannon divergence (bits; `distance.js_divergence`, Lin
                  1991, as Clark et al. 2019 compare heads) between its attention row and each learned head's, over
                  the queries where the program has a value (where the output is read: elsewhere a written head
                  falls back to BOS, which the twin was never asked to copy), every input: (L, H) per written head.
                  A learned head under `MATCH_AT` bits attends like it; the best, and every such head within
                  `MATCH_TIE` bits of it (a role shared by heads that attend alike shows as several). Where none
                  is under `MATCH_AT`, no learned head attends like it, and the nearest is named as the nearest. Its
                  best match, and every learned head within `MATCH_TIE` bits of it (a role shared by heads that
                  attend alike shows as several).
    names         what the census names each head for (`HeadCensus.named`, its own rule: ties included), on the
                  census's own input sets.
    off           each model's accuracy with the written head switched off (zero), and with its learned
                  counterpart(s) switched off together; and the learned model's accuracy with each single head off,
                  so a role carried by one head, or by heads that are not the closest match, is measured.
    path          circuits: the written path (a head whose Select compares, or whose Aggregate reads, what an
                  earlier written head wrote: K-, Q- or V-composition), and whether the learned twin's top
                  composition pair of that kind joins the two heads' counterparts (Elhage et al. 2021 scores;
                  `circuits.composition_scores`, norms ignored).

The models are passed in (the analysis layer loads none); `mha_viz.compare_twins` picks held-out inputs and the
census. Axis letters: L layers, H heads, Q queries, K keys.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from mha_viz import measures
from mha_viz.analysis.circuits import circuits
from mha_viz.analysis.distance import js_divergence
from mha_viz.contract import InputError, Model
from mha_viz.names import head_name

Head = tuple[int, int]
MATCH_TIE = 0.05  # bits: learned heads this close to the best match are listed with it
# bits: a learned head this close attends like the written one. Two different written heads lie 0.5 bits or more
# apart on these programs' inputs, so a match is under half that; beyond it only the nearest head is named, as such.
MATCH_AT = 0.25
DISTANCE = ("mean Jensen-Shannon divergence (bits) between attention rows, over the queries where the program has a "
            "value, and inputs")
BROKEN_AT = 0.1  # an accuracy drop of this much or more says a switch-off "breaks" the output
MODE_WORDS = {"k": "K-composition (its keys read the earlier head's output)",
              "q": "Q-composition (its queries read the earlier head's output)",
              "v": "V-composition (its values read the earlier head's output)"}


@dataclass(frozen=True)
class TwinHead:
    """One written head and its learned counterpart(s)."""
    written: Head
    role: str  # the census pattern the program wrote ("" where no census measure describes its selection)
    text: str  # the program's expression for the head
    selects: str  # which keys a query selects, in words
    distance: torch.Tensor  # (L, H) mean JS (bits) from this head to each learned head
    matches: tuple[tuple[Head, float], ...]  # the best-matching learned head(s), best first (the nearest alone
    # where none is under MATCH_AT)
    written_names: tuple[str, ...]  # census scores that name the written head
    learned_names: dict  # learned head -> census scores that name it (each matched head)
    written_off: float  # the written model's accuracy with this head off
    learned_off: float  # the learned model's accuracy with its match(es) off together

    @property
    def matched(self) -> bool:
        """Whether some learned head attends like this one (within MATCH_AT bits)."""
        return self.matches[0][1] < MATCH_AT


@dataclass(frozen=True)
class TwinComparison:
    written: str
    learned: str
    n_texts: int
    positions: int  # scored positions (where the program has a value)
    accuracy_written: float
    accuracy_learned: float
    heads: tuple[TwinHead, ...]
    single_off: torch.Tensor  # (L, H) the learned model's accuracy with each head off alone
    path: tuple[Head, Head, str] | None  # the written path (earlier, later, mode); None: the program composes none
    learned_top: tuple[Head, Head, float] | None  # the learned twin's top pair of the path's mode ("k" if none)
    path_mode: str
    path_baseline: float  # p99 of random matrices' composition in that mode (Circuits.baseline)
    ablation: str = "zero"
    distance_words: str = DISTANCE
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def path_matches(self) -> bool | None:
        """Whether the learned twin's top pair joins the written path's counterparts; None where there is no
        written path between heads."""
        if self.path is None or self.learned_top is None:
            return None
        first, second = ({h for h, _ in t.matches} for t in (self._head(self.path[0]), self._head(self.path[1])))
        return self.learned_top[0] in first and self.learned_top[1] in second

    def _unclean(self) -> list[str]:
        return _unclean_reasons(self)

    def _head(self, head: Head) -> TwinHead:
        return next(t for t in self.heads if t.written == head)

    @property
    def perfect(self) -> bool:
        """Every written head matched by one learned head at distance 0, equal accuracies, equal breakage when each
        is switched off, and the written path (where there is one) the learned top pair: what a model compared with
        itself gives."""
        return (self.accuracy_written == self.accuracy_learned
                and all(len(t.matches) == 1 and t.matches[0][1] < 1e-6 and t.matches[0][0] == t.written
                        and abs(t.written_off - t.learned_off) < 1e-9 for t in self.heads)
                and self.path_matches in (None, True))

    @property
    def clean(self) -> bool:
        """As clean as the written model, as measured: every written head has one learned counterpart (under
        MATCH_AT bits), switching it off breaks the twin (a drop of BROKEN_AT or more), no other head's loss alone
        does, and where the program composes two heads the twin's top pair is their counterparts."""
        counterparts = {t.matches[0][0] for t in self.heads}
        n_l, n_h = self.single_off.shape
        needed = {(a, b) for a in range(n_l) for b in range(n_h)
                  if self.accuracy_learned - float(self.single_off[a, b]) >= BROKEN_AT}
        return (all(t.matched and len(t.matches) == 1 for t in self.heads)
                and len(counterparts) == len(self.heads) and needed == counterparts
                and self.path_matches is not False)

    def summary(self) -> dict:
        """One row for a table of twins: its held-out accuracy, the learned head(s) that took each written role
        (or none, with the nearest), whether its top composition pair is the written path, and whether it is
        `clean`."""
        row = {"twin": self.learned, "held-out accuracy": f"{100 * self.accuracy_learned:.1f}%"}
        for t in self.heads:
            heads = ", ".join(head_name(h) for h, _ in t.matches)
            role = measures.score_label(t.role) if t.role else "no census role"
            row[f"{head_name(t.written)} ({role})"] = (
                heads if t.matched else f"none (nearest {heads}, {t.matches[0][1]:.2f} bits)")
        row["written path"] = {True: "yes", False: "no", None: "no path written"}[self.path_matches]
        row["as clean as written"] = "yes" if self.clean else "no"
        return row

    def rows(self) -> list[dict]:
        """The side-by-side table, one row per written head: what the program wrote, its census names, the
        learned head(s) matching it and their census names, and what switching each side off did."""
        out = []
        for t in self.heads:
            learned = "; ".join(f"{head_name(h)} ({d:.3f} bits)" for h, d in t.matches)
            if not t.matched:
                learned = f"none under {MATCH_AT} bits (nearest: {learned})"
            names = "; ".join(f"{head_name(h)}: {', '.join(t.learned_names.get(h, ())) or 'none'}"
                              for h, _ in t.matches)
            out.append({
                "written head": head_name(t.written),
                "the program wrote": t.text,
                "written role": measures.score_label(t.role) if t.role else "none the census measures",
                "census names the written head": ", ".join(t.written_names) or "none",
                "best-matching learned head(s)": learned,
                "census names the learned head(s)": names,
                "written head off: accuracy": f"{self.accuracy_written:.3f} → {t.written_off:.3f}",
                "learned head(s) off: accuracy": f"{self.accuracy_learned:.3f} → {t.learned_off:.3f}",
            })
        return out

    def sentences(self) -> list[str]:
        """What the measurements say, in words (each sentence reads a number above)."""
        n_l, n_h = self.single_off.shape
        lines = [f"On {self.n_texts} held-out inputs ({self.positions} positions where the program has a value), "
                 f"{self.written} gets {100 * self.accuracy_written:.1f}% right and {self.learned} "
                 f"{100 * self.accuracy_learned:.1f}%."]
        for t in self.heads:
            best, d = t.matches[0]
            shared = len(t.matches) > 1
            where = (f"{', '.join(head_name(h) for h, _ in t.matches)} attend like it (within {MATCH_TIE} bits of "
                     f"the best, {d:.3f} bits)" if shared else f"{head_name(best)} attends most like it ({d:.3f} bits)")
            if not t.matched:
                where = (f"no learned head attends like it (the nearest, {head_name(best)}, is {d:.3f} bits away; "
                         f"a match is under {MATCH_AT})")
            w_drop = self.accuracy_written - t.written_off
            l_drop = self.accuracy_learned - t.learned_off
            line = (f"Written {head_name(t.written)} ({measures.score_label(t.role) if t.role else 'no census role'}): "
                    f"{where}. Switched off, the written head takes the written model from "
                    f"{100 * self.accuracy_written:.1f}% to {100 * t.written_off:.1f}%; "
                    + ("its learned counterpart" + ("s take" if shared else " takes") if t.matched
                       else "the nearest learned head takes") + " the twin from "
                    f"{100 * self.accuracy_learned:.1f}% to {100 * t.learned_off:.1f}%.")
            if w_drop >= BROKEN_AT and l_drop < BROKEN_AT:
                line += " The twin does not need that head the way the program needs the written one."
            lines.append(line)
        drops = [(float(self.accuracy_learned - self.single_off[lh]), lh)
                 for lh in ((a, b) for a in range(n_l) for b in range(n_h))]
        needed = sorted((lh for drop, lh in drops if drop >= BROKEN_AT))
        lines.append("In the twin, switching off one head alone breaks the output (a drop of "
                     f"{100 * BROKEN_AT:.0f} points or more) for " + (", ".join(
                         f"{head_name(lh)} (to {100 * float(self.single_off[lh]):.1f}%)" for lh in needed)
                         if needed else "no head: every role survives losing any one head") + ".")
        if self.path is None:
            top = (f"; the twin's top {self.path_mode.upper()}-composition pair is {head_name(self.learned_top[0])} → "
                   f"{head_name(self.learned_top[1])} ({self.learned_top[2]:.2f}, random p99 "
                   f"{self.path_baseline:.2f})" if self.learned_top else "")
            lines.append("The program composes no two heads directly (its heads read what MLPs wrote)" + top + ".")
        else:
            a, b, mode = self.path
            got = self.learned_top
            verdict = {True: "is the written path", False: "is not the written path",
                       None: "cannot be compared"}[self.path_matches]
            lines.append(f"The written path is {head_name(a)} → {head_name(b)}, {MODE_WORDS[mode]}. The twin's top "
                         f"{mode.upper()}-composition pair, "
                         + (f"{head_name(got[0])} → {head_name(got[1])} ({got[2]:.2f}, random p99 "
                            f"{self.path_baseline:.2f}), " if got else "none, ") + f"{verdict}.")
        if self.perfect:
            lines.append("Head for head, the twin is as clean as the written model: each written head has one "
                         "counterpart that attends the same, and switching it off breaks the same.")
        elif self.clean:
            lines.append("On this seed the twin is as clean as the written model, as measured: each written head has "
                         f"one learned counterpart (under {MATCH_AT} bits), switching it off breaks the twin and no "
                         "other head's loss alone does"
                         + (", and the twin composes them as the program does" if self.path_matches else "")
                         + ". Switched off, though, its counterparts leave the twin at "
                         + ", ".join(f"{100 * t.learned_off:.1f}%" for t in self.heads)
                         + " where the written heads leave the program at "
                         + ", ".join(f"{100 * t.written_off:.1f}%" for t in self.heads) + ".")
        else:
            lines.append("The twin is not as clean as the written model: "
                         + "; ".join(self._unclean()) + ".")
        return lines


def _unclean_reasons(c: TwinComparison) -> list[str]:
    out = []
    unmatched = [head_name(t.written) for t in c.heads if not t.matched]
    shared = [head_name(t.written) for t in c.heads if t.matched and len(t.matches) > 1]
    if unmatched:
        out.append(f"no learned head attends like {', '.join(unmatched)}")
    if shared:
        out.append(f"several learned heads attend alike for {', '.join(shared)}")
    counterparts = {t.matches[0][0] for t in c.heads if t.matched}
    n_l, n_h = c.single_off.shape
    needed = {(a, b) for a in range(n_l) for b in range(n_h)
              if c.accuracy_learned - float(c.single_off[a, b]) >= BROKEN_AT}
    if needed - counterparts:
        extra = sorted(needed - counterparts)
        out.append(f"losing {' or '.join(head_name(h) for h in extra)} alone breaks the twin, though no written "
                   f"head attends like {'it' if len(extra) == 1 else 'them'}")
    spare = sorted(counterparts - needed)
    if spare:
        out.append(f"the twin survives losing {', '.join(head_name(h) for h in spare)}, a counterpart of a written "
                   "head")
    if c.path_matches is False:
        out.append("its top composition pair is not the written path")
    return out or ["two written heads share one counterpart"]


def _scores(census) -> list[str]:
    """The census scores that name a head's role: shares of attention, notable when high, on their own inputs."""
    return [n for n in census.names if not n.endswith(measures.TEXT_SUFFIX)
            and measures.get(n).is_share and not measures.get(n).lower_is_notable]


def census_names(census, head: Head) -> tuple[str, ...]:
    """The labels of the scores for which `census` names `head` (`HeadCensus.named`: ties included), in the
    registry's order; () where it names the head for none."""
    return tuple(census.head_label(n, head) for n in _scores(census) if any(h == head for h, _ in census.named(n)))


def written_path(written_heads: dict) -> tuple[Head, Head, str] | None:
    """The first pair of written heads (earlier, later) where the later one's Select compares (keys: "k", queries:
    "q") or its Aggregate reads ("v") what the earlier one wrote; None where no written head reads another's."""
    for a in sorted(written_heads):
        for b in sorted(written_heads):
            wa, wb = written_heads[a], written_heads[b]
            if a[0] >= b[0]:
                continue
            for mode, sop in (("k", wb.keys), ("q", wb.queries), ("v", wb.reads)):
                if sop and sop == wa.expr:
                    return a, b, mode
    return None


def _accuracy(outputs: list[list], labels: list[list]) -> tuple[float, int]:
    right = total = 0
    for out, lab in zip(outputs, labels):
        for o, y in zip(out[1:], lab[1:]):
            if y is not None:
                total += 1
                right += o == y
    return (right / total if total else math.nan), total


def _outputs(model: Model, texts: list[str], off: frozenset, ablation: str) -> list[list]:
    return [model.program_output(model.run(t, ablate=off, ablation=ablation)) for t in texts]


def check_twins(written: Model, learned: Model, text: str) -> None:
    """An InputError saying the fix unless `written` has written heads and `learned` the same layers x heads and a
    program output (on `text`): what `compare_twins` needs, checked before anything is measured."""
    if not written.written_heads():
        raise InputError(f"{written.name} has no written heads: compare a model compiled from a program "
                         "(written-induction, written-three-heads) with its learned twin")
    if (written.n_layers, written.n_heads) != (learned.n_layers, learned.n_heads):
        raise InputError(f"{written.name} has {written.n_layers} x {written.n_heads} heads and {learned.name} "
                         f"{learned.n_layers} x {learned.n_heads}: a twin has the written model's layers x heads")
    if learned.program_output(learned.run(text)) is None:
        raise InputError(f"{learned.name} reads out no program output; compare a learned twin (learned-induction, "
                         "learned-three-heads) or a written model")


def compare_twins(written: Model, learned: Model, texts: list[str], census_written, census_learned,
                  ablation: str = "zero") -> TwinComparison:
    """`written` (a model with `written_heads`) beside `learned` (a model of the same task: same tokens, layers x
    heads; its own `program_output`) on `texts` (held-out inputs), with both models' censuses. See the module
    docstring for every entry."""
    check_twins(written, learned, texts[0])
    heads = written.written_heads()
    texts = list(texts)
    n_l, n_h = learned.n_layers, learned.n_heads
    labels, dist, weight = [], {h: torch.zeros(n_l, n_h) for h in heads}, 0
    learned_on = []
    for text in texts:
        run_w, run_l = written.run(text), learned.run(text)
        if run_w.tokens != run_l.tokens:
            raise InputError(f"{written.name} and {learned.name} read {text!r} as different tokens; a twin reads "
                             "its written model's vocabulary")
        labels.append(written.program_output(run_w))
        learned_on.append(learned.program_output(run_l))
        scored = [t for t, y in enumerate(labels[-1]) if t > 0 and y is not None]  # the queries the output is read at
        if not scored:
            continue
        for h in heads:
            row = run_w.attentions[h[0], h[1], scored]  # (S, K)
            js = js_divergence(row.expand(n_l, n_h, -1, -1), run_l.attentions[:, :, scored])  # (L, H, S)
            dist[h] += js.sum(-1)
        weight += len(scored)
    dist = {h: d / max(1, weight) for h, d in dist.items()}
    acc_w, positions = _accuracy(labels, labels)
    acc_l, _ = _accuracy(learned_on, labels)
    single = torch.full((n_l, n_h), math.nan, dtype=torch.float64)  # (L, H)
    for lh in ((a, b) for a in range(n_l) for b in range(n_h)):
        single[lh] = _accuracy(_outputs(learned, texts, frozenset({lh}), ablation), labels)[0]
    rows = []
    for h in sorted(heads):
        d = dist[h]
        best = float(d.min())
        matches = sorted(((divmod(i, n_h), float(v)) for i, v in enumerate(d.flatten().tolist())
                          if v <= best + MATCH_TIE), key=lambda hv: (hv[1], hv[0]))
        if best >= MATCH_AT:
            matches = matches[:1]  # no match: the nearest alone, named as the nearest
        matched = frozenset(lh for lh, _ in matches)
        w_off = _accuracy(_outputs(written, texts, frozenset({h}), ablation), labels)[0]
        l_off = (float(single[matches[0][0]]) if len(matched) == 1
                 else _accuracy(_outputs(learned, texts, matched, ablation), labels)[0])
        w = heads[h]
        rows.append(TwinHead(written=h, role=w.pattern, text=w.text, selects=w.selects, distance=d,
                             matches=tuple(matches), written_names=census_names(census_written, h),
                             learned_names={lh: census_names(census_learned, lh) for lh in matched},
                             written_off=w_off, learned_off=l_off))
    path = written_path(heads)
    mode = path[2] if path else "k"
    circ = circuits(learned)
    top = circ.top_pairs(mode, 1)
    return TwinComparison(written=written.name, learned=learned.name, n_texts=len(texts), positions=positions,
                          accuracy_written=acc_w, accuracy_learned=acc_l, heads=tuple(rows), single_off=single,
                          path=path, learned_top=top[0] if top else None, path_mode=mode,
                          path_baseline=circ.baseline[mode].p99, ablation=ablation)
