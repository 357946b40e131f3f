"""A seeded generator of short English-like texts, built so that three kinds of relation pay off.

1. Nearby context: counting, weekdays and set phrases ("once upon a time", "at the end of the day"), where the
   previous word or two predict the next.
2. Repeated terms: people with a first and a last name that are paired at random per text ("anna berg"). The last
   name after a later "anna" can only be predicted by copying it from the first mention (induction); likewise a
   list of random words that someone says and someone later says again.
3. Structural dependency: subject-verb number agreement across a prepositional phrase
   ("the keys to the old cabinet are ..."). Training texts draw the attractor's number independently of the
   subject's, so "agree with the nearest noun" does not work; held-out probes use the hard case (opposite number).
4. Random repeats: a run of words drawn at random from the whole vocabulary, then said again (and again). Nothing
   but the text itself predicts the second copy, so copying pays wherever it is, and reading "which word came
   just before" pays at every position, not only inside set phrases. This is the data of Olsson et al. 2022's
   induction-head experiments (repeated random tokens); it makes the nearby-context and repeated-term heads
   carry over to any word sequence a user types, not only to the grammar above.

5. Ordinary English (issue 51): sentences of everyday English (WordNet's examples, `models.tiny.english`), so a
   sentence a student types is in distribution, and a passage of them said twice, so copying pays on ordinary text
   as on random words. Their tokens are the vocabulary's, pieces included.

Every example records the ground truth: where the repeated names are, and where the subject and its verb are.
Positions index `Example.tokens`, which starts with `<bos>`, so they are the model's input positions too.

The words it draws from, its vocabulary and tokenizer, the app's fixed example sentences and the ground truth
read off a typed text are `models.tiny.vocabulary`.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from mha_viz.models.tiny.vocabulary import (
    ADJECTIVES,
    BOS,
    DAYS,
    FIRST_NAMES,
    LAST_NAMES,
    NOUNS,
    NUMBERS,
    PHRASES,
    PLACES,
    PREPOSITIONS,
    STORY_VERBS,
    VERBS,
    build_vocab,
    generator_words,
    tokenize,
    vocabulary_words,
)


@dataclass(frozen=True)
class Example:
    """One generated text with its ground truth. Positions index `tokens`, whose first entry is <bos>."""

    tokens: tuple[str, ...]
    relation: str  # "mixed" (training), "nearby", "repeat" or "agreement"
    # (first, second): a token of a repeated term (a person's first name, a word of a repeated list) at its first
    # mention and at a later mention; the token after `first` is then the copyable continuation of `second`.
    repeats: tuple[tuple[int, int], ...] = ()
    # The probed agreement sentence (the last one in the text), if any.
    subject_pos: int | None = None
    verb_pos: int | None = None
    attractor_pos: int | None = None
    plural: bool | None = None  # the subject's number
    verb_forms: tuple[str, str] | None = None  # (singular, plural) of the verb at verb_pos
    sentence_starts: tuple[int, ...] = field(default=(), repr=False)

    @property
    def text(self) -> str:
        """The text as a user would type it (no <bos>); tokenizing it gives tokens[1:] back."""
        return " ".join(self.tokens[1:])


class _Builder:
    """Collects sentences into one text and records where the annotated words land."""

    def __init__(self):
        self.tokens: list[str] = [BOS]
        self.repeats: list[tuple[int, int]] = []
        self.first_seen: dict[str, int] = {}  # term key -> position of its first mention
        self.agreement: dict | None = None
        self.starts: list[int] = []

    def add(self, words: list[str], terms: dict[int, tuple[str, int]] | None = None, agreement: dict | None = None):
        """terms: offset in `words` -> (key, length) of a repeatable term (a person, a word list). At a later
        mention, every token of the term but the last is recorded as (first position, later position)."""
        base = len(self.tokens)
        self.starts.append(base)
        for offset, (key, length) in (terms or {}).items():
            if key in self.first_seen:
                first = self.first_seen[key]
                self.repeats.extend((first + i, base + offset + i) for i in range(length - 1))
            else:
                self.first_seen[key] = base + offset
        if agreement is not None:
            self.agreement = {
                k: (v + base if k.endswith("_pos") and v is not None else v) for k, v in agreement.items()
            }
        self.tokens.extend(words)

    def example(self, relation: str) -> Example:
        a = self.agreement or {}
        return Example(
            tokens=tuple(self.tokens),
            relation=relation,
            repeats=tuple(self.repeats),
            subject_pos=a.get("subject_pos"),
            verb_pos=a.get("verb_pos"),
            attractor_pos=a.get("attractor_pos"),
            plural=a.get("plural"),
            verb_forms=a.get("verb_forms"),
            sentence_starts=tuple(self.starts),
        )


def _noun_phrase(rng: random.Random, plural: bool, adj_p: float = 0.4) -> list[str]:
    noun = rng.choice(NOUNS)[int(plural)]
    return ["the", rng.choice(ADJECTIVES), noun] if rng.random() < adj_p else ["the", noun]


def agreement_sentence(rng: random.Random, attractor: str = "random") -> tuple[list[str], dict]:
    """ "the [adj] SUBJ [PREP the [adj] ATTR] VERB complement ." with the positions of SUBJ, ATTR and VERB.

    attractor: "random" (its number drawn independently: training), "opposite" (the hard held-out case),
    "same", or "none" (no prepositional phrase).
    """
    if attractor not in ("random", "opposite", "same", "none"):
        raise ValueError(f"attractor must be 'random', 'opposite', 'same' or 'none'; got {attractor!r}")
    plural = rng.random() < 0.5
    words = _noun_phrase(rng, plural)
    subject_pos = len(words) - 1
    attractor_pos = None
    if attractor != "none":
        attr_plural = {"random": rng.random() < 0.5, "opposite": not plural, "same": plural}[attractor]
        words += [rng.choice(PREPOSITIONS)] + _noun_phrase(rng, attr_plural)
        attractor_pos = len(words) - 1
    forms = rng.choice(VERBS)
    verb_pos = len(words)
    words.append(forms[int(plural)])
    if forms[0] == "has":
        words += ["a", rng.choice(ADJECTIVES), rng.choice(NOUNS)[0]]
    elif forms[0] == "stays":
        words += [rng.choice(("here", "there"))]
    elif forms[0] in ("is", "was") and rng.random() < 0.5:
        words += [rng.choice(PREPOSITIONS)] + _noun_phrase(rng, rng.random() < 0.5, adj_p=0.0)
    else:
        words += [rng.choice(ADJECTIVES)]
    words.append(".")
    info = dict(subject_pos=subject_pos, verb_pos=verb_pos, attractor_pos=attractor_pos, plural=plural,
                verb_forms=forms)
    return words, info


def _people(rng: random.Random, n: int) -> list[tuple[str, str]]:
    # Unique first and last names within a text, paired at random: only the text itself says who "anna" is.
    return list(zip(rng.sample(FIRST_NAMES, n), rng.sample(LAST_NAMES, n)))


def story_sentence(rng: random.Random, people: list[tuple[str, str]]) -> tuple[list[str], dict]:
    """A sentence about one or two people; returns the words and {offset of a first name: (name, 2)}."""
    words, offsets = _story(rng, people)
    return words, {o: (words[o], 2) for o in offsets}


def _story(rng: random.Random, people: list[tuple[str, str]]) -> tuple[list[str], list[int]]:
    p = list(rng.choice(people))
    q = list(rng.choice([x for x in people if x != tuple(p)] or people))
    kind = rng.randrange(5)
    if kind == 0:
        return p + ["went", "to", "the", rng.choice(PLACES), "."], [0]
    if kind == 1:
        return p + [rng.choice(STORY_VERBS)] + q + ["at", "the", rng.choice(PLACES), "."], [0, 3]
    if kind == 2:
        return p + ["gave"] + q + ["a", rng.choice(ADJECTIVES), rng.choice(NOUNS)[0], "."], [0, 3]
    if kind == 3:
        return [rng.choice(("then", "later"))] + p + ["found", "the", rng.choice(NOUNS)[rng.random() < 0.5], "."], [1]
    return p + ["and"] + q + ["walked", "to", "the", rng.choice(PLACES), "."], [0, 3]


LIST_WORDS = tuple(s for s, _ in NOUNS) + ADJECTIVES + PLACES


def list_sentence(rng: random.Random, people: list[tuple[str, str]], words: list[str],
                  again: bool) -> tuple[list[str], dict]:
    """ "anna berg said : red lamp river ." and later "then tom lind said : red lamp river ." : a phrase of random
    words that recurs, so every word after its first can only be predicted by copying (Olsson et al. 2022)."""
    p = list(rng.choice(people))
    head = (["then"] if again else []) + p + ["said", ":"]
    return head + words + ["."], {len(head): ("<list>", len(words)), int(again): (p[0], 2)}


def nearby_sentence(rng: random.Random) -> list[str]:
    """Counting, weekdays or a set phrase: the previous word predicts the next."""
    kind = rng.randrange(3)
    if kind == 0:
        start = rng.randrange(len(NUMBERS) - 3)
        run = NUMBERS[start : start + rng.randint(3, min(6, len(NUMBERS) - start))]
        return [w for n in run for w in (n, ",")][:-1] + ["."]
    if kind == 1:
        start = rng.randrange(len(DAYS))
        run = [DAYS[(start + i) % len(DAYS)] for i in range(rng.randint(3, 5))]
        return [w for d in run for w in (d, ",")][:-1] + ["."]
    return tokenize(rng.choice(PHRASES))




def repeat_words(rng: random.Random, pool: str = "mixed") -> tuple[str, ...]:
    """What the words of one random repeat are drawn from: half the time the generator's own 270 words, else every
    whole word of the vocabulary.

    Why: over 5,000 words the matching an induction head does (this token against the previous-token head's copy
    of each earlier token's predecessor, in 16 dimensions) is noisy from the start, and a partial circuit gains
    little: with every repeat drawn from all 5,000 words, no previous-token or induction head had formed at step
    2,400 (the previous-token score 0.07 on random sequences, induction 0.02), where the 210-word model had both
    by step 1,000. A few hundred words, seen often, let the circuit form as it did; the other half keeps it
    trained on the whole vocabulary, where the heads are measured."""
    if pool not in ("mixed", "generator"):
        raise ValueError(f"pool is 'mixed' or 'generator'; got {pool!r}")
    if pool == "generator":
        return tuple(sorted(generator_words()))
    return tuple(sorted(generator_words())) if rng.random() < 0.5 else vocabulary_words()


def _said_again(seq: list[str], room: int, start: int) -> tuple[list[str], tuple[tuple[int, int], ...]]:
    """`seq` said again and again to fill `room` tokens from position `start`: (the words, (position in the first
    copy, position now) for every later token whose continuation is in view)."""
    n = len(seq)
    body = (seq * (room // n + 1))[:room]
    return body, tuple((start + i % n, start + i) for i in range(n, room - 1))


def random_repeat_text(rng: random.Random, max_len: int, pool: str = "mixed") -> Example:
    """ "<bos> [a few random words] w1 w2 ... wn w1 w2 ... wn w1 ..." : n distinct random vocabulary words, repeated
    until the text is full, after an unrepeated random prefix (so a repeat does not always start at position 1).
    Every token of a later copy is recorded as (its position in the first copy, its position now)."""
    words = repeat_words(rng, pool)
    prefix = [rng.choice(words) for _ in range(rng.randint(0, 8))]
    room = max_len - 1 - len(prefix)
    n = rng.randint(4, max(4, room // 2))  # at least two full copies fit
    seq = rng.sample(words, n)
    body, repeats = _said_again(seq, room, 1 + len(prefix))
    return Example(tokens=(BOS, *prefix, *body), relation="random-repeat", repeats=repeats)


def late_repeat_text(rng: random.Random, max_len: int, pool: str = "mixed") -> Example:
    """ "<bos> [ordinary sentences] [a few random words] w1 w2 ... wn w1 w2 ... wn w1 ..." : n distinct random
    vocabulary words whose first copy starts anywhere in the context, after whole sentences of the mixed text
    (then random words up to that start), repeated until the text is full.

    Why: in `random_repeat_text` the first copy starts by position 9 and ends by about 40, and a head that reads
    the previous token is needed only at the first copy (a later copy can always match an earlier one), so past
    there it was never needed and, in a 64-token text's last third, the shipped heads' previous-token attention
    fell to 0.4-0.5. Here the first copy's start is the latest of three uniform draws over the context, so the end
    of the context, which nothing else reaches, gets the most; a second copy of at least two words follows it.
    The prefix is mostly grammar, not random words, so it still has something to learn (long unrepeated random
    stretches delayed the heads' formation). Every token of a later copy is recorded as (its position in the
    first copy, its position now)."""
    words = repeat_words(rng, pool)
    n = rng.randint(3, 12)
    last = max_len - n - 2  # the latest start that leaves room for two words of a second copy
    start = max(rng.randint(1, last) for _ in range(3))
    prefix = _mixed_text(rng, start).tokens if start > 1 else (BOS,)
    fresh = rng.sample(words, n + start - len(prefix))  # the sequence, then the words up to its start: all distinct
    seq, filler = fresh[:n], fresh[n:]
    room = max_len - start
    body, repeats = _said_again(seq, room, start)
    return Example(tokens=(*prefix, *filler, *body), relation="late-repeat", repeats=repeats)


def early_repeat_text(rng: random.Random, max_len: int, pool: str = "mixed") -> Example:
    """ "<bos> [0-2 random words] u1 u2 u3 u1 u2 u3 [a random repeat of other words]" : a short sequence (3-5
    words) said twice right after <bos>, so its second copy falls at positions 4 to 12, then the rest of the text
    as in `random_repeat_text`, its words distinct from the short sequence's.

    Why: no other text puts a second copy that early (`random_repeat_text`'s starts at position 5 at the earliest,
    and only for its shortest sequences), and the shipped seed's induction head scored 0.84 at positions 4-7 of a
    12-token text: at query 4 it put 0.38 of its weight on <bos>. Making half the random repeats short instead
    mended that band but cost the previous-token head 0.92 -> 0.87 in a 64-token text's last third, because a short
    sequence repeated to the end needs that head only at its first few words; here the random repeat that follows
    still needs it further on. Every token of a later copy is recorded as (its position in the first copy, its
    position now); the short sequence's last word is the one whose continuation differs the second time."""
    words = repeat_words(rng, pool)
    p, m = rng.randint(0, 2), rng.randint(3, 5)
    room = max_len - 1 - p - 2 * m
    n = rng.randint(4, max(4, room // 2))  # the random repeat after it: at least two full copies fit
    fresh = rng.sample(words, p + m + n)  # all distinct, so each later word has one earlier occurrence
    prefix, short, seq = fresh[:p], fresh[p : p + m], fresh[p + m :]
    start = 1 + p
    body, later = _said_again(seq, room, start + 2 * m)
    repeats = tuple((start + i, start + m + i) for i in range(m)) + later
    return Example(tokens=(BOS, *prefix, *short, *short, *body), relation="early-repeat", repeats=repeats)


def _english(rng: random.Random, room: int, part: str = "train") -> list[str]:
    """Whole ordinary sentences drawn at random, as tokens, until the next would not fit in `room` tokens (at least
    one sentence, cut to `room`)."""
    from mha_viz.models.tiny.english import sentences

    pool, vocab = sentences(part), build_vocab()
    out: list[str] = []
    while True:
        s = rng.choice(pool)
        tokens = vocab.tokenize(s if s[-1] in ".!?" else s + " .")
        if out and len(out) + len(tokens) > room:
            return out
        out += tokens
        if len(out) >= room:
            return out[:room]


def english_text(rng: random.Random, max_len: int, part: str = "train") -> Example:
    """ "<bos> sentence . sentence . ..." : ordinary English sentences up to `max_len` tokens."""
    return Example(tokens=(BOS, *_english(rng, max_len - 1, part)), relation="english")


def english_repeat_text(rng: random.Random, max_len: int, part: str = "train") -> Example:
    """ "<bos> [sentences] s1 s2 ... s1 s2 ..." : a passage of ordinary sentences (3 tokens up to half the room
    left), said again until the text is full, after 0-3 other sentences. Copying pays on ordinary text, whose words
    recur within a sentence too (so, unlike a random repeat, a token may have several earlier occurrences; repeats
    lists the copy's own). Every token of a later copy is recorded as (its position in the first copy, its
    position now)."""
    prefix = _english(rng, rng.randint(0, max_len // 3), part) if rng.random() < 0.5 else []
    room = max_len - 1 - len(prefix)
    passage = _english(rng, rng.randint(3, max(3, room // 2)), part)
    body, repeats = _said_again(passage, room, 1 + len(prefix))
    return Example(tokens=(BOS, *prefix, *body), relation="english-repeat", repeats=repeats)


def training_text(rng: random.Random, max_len: int, random_share: float = 0.0, late_share: float = 0.0,
                  early_share: float = 0.0, english_share: float = 0.0, english_repeat_share: float = 0.0,
                  pool: str = "mixed") -> Example:
    """A text of up to `max_len` tokens (with <bos>): with probability `random_share` a random repeat
    (`random_repeat_text`), with probability `late_share` ordinary sentences followed by a random repeat
    (`late_repeat_text`), with probability `early_share` a short sequence said twice right after <bos>, then a
    random repeat (`early_repeat_text`), with probability `english_share` ordinary English (`english_text`), with
    probability `english_repeat_share` an English passage said again (`english_repeat_text`), else a mix of
    stories, word lists, agreement sentences and set phrases."""
    r = rng.random()
    if r < random_share:
        return random_repeat_text(rng, max_len, pool)
    if r < random_share + late_share:
        return late_repeat_text(rng, max_len, pool)
    r -= random_share + late_share
    if r < early_share:
        return early_repeat_text(rng, max_len, pool)
    r -= early_share
    if r < english_share:
        return english_text(rng, max_len)
    if r < english_share + english_repeat_share:
        return english_repeat_text(rng, max_len)
    return _mixed_text(rng, max_len)


def _mixed_text(rng: random.Random, max_len: int) -> Example:
    b = _Builder()
    # Three people, so "attend to any last name" is a poor guess and copying from the right mention pays.
    people = _people(rng, 3)
    phrase = rng.sample(LIST_WORDS, rng.randint(3, 5))
    said = False
    while True:
        r = rng.random()
        if r < 0.35:
            words, terms = story_sentence(rng, people)
            item = dict(terms=terms)
        elif r < 0.55:
            words, terms = list_sentence(rng, people, phrase, again=said)
            item, said = dict(terms=terms), True
        elif r < 0.85:
            # Some without a prepositional phrase, so "the keys are" (as a user may type it) is in distribution.
            words, info = agreement_sentence(rng, "none" if rng.random() < 0.2 else "random")
            item = dict(agreement=info)
        else:
            words, item = nearby_sentence(rng), {}
        if len(b.tokens) + len(words) > max_len:
            break
        b.add(words, **item)
    return b.example("mixed")


def training_texts(n: int, seed: int, max_len: int, random_share: float = 0.0,
                   late_share: float = 0.0, early_share: float = 0.0, english_share: float = 0.0,
                   english_repeat_share: float = 0.0, pool: str = "mixed") -> list[Example]:
    every = random_share + late_share + early_share + english_share + english_repeat_share
    shares = (("random_share", random_share), ("late_share", late_share), ("early_share", early_share),
              ("english_share", english_share), ("english_repeat_share", english_repeat_share), ("their sum", every))
    for name, share in shares:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name} is a probability; got {share}")
    rng = random.Random(seed)
    return [training_text(rng, max_len, random_share, late_share, early_share, english_share, english_repeat_share,
                          pool) for _ in range(n)]


def random_sequences(n: int, seed: int, length: int = 32) -> list[Example]:
    """Held-out probes for nearby context: `length` words drawn at random (with replacement) from the whole
    vocabulary. No grammar: only a head that reads positions, not words, can find the previous token here."""
    rng = random.Random(seed)
    words = vocabulary_words()
    return [Example(tokens=(BOS, *(rng.choice(words) for _ in range(length))), relation="random")
            for _ in range(n)]


def unrepeated_sequences(n: int, seed: int, length: int) -> list[Example]:
    """Held-out probes for nearby context over the whole context: `length` tokens (with <bos>), the words drawn
    at random *without* replacement from the whole vocabulary, so no word recurs and only a head that reads
    positions can find the previous token."""
    rng = random.Random(seed)
    words = vocabulary_words()
    if not 2 <= length <= len(words) + 1:
        raise ValueError(f"length counts <bos> and distinct words: 2 to {len(words) + 1}; got {length}")
    return [Example(tokens=(BOS, *rng.sample(words, length - 1)), relation="random") for _ in range(n)]


def placed_repeats(n: int, seed: int, length: int, min_len: int = 3) -> list[Example]:
    """Held-out induction probes over the whole context: `length` tokens (with <bos>) of distinct random words,
    where a sequence of m >= `min_len` words is said twice at a random place: "<bos> [p words] w1..wm w1..wm
    [the rest]". m and p are drawn so the second copy lands anywhere from early to the very end; with m >= 3 the
    word after a first occurrence is never the previous token, so induction is not previous-token attention.
    repeats: (position in the first copy, position in the second) for every word of the second copy."""
    rng = random.Random(seed)
    words = vocabulary_words()
    room = length - 1
    if room < 2 * min_len:
        raise ValueError(f"a {length}-token text cannot hold a {min_len}-word sequence twice after <bos>")
    out = []
    for _ in range(n):
        # Half the sequences short (at most a sixth of the text), so second copies often fall early too.
        m = rng.randint(min_len, room // 2 if rng.random() < 0.5 else max(min_len, room // 6))
        p = rng.randint(0, room - 2 * m)
        fresh = rng.sample(words, m + room - 2 * m)  # the sequence, then every other word: all distinct
        seq, other = fresh[:m], fresh[m:]
        tokens = (BOS, *other[:p], *seq, *seq, *other[p:])
        start = 1 + p
        repeats = tuple((start + i, start + m + i) for i in range(m))
        out.append(Example(tokens=tokens, relation="repeat", repeats=repeats))
    return out


def repeated_sequences(n: int, seed: int, lengths: tuple[int, int] = (8, 24)) -> list[Example]:
    """Held-out probes for repeated terms: a sequence of distinct random vocabulary words (its length drawn from
    `lengths`), said twice. repeats: (position in the first copy, position in the second) for every word."""
    rng = random.Random(seed)
    words = vocabulary_words()
    out = []
    for _ in range(n):
        m = rng.randint(*lengths)
        seq = rng.sample(words, m)
        repeats = tuple((1 + i, 1 + m + i) for i in range(m))
        out.append(Example(tokens=(BOS, *seq, *seq), relation="repeat", repeats=repeats))
    return out


def agreement_examples(n: int, seed: int, attractor: str = "opposite", max_len: int = 64) -> list[Example]:
    """Held-out agreement probes: 0-2 context sentences, then the annotated agreement sentence."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        b = _Builder()
        people = _people(rng, 2)
        for _ in range(rng.randint(0, 2)):
            words, terms = story_sentence(rng, people)
            b.add(words, terms=terms)
        words, info = agreement_sentence(rng, attractor)
        b.add(words, agreement=info)
        if len(b.tokens) <= max_len:
            out.append(b.example("agreement"))
    return out


def repeat_examples(n: int, seed: int, max_len: int = 64, lists: bool = False) -> list[Example]:
    """Held-out induction probes: three people are introduced, other sentences follow, then they come back.
    With lists=True, a word list is said and later repeated as well."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        b = _Builder()
        people = _people(rng, 3)
        phrase = rng.sample(LIST_WORDS, rng.randint(3, 5))
        for i in range(4):
            if lists and i in (0, 2):
                words, terms = list_sentence(rng, people, phrase, again=i == 2)
            else:
                words, terms = story_sentence(rng, people)
            b.add(words, terms=terms)
            if rng.random() < 0.5:
                b.add(nearby_sentence(rng) if rng.random() < 0.5 else agreement_sentence(rng)[0])
        if b.repeats and len(b.tokens) <= max_len:
            out.append(b.example("repeat"))
    return out


def nearby_examples(n: int, seed: int, max_len: int = 64) -> list[Example]:
    """Held-out texts of counting, weekdays and set phrases."""
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        b = _Builder()
        for _ in range(rng.randint(2, 4)):
            b.add(nearby_sentence(rng))
        if len(b.tokens) <= max_len:
            out.append(b.example("nearby"))
    return out
