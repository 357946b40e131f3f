"""`head_census(model)`: what each head of any model does in general, measured on inputs made for each question.

It drives the model through the contract only (`run_many`, `run_batch_keep`, `head_means`, `token_id`, `lexicon`)
and scores with the pure functions of `analysis.census`; the inputs come from `analysis.census_inputs` with the
model's own single-token words (`Model.lexicon`). Memory stays bounded: `run_many` reads the inputs in padded
batches and every input is reduced to per-head numbers as soon as its batch is done; only those are kept (per input,
for the bootstrap and the top examples), never an attention matrix.

Scores (each an (L, H) tensor in `HeadCensus.scores`, with its uniform baseline, bootstrap interval and control):
    previous, nearby, distance       random word sequences (no grammar: only position tells where the previous is)
    the same with " (text)"          natural text (`texts`, default the model's example sentences)
    first, special, punctuation,     natural text: sinks, special positions and spread
    entropy
    induction, duplicate             repeated random word sequences (Olsson et al. 2022)
    the relations of census_inputs   template sentences, Clark et al. 2019's most-attended-word accuracy, against
                                     the best fixed offset as well as uniform attention
and for causal LMs `HeadCensus.in_context`: the loss on a repeated sequence's second copy against its first, and how
much of that drop is lost with the top-k induction heads switched off, under every meaning of "off" the model can
give (`Ablation.kinds()`), against k other heads.

The records it returns (`HeadCensus`, `InContext`, `CensusConfig`) and what is read from a census once made
(`holders`, `seed_roles`) are `analysis.census_result`.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Callable

import torch

from mha_viz import measures
from mha_viz.analysis import census
from mha_viz.analysis import census_inputs as input_sets
from mha_viz.analysis.census_result import CensusConfig, HeadCensus, InContext
from mha_viz.contract import Ablation, Head, InputError, Model, check_text, reference_texts
from mha_viz.names import head_names

Progress = Callable[[float, str], None]
MASS = "mass:"  # internal prefix: a relation's mean attention on the gold word, kept beside its accuracy
AT = "at:"  # internal prefix: per input, the offset each head's fixed-offset score was read at
MAX_TEXTS = 200  # the most natural texts one census takes
MAX_TEXT_CHARS = 2000  # per text
TEMPLATE_TOKENS = 16  # the longest template sentence (12 words) with room for the tokenizer's special tokens

# -- reading the inputs ----------------------------------------------------------------------------------------------
MAIN = ("random", "texts", "repeated", "templates")  # the input sets every census reads, in this order
DESTROYED = ("unrepeated", "shuffled")  # the inputs with the relation destroyed, read beside every control


@dataclass(frozen=True)
class _InputScores:
    """What one input leaves once its attention is scored: per score its per-head value and uniform baseline, per
    relation the fixed-offset accuracies, and where its words are (`word_pos`, () when they did not line up one
    token per word: then nothing is scored)."""
    values: dict[str, tuple[torch.Tensor, float]]  # name -> ((L, H), uniform)
    offsets: dict[str, dict[int, float]]
    word_pos: tuple[int, ...]
    token_ids: tuple[int, ...]


def _scores(kind: str, item: input_sets.WordInput | None, att: torch.Tensor, pos: tuple[int, ...],
            positions: measures.Positions) -> tuple[dict, dict]:
    """One input's scores by the kind of input it is -> (name -> ((L, H), uniform), relation -> offset accuracies).
    att (L, H, T, T); pos: each word's token position; positions: the input's token facts. Every value is a
    registered measure's (`mha_viz.measures`)."""
    if kind == "random":
        values = census.input_scores(att, positions, kind)
        values[AT + "offset"] = (measures.offset_table(att.float(), positions), float("nan"))  # (D, L, H)
        return values, {}
    if kind == "texts":
        return census.input_scores(att, positions, kind), {}
    pairs = {name: tuple((pos[q], pos[k]) for q, k in arcs) for name, arcs in item.pairs.items()}
    if kind in ("repeated", "unrepeated"):
        # The generator knows which word repeats which (the unrepeated control keeps the positions, not the words).
        repeats = tuple((k, q) for q, k in pairs["duplicate"])
        return census.input_scores(att, dataclasses.replace(positions, repeats=repeats), "repeated"), {}
    values, offsets = {}, {}
    for rel, ps in pairs.items():  # templates, shuffled: Clark et al.'s accuracy per relation
        gold = dataclasses.replace(positions, gold=ps)
        values[rel] = measures.REGISTRY[rel].measure(att, gold)
        if kind == "templates":
            values[MASS + rel] = measures.REGISTRY["gold"].measure(att, gold)
            offsets[rel] = census.offset_accuracy(ps)
    return values, offsets


def _read(model: Model, sets: dict, kinds: tuple[str, ...], cfg: CensusConfig,
          tick: Callable[[int, str], None], what: str) -> dict[str, list[_InputScores]]:
    """Every input of the sets `kinds` run through `model.run_many` (padded batches) and reduced at once to its
    scores -> per kind, one `_InputScores` per input in the set's order. A generated input counts only where each word
    is one token, the same token wherever it stands (checked against `token_id`)."""
    # (kind, the generated input or None for a natural text, its text), in the order of `kinds` and of each set
    jobs = [(kind, None, item) if kind == "texts" else (kind, item, item.text) for kind in kinds for item in sets[kind]]
    piece_ids: dict[str, int | None] = {}

    def piece_id(word: str) -> int | None:
        if word not in piece_ids:
            try:
                piece_ids[word] = model.token_id(" " + word)
            except InputError:
                piece_ids[word] = None
        return piece_ids[word]

    def reduce(i: int, run) -> _InputScores:
        kind, item, _ = jobs[i]
        special = tuple(sorted(set(run.special)))
        content = tuple(p not in special for p in range(len(run.tokens)))
        pos = tuple(p for p, c in enumerate(content) if c)
        if item is not None:  # a generated input: word i is the i-th non-special token, the same token each time
            ids = run.token_ids
            lined_up = len(pos) == len(item.words) and not run.truncated and (not ids or all(
                ids[p] == piece_id(w) for p, w in zip(pos[1:], item.words[1:])))
            if not lined_up:
                return _InputScores({}, {}, (), tuple(ids))
        positions = measures.Positions.of(len(run.tokens), model.causal, run.tokens,
                                          run.token_ids if item is None else None, special, unknown=run.unknown)
        values, offsets = _scores(kind, item, run.attentions, pos, positions)
        return _InputScores(values, offsets, pos, tuple(run.token_ids))

    done = [0]

    def progress(n: int) -> None:
        tick(n - done[0], what)
        done[0] = n

    reads = model.run_many([text for _, _, text in jobs], reduce, progress=progress)
    out: dict[str, list[_InputScores]] = {kind: [] for kind in kinds}
    for (kind, _, _), r in zip(jobs, reads):
        out[kind].append(r)
    return out


class _ScoresByName:
    """Per-input values and uniform baselines of every score, in the order the inputs were generated, and per
    relation the fixed-offset accuracies of each input."""

    def __init__(self, reads: dict[str, list[_InputScores]]):
        self.values: dict[str, list[torch.Tensor]] = {}
        self.uniform: dict[str, list[float]] = {}
        self.offsets: dict[str, list[dict[int, float]]] = {}
        for kind_reads in reads.values():
            for r in kind_reads:
                for name, (value, uni) in r.values.items():
                    self.values.setdefault(name, []).append(value)
                    self.uniform.setdefault(name, []).append(uni)
                for rel, acc in r.offsets.items():
                    self.offsets.setdefault(rel, []).append(acc)


def _aligned(reads: list[_InputScores], name: str, shape: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """One score over one input set, input by input in the set's order -> ((N, L, H) values, (N,) uniform), NaN
    where the input was not scored (its words did not line up, or it has nothing to measure): so a control read on
    a paired set (the unrepeated twin of repeated input i, the same input on the untrained twin) lines up by index."""
    nan = torch.full(shape, float("nan"))
    values = [r.values[name][0].float() if name in r.values else nan for r in reads]
    uniform = [r.values[name][1] if name in r.values else float("nan") for r in reads]
    if not values:
        return torch.empty(0, *shape), torch.empty(0)
    return torch.stack(values), torch.tensor(uniform, dtype=torch.float32)  # (N, L, H), (N,)


# The control that destroys each input set's relation, read on the same positions: repeated sequences against their
# unrepeated twins, template sentences against the same words shuffled. Position scores have no relation to take out.
DESTROYS = {"repeated": "unrepeated", "templates": "shuffled"}
DESTROYED_WORDS = {
    "repeated": "the relation destroyed: the same inputs with nothing repeated (other words at the same positions)",
    "templates": "the relation destroyed: the same sentences with their words shuffled (the gold positions kept)",
}


def _controls(model: Model, reads: dict, twin_reads: dict | None, twin_name: str, use_control: bool
              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, str]]:
    """Every census score's per-input values and its paired control -> (values, control, words): the relation
    destroyed where the input set has one (`DESTROYS`), else the same inputs on the untrained twin where one is
    given, else uniform attention on the same input (what the score's baseline is). control=None: uniform for all."""
    shape = (model.n_layers, model.n_heads)
    values, control, words = {}, {}, {}
    for name, _, kind in measures.census_scores():
        if kind not in reads:
            continue
        v, uniform = _aligned(reads[kind], name, shape)
        if not len(v) or bool(torch.isnan(v).all()):
            continue
        values[name] = v
        destroyed = DESTROYS.get(kind)
        if use_control and destroyed in reads and len(reads[destroyed]):
            control[name], _ = _aligned(reads[destroyed], name, shape)
            words[name] = DESTROYED_WORDS[kind]
        elif use_control and twin_reads is not None:
            control[name], _ = _aligned(twin_reads[kind], name, shape)
            words[name] = f"the same inputs on the untrained twin ({twin_name})"
        else:
            control[name] = uniform[:, None, None].expand_as(v).clone()  # (N, L, H)
            words[name] = "uniform attention over the same inputs' allowed keys"
    return values, control, words


EXTEND_SEED = 101  # a census of seed s reads its extra inputs from seed s + 101 * round: another draw


def _name_all(values: dict[str, torch.Tensor], control: dict[str, torch.Tensor], seed: int, cfg: CensusConfig,
              kinds: tuple[str, ...] | None = None, named: dict | None = None) -> dict[str, census.Naming]:
    """Every score's naming; given `kinds` and the earlier `named`, only the scores read on those input sets are
    named again (the others' inputs did not change)."""
    where = {name: inputs for name, _, inputs in measures.census_scores()}
    out = dict(named or {})
    out.update({n: census.name_heads(values[n], control[n], measures.get(n).lower_is_notable, seed, cfg.n_boot)
                for n in values if kinds is None or where[n] in kinds})
    return out


def _undecided(naming: dict[str, census.Naming]) -> tuple[str, ...]:
    """The generated input sets (not the natural texts, which are given) of the scores whose leader ties a head that
    more inputs may yet separate: its paired gap to the leader reaches below the tolerance and above it."""
    where = {name: inputs for name, _, inputs in measures.census_scores()}
    kinds = {where[n] for n, k in naming.items() if k.leader is not None and where[n] != "texts"
             and any(float(k.gap_high[h]) > census.TIE_TOLERANCE for h in k.named if h != k.leader)}
    return tuple(k for k in MAIN if k in kinds)


def _skipped(reads: dict[str, list[_InputScores]]) -> int:
    """Generated inputs dropped because the tokenizer did not read each word as one token."""
    return sum(1 for kind in ("random", "repeated", "templates") for r in reads.get(kind, ()) if not r.word_pos)


def _loss_positions(word_pos: tuple[int, ...], m: int) -> tuple[list[int], list[int]]:
    """The positions whose logits predict the first copy's words 1..m-1 and the second copy's m+1..2m-1 (each
    copy's first word cannot be predicted from the text): one before each word."""
    return [word_pos[w] - 1 for w in range(1, m)], [word_pos[w] - 1 for w in range(m + 1, 2 * m)]


def _losses(logits: torch.Tensor, ids: torch.Tensor, first: list[int], second: list[int]
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean next-token loss (nats) at the `first` and at the `second` positions: logits (B, P, V) at the positions
    first + second, ids (T,) the input's tokens -> ((B,), (B,)), one per batch row."""
    logp = torch.log_softmax(logits.float(), -1)  # (B, P, V)
    targets = ids[torch.tensor(first + second) + 1]  # (P,): the token each position predicts
    nll = -logp.gather(-1, targets.expand(logp.shape[0], -1)[..., None])[..., 0]  # (B, P)
    return nll[:, : len(first)].mean(-1), nll[:, len(first):].mean(-1)  # (B,), (B,)


def _leaders(scores: torch.Tensor, uniform: float, cap: int) -> list[Head]:
    """The heads with at least half the leading head's excess over uniform, best first, at most `cap`."""
    ranked = sorted(((l, h) for l in range(scores.shape[0]) for h in range(scores.shape[1])),
                    key=lambda lh: (-float(scores[lh]), lh))
    lead = float(scores[ranked[0]]) - uniform
    if not lead > 0:
        return ranked[:1]
    return [lh for lh in ranked if float(scores[lh]) - uniform >= 0.5 * lead][:cap]


def _in_context(model: Model, repeats: list, induction: torch.Tensor, uniform: float, previous: torch.Tensor,
                previous_uniform: float, cfg: CensusConfig, reference: list[str], seed: int,
                tick: Callable[[int, str], None]) -> InContext | None:
    if not repeats:
        return None
    L, H = model.n_layers, model.n_heads
    cap = max(4, (L * H) // 20)
    # As many heads as hold the pattern (at least half the leader's excess over uniform): switching off fewer leaves
    # a twin head to carry it (the tiny model's induction is split over three or four heads of layer 1).
    top = tuple(_leaders(induction, uniform, cap)) if cfg.k is None else tuple(
        sorted(((l, h) for l in range(L) for h in range(H)), key=lambda lh: (-float(induction[lh]), lh))[:cfg.k])
    k = len(top)
    # The previous-token heads an induction head reads from (Olsson et al. 2022's two-head circuit) are switched off
    # on their own, and left out of the "other" sets: a random set holding one would cost as much as the induction
    # heads, and say nothing about them.
    partners = tuple(lh for lh in _leaders(previous, previous_uniform, cap) if lh not in top)
    rest = [(l, h) for l in range(L) for h in range(H) if (l, h) not in top and (l, h) not in partners]
    rng = random.Random(seed)
    others = tuple(tuple(sorted(rng.sample(rest, min(k, len(rest))))) for _ in range(cfg.n_other_sets))
    configs = [()] + [top] + ([partners] if partners else []) + list(others)
    # Every meaning of "off" the model can give (mean and resample take outputs from the natural texts).
    offs, missing = [], {}
    for off in Ablation.kinds():
        try:
            off.replacement(model, reference, repeats[0][0].text)
            offs.append(off)
        except InputError as err:
            missing[off.key] = str(err)
    mean_over = f"every position of {len(reference)} natural texts, each run with all heads on"
    n = len(configs)
    keep = torch.ones(1 + len(offs) * (n - 1), L, H)  # (B, L, H): row 0 all on, then each set under each meaning
    for j in range(len(offs)):
        for i, heads in enumerate(configs[1:]):
            for lh in heads:
                keep[1 + j * (n - 1) + i][lh] = 0.0
    firsts, seconds = [], []
    for item, read in repeats:
        first, second = _loss_positions(read.word_pos, len(item.words) // 2)
        reps = [off.replacement(model, reference, item.text) for off in offs]  # (L, H, T or 1, dh) or None each
        replace = None
        if any(r is not None for r in reps):
            width, dh = max(r.shape[2] for r in reps if r is not None), next(r for r in reps if r is not None).shape[-1]
            replace = torch.zeros(keep.shape[0], L, H, width, dh)  # (B, L, H, T or 1, dh)
            for j, rep in enumerate(reps):
                for i, heads in enumerate(configs[1:]):
                    for lh in heads if rep is not None else ():
                        replace[1 + j * (n - 1) + i][lh] = rep[lh]  # (T or 1, dh)
        _, logits = model.run_batch_keep(item.text, keep, replace, positions=first + second)  # (B, P, V)
        if logits is None:
            return None  # no LM head: no loss to measure
        f, s = _losses(logits, torch.tensor(read.token_ids), first, second)  # (B,) each
        firsts.append(f)
        seconds.append(s)
        tick(1, "in-context loss, heads switched off")
    first, second = torch.stack(firsts).mean(0), torch.stack(seconds).mean(0)  # (B,)
    drops = first - second  # (B,)
    drop = float(drops[0])
    first_other = 2 if partners else 1
    prev_name = "previous-token heads " + head_names(partners)
    lost, others_lost = {}, {}
    for j, off in enumerate(offs):
        values = [census.drop_lost(drop, float(drops[1 + j * (n - 1) + i])) for i in range(n - 1)]
        lost[f"top {k} induction, {off.key}"] = values[0]
        if partners:
            lost[f"{prev_name}, {off.key}"] = values[1]
        rest_values = values[first_other:]
        lost[f"other {k}, {off.key}"] = sum(rest_values) / len(rest_values)
        others_lost[off.key] = tuple(rest_values)
    return InContext(float(first[0]), float(second[0]), k, top, partners, others, lost, others_lost, len(repeats),
                     mean_over, missing)


def _check_texts(texts) -> tuple[str, ...]:
    if isinstance(texts, str):
        texts = [t for t in texts.splitlines() if t.strip()]
    texts = [check_text(t) for t in texts]
    if not texts:
        raise InputError("texts is empty: give at least one text, one per line")
    if len(texts) > MAX_TEXTS:
        raise InputError(f"{len(texts)} texts is more than the census takes ({MAX_TEXTS}); keep the first "
                         f"{MAX_TEXTS} or split them over several runs")
    long = [i for i, t in enumerate(texts) if len(t) > MAX_TEXT_CHARS]
    if long:
        raise InputError(f"text {long[0] + 1} has {len(texts[long[0]])} characters; the census takes at most "
                         f"{MAX_TEXT_CHARS} per text: split it into shorter lines")
    return tuple(texts)


def default_texts(model: Model) -> tuple[str, ...]:
    """The natural text a census reads when none is given: the model's example sentences (`Model.examples`). A model
    without any raises InputError; `mha_viz.head_census` and the Census view hand in the shipped sentences then
    (`mha_viz.models.examples.census_texts`): this layer loads nothing itself."""
    try:
        return reference_texts(model, None)  # the same sentences mean and resample ablation read by default
    except InputError:
        raise InputError(f"{model.name} has no example sentences for the census's text scores: pass texts=[...] "
                         "(one natural text per item), or call mha_viz.head_census, which uses the shipped ones"
                         ) from None


def census_inputs(model: Model, seed: int = 0, cfg: CensusConfig | None = None, texts=None) -> dict:
    """The census's input sets for `model`, from its own single-token words and `seed` (same seed, same inputs)."""
    cfg = cfg or CensusConfig.for_model(model)
    lex = model.lexicon()
    base = 7919 * (seed + 1)  # seeds the tiny trainer (1234) and probes (2024-2028) never use
    hi = min(cfg.repeated_lengths[1], (model.info.max_tokens - 2) // 2)
    # At least two periods where the model's length allows: with one period m every induction target is m - 1 back,
    # and a head reading that fixed offset would score as an induction head (a written 3-back head did, at m = 4).
    # Periods from 3: at m = 2 the induction target is the previous token.
    lo = min(cfg.repeated_lengths[0], max(3, hi - 2), hi)
    repeated = input_sets.repeated_sequences(lex.words, cfg.n_repeated, (lo, hi), base + 2)
    # Template sentences need a grammar's words (a compiled program's vocabulary has none) and room for the longest.
    grammar = len(lex.nouns) >= 3 and bool(lex.verbs) and bool(lex.determiner) and \
        model.info.max_tokens >= TEMPLATE_TOKENS
    templates = input_sets.template_sentences(lex.nouns, lex.adjectives, lex.prepositions, lex.verbs,
                                              lex.determiner, lex.object_determiner, lex.period, cfg.n_templates,
                                              base + 3, model.causal) if grammar else []
    return {
        "random": input_sets.random_sequences(lex.words, cfg.n_random,
                                              min(cfg.random_length, model.info.max_tokens - 2), base + 1),
        "repeated": repeated,
        "templates": templates,
        "unrepeated": input_sets.unrepeated_twins(repeated, lex.words, base + 4),
        "shuffled": input_sets.shuffled(templates, base + 5),
        "texts": _check_texts(texts) if texts is not None else default_texts(model),
        "lexicon": lex.source,
    }


def head_census(model: Model, texts=None, seed: int = 0, config: CensusConfig | None = None,
                control: Model | str | None = "destroyed", progress: Progress | None = None) -> HeadCensus:
    """Measure every head of `model` on inputs made for each question (see the module docstring).

    texts: natural texts for the text scores and the top examples (a list, or one string with one text per line;
    default `default_texts(model)`); seed: which inputs (the same seed gives the same inputs and intervals);
    control: a Model to compare with (the same architecture: the untrained twin, or re-initialised), "destroyed"
    (inputs with the relation destroyed) or None. "auto" is resolved by the caller, which may load models:
    `mha_viz.head_census` and the Census view pass the untrained twin where one ships (`census_control`).
    progress(fraction, message) is called after every batch of inputs read.
    """
    if isinstance(control, str) and control != "destroyed":
        raise InputError(f"control must be a Model, 'destroyed' or None; got {control!r}: for 'auto' call "
                         "mha_viz.head_census, or pass mha_viz.models.registry.census_control(model)")
    cfg = config or CensusConfig.for_model(model)
    sets = census_inputs(model, seed, cfg.first_read(), texts)
    twin = control if isinstance(control, Model) else None
    if twin is not None and (twin.n_layers, twin.n_heads) != (model.n_layers, model.n_heads):
        raise InputError(f"the control {twin.name} has {twin.n_layers} x {twin.n_heads} heads, {model.name} has "
                         f"{model.n_layers} x {model.n_heads}: compare the same architecture")
    n_main = sum(len(sets[k]) for k in MAIN)
    # Every control reads the inputs with the relation destroyed; a twin reads the main inputs as well.
    n_control = (n_main if twin is not None else 0) + (sum(len(sets[k]) for k in DESTROYED) if control else 0)
    n_loss = min(cfg.n_loss, len(sets["repeated"])) if model.causal else 0
    # The most it may read: every round of more inputs too. Progress never goes back; it ends at 1 when done.
    step = cfg.one_round()
    n_round = step.n_random + step.n_repeated + step.n_templates
    n_round += (n_round if twin is not None else 0) + ((step.n_repeated + step.n_templates) if control else 0)
    total, done = n_main + n_control + n_loss + cfg.rounds * n_round, [0]

    def tick(n: int, what: str) -> None:
        done[0] += n
        if progress is not None:
            progress(min(1.0, done[0] / total), f"{model.name}: {what} ({done[0]} of at most {total} inputs read)")

    # One `run_many` over the model's inputs, the destroyed-relation control's with them (so they share batches):
    # the relations' controls, with an untrained twin too (it keeps what a fixed offset scores on them).
    reads = _read(model, sets, MAIN + (DESTROYED if control else ()), cfg, tick,
                  "generated inputs and natural text" + (", and the control's inputs" if control else ""))
    if not any(r.values.get("induction") for r in reads["repeated"]):
        raise InputError(f"{model.name}: none of the generated inputs was read one token per word, so the census "
                         "has nothing to score; the tokenizer splits or merges the census's words")
    twin_reads = None
    if twin is not None:
        twin_reads = _read(twin, sets, MAIN, cfg, tick, f"control: the same inputs on {twin.name}")
    per_input, paired, control_of = _controls(model, reads, twin_reads, twin.name if twin else "", bool(control))
    naming = _name_all(per_input, paired, seed, cfg)
    for extra in range(1, cfg.rounds + 1):
        # Where the leader ties a head the data may yet separate, read more inputs of that kind (a fresh draw), up to
        # the config's counts.
        kinds = _undecided(naming)
        if not kinds:
            break
        more = census_inputs(model, seed + EXTEND_SEED * extra, cfg.one_round(), sets["texts"])
        add = kinds + (tuple(DESTROYS[k] for k in kinds if k in DESTROYS) if control else ())
        new = _read(model, more, add, cfg, tick, "more inputs, to separate heads that tie: " + ", ".join(kinds))
        twin_new = _read(twin, more, kinds, cfg, tick, f"the same on {twin.name}") if twin is not None else {}
        for k in add:
            sets[k], reads[k] = list(sets[k]) + list(more[k]), reads[k] + new[k]
            if k in twin_new:
                twin_reads[k] = twin_reads[k] + twin_new[k]
        per_input, paired, control_of = _controls(model, reads, twin_reads, twin.name if twin else "", bool(control))
        naming = _name_all(per_input, paired, seed, cfg, kinds, naming)
    acc = _ScoresByName({k: reads[k] for k in MAIN})
    mass = {n[len(MASS):]: census.summarise(v, acc.uniform[n], seed, 1).mean for n, v in acc.values.items()
            if n.startswith(MASS)}
    at = acc.values.pop(AT + "offset", [])
    # (L, H): each head's offset is the one its mean attention over the random inputs is highest at (nearest first)
    offset_at = (torch.tensor(measures.offsets(model.causal))[torch.stack(at).mean(0).argmax(0)] if at
                 else None)  # from (N, D, L, H)
    pooled = {name: census.summarise(v, acc.uniform[name], seed, cfg.n_boot) for name, v in acc.values.items()
              if not name.startswith(MASS)}
    control_values = {n: c.nanmean(0) for n, c in paired.items()}  # (L, H) each
    kinds = sorted(set(control_of.values()))
    control_kind = "; ".join(f"{k} ({', '.join(n for n in control_of if control_of[n] == k)})" for k in kinds) \
        if len(kinds) > 1 else (kinds[0] if kinds else "none")
    no_control = {} if control else {n: "no control asked for: each head is set against uniform attention"
                                     for n in pooled}
    # The in-context check reads the first n_loss repeated inputs that lined up one token per word.
    repeats = [(item, r) for item, r in zip(sets["repeated"], reads["repeated"]) if r.word_pos][:n_loss]
    ic = None
    if model.causal and repeats:
        ic = _in_context(model, repeats, pooled["induction"].mean, pooled["induction"].uniform,
                         pooled["previous"].mean, pooled["previous"].uniform, cfg, list(sets["texts"]), seed + 1, tick)
    inputs_words = {
        "random": f"{len(sets['random'])} random sequences of {len(sets['random'][0].words)} words",
        "texts": f"{len(sets['texts'])} natural texts",
        "repeated": f"{len(sets['repeated'])} random sequences said twice",
        "templates": f"{len(sets['templates'])} template sentences",
    }
    where = {name: inputs for name, _, inputs in measures.census_scores()}
    text_names = [name for name, inputs in where.items() if inputs == "texts"]
    if progress is not None:
        progress(1.0, f"{model.name}: done ({done[0]} inputs read)")
    return HeadCensus(
        model=model.name, seed=seed, n_layers=model.n_layers, n_heads=model.n_heads, causal=model.causal,
        scores={n: p.mean for n, p in pooled.items()}, uniform={n: p.uniform for n, p in pooled.items()},
        low={n: p.low for n, p in pooled.items()}, high={n: p.high for n, p in pooled.items()},
        n_inputs={n: p.n for n, p in pooled.items()},
        inputs={n: inputs_words[where[n]] for n in pooled},
        offset={rel: census.best_offset(v) for rel, v in acc.offsets.items()},
        control=control_values, control_kind=control_kind, no_control=no_control, in_context=ic,
        texts=tuple(sets["texts"]), text_values={n: torch.stack(acc.values[n]) for n in text_names if n in acc.values},
        lexicon_source=sets["lexicon"], mass=mass, skipped=_skipped(reads), offset_at=offset_at,
        naming=naming, control_of=control_of,
    )
