"""The census's inputs, generated from word lists and a seed: the same seed gives the same inputs.

Every input is a sequence of whole words that the model reads as one token each (the word lists come from
`mha_viz.models.lexicon`), so word index i is the i-th non-special token, and "the same word" is the same token.
Positions below are word indices; the driver maps them onto token positions after checking the tokenization.

    random_sequences    words drawn with replacement: previous and nearby on input without grammar
    repeated_sequences  m distinct random words said twice (Olsson et al. 2022): induction and duplicate pairs
    unrepeated_twins    the control: as many distinct words at the same positions, nothing repeated
    template_sentences  "the [adj] N1 P the [adj] N2 V the [adj] N3 ." with gold arcs (Clark et al. 2019); the
                        attractor N2 always has the other number than N1 (Linzen et al. 2016's hard case), and V
                        agrees with N1
    shuffled            the control: the same words in a random order, the gold positions kept, the relation gone
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from mha_viz.measures import RELATIONS

Arc = tuple[int, int]  # (query word index, key word index)

# Relations per direction. Encoders read both ways: the dependent attends to its head, as Clark et al. score them.
# A causal model's query sees only earlier words, so each relation is read from its later word.
ENCODER_RELATIONS = ("det→noun", "adj→noun", "subject→verb", "verb→subject", "verb→object")
CAUSAL_RELATIONS = ("noun→det", "noun→adj", "verb→subject", "pre-verb→subject", "object→verb")
RELATION_WORDS = RELATIONS  # their words live with their measures (`mha_viz.measures`)


@dataclass(frozen=True)
class WordInput:
    """One generated input: its words, and per score the (query, key) word-index pairs it is scored on."""
    words: tuple[str, ...]
    pairs: dict[str, tuple[Arc, ...]] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return " ".join(self.words)


def random_sequences(words: tuple[str, ...], n: int, length: int, seed: int) -> list[WordInput]:
    """`n` sequences of `length` words drawn with replacement from `words`."""
    rng = random.Random(seed)
    return [WordInput(tuple(rng.choice(words) for _ in range(length))) for _ in range(n)]


def _repeat_pairs(m: int) -> dict[str, tuple[Arc, ...]]:
    # At the second occurrence (m + i) of word i: induction targets the word after the first occurrence (i + 1),
    # duplicate the first occurrence itself.
    return {"induction": tuple((m + i, i + 1) for i in range(m)),
            "duplicate": tuple((m + i, i) for i in range(m))}


def repeated_sequences(words: tuple[str, ...], n: int, lengths: tuple[int, int], seed: int) -> list[WordInput]:
    """`n` inputs of m distinct random words said twice, m drawn from `lengths` (inclusive)."""
    rng = random.Random(seed)
    lo, hi = lengths
    if len(words) < hi:
        raise ValueError(f"repeated sequences of up to {hi} distinct words need at least {hi} words; got {len(words)}")
    out = []
    for _ in range(n):
        m = rng.randint(lo, hi)
        seq = tuple(rng.sample(words, m))
        out.append(WordInput(seq + seq, _repeat_pairs(m)))
    return out


def unrepeated_twins(items: list[WordInput], words: tuple[str, ...], seed: int) -> list[WordInput]:
    """For each repeated input, as many words at the same positions with nothing repeated (distinct words where the
    list has enough, else drawn so that no word recurs within m of itself), scored on the same pairs: what position
    alone gives the induction and duplicate scores."""
    rng = random.Random(seed)
    out = []
    for item in items:
        n = len(item.words)
        if len(words) >= n:
            seq = tuple(rng.sample(words, n))
        else:  # the tiny vocabulary: keep each word away from the position m after it
            m = n // 2
            seq = tuple(rng.sample(words, m))
            rest = [w for w in words if w not in seq]
            if rest:
                seq += tuple(rng.sample(rest, min(m, len(rest))))
                seq += tuple(rng.choice(rest) for _ in range(n - len(seq)))
            else:  # a vocabulary of m words (a compiled program's): only the word m back must differ
                seq += tuple(rng.choice([w for w in words if w != seq[i]]) for i in range(n - m))
        out.append(WordInput(seq, dict(item.pairs)))
    return out


def _noun_phrase(rng: random.Random, det: str, noun: str, adjectives: tuple[str, ...], adj_p: float) -> list[str]:
    return [det, rng.choice(adjectives), noun] if adjectives and rng.random() < adj_p else [det, noun]


def template_sentences(nouns: tuple[tuple[str, str], ...], adjectives: tuple[str, ...], prepositions: tuple[str, ...],
                       verbs: tuple[tuple[str, str], ...], determiner: str, object_determiner: str, period: str,
                       n: int, seed: int, causal: bool, adj_p: float = 0.5) -> list[WordInput]:
    """`n` sentences "det [adj] N1 prep det [adj] N2 V odet [adj] N3 [period]" with their gold arcs, per relation
    (`CAUSAL_RELATIONS` or `ENCODER_RELATIONS`). N1 and N2 differ in number; V agrees with N1."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        plural = rng.random() < 0.5
        n1, n2, n3 = rng.sample(range(len(nouns)), 3)
        words: list[str] = []
        nps = []  # (determiner index, adjective index or None, noun index) of each noun phrase

        def noun_phrase(det: str, noun: str) -> int:
            start = len(words)
            words.extend(_noun_phrase(rng, det, noun, adjectives, adj_p))
            nps.append((start, start + 1 if len(words) - start == 3 else None, len(words) - 1))
            return len(words) - 1

        subject = noun_phrase(determiner, nouns[n1][int(plural)])
        words.append(rng.choice(prepositions))
        attractor = noun_phrase(determiner, nouns[n2][int(not plural)])
        verb = len(words)
        words.append(rng.choice(verbs)[int(plural)])
        obj = noun_phrase(object_determiner, nouns[n3][0])
        if period:
            words.append(period)
        dets = tuple((d, nn) for d, _, nn in nps)
        adjs = tuple((a, nn) for _, a, nn in nps if a is not None)
        if causal:
            pairs = {"noun→det": tuple((nn, d) for d, nn in dets), "noun→adj": tuple((nn, a) for a, nn in adjs),
                     "verb→subject": ((verb, subject),), "pre-verb→subject": ((attractor, subject),),
                     "object→verb": ((obj, verb),)}
        else:
            pairs = {"det→noun": dets, "adj→noun": adjs, "subject→verb": ((subject, verb),),
                     "verb→subject": ((verb, subject),), "verb→object": ((verb, obj),)}
        out.append(WordInput(tuple(words), pairs))
    return out


def shuffled(items: list[WordInput], seed: int) -> list[WordInput]:
    """The same words in a random order, scored on the same positions: the relation is gone, position stays."""
    rng = random.Random(seed)
    out = []
    for item in items:
        words = list(item.words)
        rng.shuffle(words)
        out.append(WordInput(tuple(words), dict(item.pairs)))
    return out
