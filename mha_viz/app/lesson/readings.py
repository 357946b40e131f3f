"""The Lesson's measurements and the words it reads them with: the lesson models' runs, insides, importance and
census (kept in the run cache beside the model), one input's readings, the heads the census names for each role and
what the step's input says of them, and the glossary of technical words.

A head's role (previous token, induction, first token) comes from the model's census (`head_census`: every head
measured on many inputs made for each question; `HeadCensus.named`, ties named together), the same in every step, so
within a model one role has one head, or a stated tie. A step's own input is one input: its readings say how many
queries they averaged over, show no number below `measures.SUPPORT_FLOOR`, and say in words when this input puts
another head above the census's. Words the model does not know (`run.unknown`) are counted next to the input and
marked on the figures' axes."""
from __future__ import annotations

from dataclasses import dataclass

import streamlit as st
import torch

from mha_viz import measures
from mha_viz.analysis.agreement import agreement, census_heads
from mha_viz.analysis.census_run import HeadCensus, head_census
from mha_viz.analysis.importance import head_importance
from mha_viz.analysis.scores import run_scores, run_support, top_badges
from mha_viz.app.cache import census_control, census_made, runs, side_model, side_result
from mha_viz.app.common import head_name, md_safe, visible
from mha_viz.app.names import UNKNOWN_MARK
from mha_viz.app.names import unknown_words as unknown_count
from mha_viz.contract import AttentionRun, Head, HeadInside
from mha_viz.models.examples import census_texts

WRITTEN = "written-three-heads"  # three heads side by side in one layer, each written by one line of a program
TEXT_PARALLEL = "the keys to the old cabinet are on the table , so anna gave the keys to ben ."
TEXT_REPEAT = "anna berg went to the market . tom lind saw anna berg at the park ."
TEXT_PREDICT = "anna berg went to the market . tom lind saw anna"  # the next word can be copied from earlier
TEXT_WRITTEN = "b b a b b a"
PATTERNED = 0.5  # a head whose strongest pattern is this far above uniform attention counts as strongly patterned
ROLES = ("previous", "induction", "first")  # the roles the lesson names heads for: nearby context, a repeat, a place
FLOOR = measures.SUPPORT_FLOOR


# -- measurements, shared by the sessions through the run cache -------------------------------------------------

def meaning(measure: str) -> str:
    """A measure's meaning inside a sentence: lower-case first letter, no closing full stop."""
    meaning = measures.get(measure).meaning
    return meaning[0].lower() + meaning[1:].rstrip(".")

def lesson_run(name: str, text: str, off: frozenset[Head] = frozenset()) -> AttentionRun:
    """`name` (a lesson model, loaded beside the page's own) on `text` with `off` zeroed."""
    key = ("lesson-run", text, tuple(sorted(off)))
    return side_result(key, name, lambda: side_model(name).run(text, ablate=off))


def lesson_inside(name: str, text: str, layer: int, off: frozenset[Head] = frozenset()) -> list[HeadInside]:
    key = ("lesson-inside", text, layer, tuple(sorted(off)))
    return side_result(key, name, lambda: side_model(name).inside_layer(text, layer, off))


def lesson_importance(name: str, text: str) -> torch.Tensor:
    """(L, H): each head switched off alone, the change of the last position's prediction (KL) or, for an encoder,
    1 - cosine of the sentence's mean output (`head_importance`)."""
    return side_result(("lesson-importance", text), name, lambda: head_importance(side_model(name), text))


def lesson_census(name: str) -> HeadCensus:
    """The census of lesson model `name`, as the Census view makes it by default (its example texts, input seed 0,
    the untrained twin as control): where every role a step names comes from. The Census view's own when it made
    one; else made here and kept in the run cache beside the model, not in the Census view's few slots (step 6
    reads every seed's, and would push out a census a visitor waited minutes for)."""
    made = census_made(name)
    if made is not None:
        return made

    def make() -> HeadCensus:
        model = side_model(name)
        return head_census(model, texts=census_texts(model), control=census_control(model))
    if runs().peek(("lesson-census", name)) is not None:
        return side_result("lesson-census", name, make)
    # The first in a server process also builds the census's inputs: seconds, where a step is otherwise instant.
    with st.spinner(f"Measuring every head of {name} on the census's inputs (once per model)..."):
        return side_result("lesson-census", name, make)


@dataclass(frozen=True)
class Reading:
    """Every registered one-input measure of one run: scores (L, H) each, what uniform attention scores, and how
    many queries each averaged over (the same for every head)."""
    scores: dict[str, torch.Tensor]
    base: dict[str, float]
    support: dict[str, int]


def read(name: str, run: AttentionRun) -> Reading:
    causal = side_model(name).info.causal
    scores, base = run_scores(run, causal)
    return Reading(scores, base, run_support(run, causal))


def argmax_head(scores: torch.Tensor) -> Head:
    """The head with the highest score of an (L, H) map (NaN never wins)."""
    flat = scores.nan_to_num(float("-inf")).flatten()
    layer, head = divmod(int(flat.argmax()), scores.shape[1])
    return layer, head


def strongest_pattern(r: Reading, head: Head, names: tuple[str, ...] = measures.BADGES) -> tuple[str, float] | None:
    """A head's measure furthest above uniform attention (of the registered badges `names`, read over `FLOOR`
    queries or more), or None when none is 0.1 above."""
    found = [(m, v) for m, v in top_badges(r.scores, r.base, head[0], head[1], n=len(measures.BADGES),
                                           support=r.support) if m in names]
    return found[0] if found else None


def pattern_excess(r: Reading, names: tuple[str, ...] = measures.BADGES) -> torch.Tensor:
    """(L, H): how far each head's strongest measure of `names` (registered badges) lies above its uniform
    baseline, of the measures read over `FLOOR` queries or more (-inf where none is)."""
    kept = [m for m in names if r.support[m] >= FLOOR]
    if not kept:
        return torch.full_like(r.scores[measures.BADGES[0]], float("-inf"))
    excess = torch.stack([r.scores[m] - r.base[m] for m in kept])  # (M, L, H)
    return excess.nan_to_num(float("-inf")).amax(0)  # (L, H)


def pct(value: float) -> str:
    return f"{value:.0%}"


def tok(token: str) -> str:
    """A token inside the step's Markdown, as typed."""
    return f"“{md_safe(visible(token))}”"


def listed(items: list[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def heads_words(heads: list[Head]) -> str:
    return listed([head_name(h) for h in heads])


# -- roles: the census names them, a step's input is checked against it ------------------------------------------
def role_heads(name: str, role: str) -> list[Head]:
    """The heads the census of `name` names for `role`, in (layer, head) order: one, a tie, or none."""
    return census_heads(lesson_census(name), role)


def census_role(name: str, role: str, verb: bool = False) -> str:
    """"the census's induction head L1 H3"; a tie, "the census's induction heads L1 H0 and L1 H2, tied"; with
    `verb`, "... head is L1 H3" / "... heads are ..."; none named, "no head: the census names none for induction"."""
    heads, label = role_heads(name, role), measures.get(role).label
    if not heads:
        return f"no head: the census names none for {label}"
    if len(heads) == 1:
        return f"the census's {label} head {'is ' if verb else ''}{head_name(heads[0])}"
    return f"the census's {label} heads {'are ' if verb else ''}{heads_words(heads)}, tied"


def queries(n: int) -> str:
    return measures.queries_words(n)


def too_few(role: str, n: int) -> str:
    return f"{measures.get(role).label}: {measures.TOO_FEW} ({queries(n)}; a reading needs at least {FLOOR})"


def role_reading(name: str, role: str, r: Reading) -> str:
    """One sentence: the census's heads for `role` and what this input says of them (`analysis.agreement`, as
    Inside a head says it): it agrees, another head scores higher, or too few queries to check. Where the census
    names no head, the input's best head, read over `FLOOR` queries or more."""
    if role_heads(name, role):
        return agreement(lesson_census(name), role, r.scores, r.support)
    label, n = measures.get(role).label, r.support[role]
    if n < FLOOR:
        return f"The census names no {label} head; {too_few(role, n)}."
    best = argmax_head(r.scores[role])
    return (f"The census names no {label} head; on this input {head_name(best)} scores highest "
            f"({float(r.scores[role][best]):.2f} over {queries(n)}; uniform attention {r.base[role]:.2f}).")


def reading_line(name: str, r: Reading, head: Head) -> str:
    """One head's strongest pattern on this input with its support; for a role, whose it is in the census."""
    top = strongest_pattern(r, head)
    if top is None:
        few = [m for m, _ in top_badges(r.scores, r.base, head[0], head[1], n=2) if r.support[m] < FLOOR]
        return (f"{head_name(head)}: no measured pattern 10 points above uniform attention over {FLOOR} queries or "
                "more" + "".join(f"; {too_few(m, r.support[m])}" for m in few))
    m, value = top
    line = (f"{head_name(head)}: {measures.get(m).label} {pct(value)} over {queries(r.support[m])} (uniform attention: "
            f"{pct(r.base[m])})")
    if m in ROLES:
        line += f"; {census_role(name, m, verb=True)}" + ("" if head in role_heads(name, m) else
                                                           ": this head reads it on this input only")
    return line


def layer_previous(name: str, r: Reading, layer: int) -> tuple[Head, str]:
    """The previous-token head of `layer` steps 1 and 2 name, and a clause saying where it comes from: the census's
    (the first in (layer, head) order of a tie), or the layer's highest reading over `FLOOR` queries or more."""
    named = [h for h in role_heads(name, "previous") if h[0] == layer]
    if named:
        return named[0], census_role(name, "previous", verb=True)
    label, n = measures.get("previous").label, r.support["previous"]
    head = (layer, argmax_head(r.scores["previous"][layer:layer + 1])[1])
    if n < FLOOR:
        return head, (f"the census names no {label} head in layer {layer}; {too_few('previous', n)}: the step "
                      f"takes {head_name(head)}")
    return head, (f"the census names no {label} head in layer {layer}; on this input {head_name(head)} scores "
                  f"highest of the layer ({float(r.scores['previous'][head]):.2f} over {queries(n)})")


def unknown_words(name: str, text: str) -> str:
    """"9 of 14 words are unknown to tiny ..." for a step's input (the positions the tokenizer added left out), or
    "" when the model knows every word."""
    run = lesson_run(name, text)
    added, unknown = set(run.special), set(run.unknown)
    content = [i for i in range(len(run.tokens)) if i not in added]
    missing = [i for i in content if i in unknown]
    if not missing:
        return ""
    words = list(dict.fromkeys(run.tokens[i] for i in missing))  # each word once, in order
    shown = ", ".join(tok(w) for w in words[:8]) + (", …" if len(words) > 8 else "")
    return (f"{unknown_count(len(missing), len(content), side_model(name).info.title)}: {shown}. The model reads "
            f"each as its one unknown token, so the figures mark them “{UNKNOWN_MARK.strip()}”, and no measure "
            "counts one as a repeat of another.")


# -- plain words: each technical word gets one sentence where a step first uses it -----------------------------
GLOSSARY = {
    "token": "A token is one piece of the input as the model reads it: a word or a mark, numbered from 0.",
    "special token": "A special token is one the tokenizer adds, not a word of the input (a start marker such as "
                     "<bos> at position 0); unknown words are read as one shared unknown token.",
    "query": "The query is the token doing the reading: each row of an attention map is one query.",
    "key": "A key is a token a query may read: each column of an attention map is one key.",
    "value": "A value is what a key hands on: the head passes on each key's value in proportion to its weight.",
    "weight": "A weight is how much of a query's attention goes to one key, 0 to 1; a query's weights sum to 1.",
    "head": "A head is one attention operation of a layer, with its own query, key and value matrices; "
            "“L1 H3” is head 3 of layer 1, both counted from 0.",
    "layer": "A layer is one stage of the model; its heads run side by side, and the next layer reads their sum.",
    "softmax": "The softmax turns a query's row of scores into weights: positive, summing to 1, the largest score "
               "getting the most.",
    "causal mask": "The causal mask forbids a query to read a later token (grey in the figures): the model predicts "
                   "the next word, so it may not look ahead.",
    "census": "The census is this app's measurement of every head on many inputs made for one question each; it "
              "names a head for a pattern when the head beats a control (the same head where the pattern is made "
              "impossible) and is not clearly below the best head.",
    "previous token": "A previous token head puts its weight on the token just before the query.",
    "induction": "An induction head, at a word seen before, attends to the word that followed it the first time: a "
                 "guess at what comes next (Olsson et al. 2022).",
    "first token": "A first token head puts its weight on position 0, often a resting place when nothing else fits.",
    "fixed offset": "A fixed offset is always the word k positions back: the baseline a grammatical relation must "
                    "beat, so a head is not credited with grammar for reading a distance.",
    "queries": "“Over 18 queries”: a reading of one input averages over the query positions where the pattern can "
               "be measured; fewer than the floor give no number.",
    "uniform attention": "Uniform attention spreads a query's weight evenly over every key it may read: the score a "
                         "head with no preference at all would get, the baseline every score is read against.",
    "seed": "A seed fixes the random start of training: the same recipe from another seed gives another model.",
    "KL": "KL (Kullback–Leibler divergence, in nats) says how far the model's next-word probabilities moved: 0 means "
          "unchanged; about 0.1 is a small shift; 1 or more means the prediction changed a lot.",
    "nats": "Nats and bits are units of information: natural log or log base 2 (1 nat = 1.44 bits).",
    "bits": "Bits and nats are units of information: log base 2 or natural log (1 bit = 0.69 nats).",
    "Jensen-Shannon": "Jensen-Shannon divergence (in bits) compares two heads' attention: 0 when they attend alike, "
                      "1 when they never read the same keys.",
    "total variation": "Total variation between two rows of attention weights is the share of weight that sits in "
                       "different places: 0 means the same row, 1 means no key in common.",
    "concatenation": "The concatenation lays the heads' outputs for one token side by side (here one under "
                     "another): one vector of all their numbers.",
    "output projection": "The output projection W_O is the matrix that maps the concatenation back to the model's "
                         "size; each head's rows of it are its slice.",
    "contribution": "A head's contribution is what it adds to the layer's output for one token: its output vector "
                    "after its slice of the output projection.",
    "along the total": "A share along the total is how much of a head's contribution points the same way as the "
                       "layer's whole output (negative: it points against it); the shares plus the bias's add up to "
                       "the total's length.",
}


# Every measure a step may read a head by ("nearby", "itself", "special tokens", ...), in the registry's own words.
for _m in measures.BADGES:
    _label = measures.get(_m).label
    GLOSSARY.setdefault(_label, f"{_label[0].upper()}{_label[1:]}: {meaning(_m)}.")

FIRST_SCREEN = ("token", "query", "key", "weight", "head", "layer")  # said on step 1's first screen, before any use


def plain(text: str) -> str | None:
    """The one-sentence explanations of the technical words `text` uses, for a help icon beside it; None if none."""
    lower = text.lower()
    used = [GLOSSARY[w] for w in GLOSSARY if w not in FIRST_SCREEN
            and (w in text if w == "KL" else w.lower() in lower)]
    return "\n\n".join(used) or None

