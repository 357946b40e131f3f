"""The tiny model's words and what is read with them: the specials (`PAD`, `BOS`, `UNK`) and the word lists the
corpus generator draws from (nouns with their plurals, verbs with their two forms, names, places, set phrases),
`tokenize` (lowercase words and single punctuation marks), `Vocab` (word <-> id) and `build_vocab` (every word the
generator can emit), the app's fixed example sentences (`example_sentences`), and `ground_truth`, the subject-verb
pairs and repeated words the grammar puts in a typed text.

Positions index the model's tokens, which start with `<bos>`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

PAD, BOS, UNK = "<pad>", "<bos>", "<unk>"
SPECIALS = (PAD, BOS, UNK)

# (singular, plural) nouns: the subject and the attractor of agreement sentences; also used elsewhere.
NOUNS = (
    ("key", "keys"), ("dog", "dogs"), ("cat", "cats"), ("box", "boxes"), ("book", "books"), ("door", "doors"),
    ("table", "tables"), ("cabinet", "cabinets"), ("bird", "birds"), ("tree", "trees"), ("house", "houses"),
    ("car", "cars"), ("child", "children"), ("letter", "letters"), ("window", "windows"),
    ("teacher", "teachers"), ("farmer", "farmers"), ("lamp", "lamps"), ("chair", "chairs"), ("boat", "boats"),
    ("picture", "pictures"), ("cup", "cups"), ("horse", "horses"), ("girl", "girls"), ("boy", "boys"),
)
ADJECTIVES = (
    "old", "new", "red", "small", "big", "green", "quiet", "dark", "bright", "little", "blue", "heavy", "happy",
    "wet", "warm", "tall",
)
PREPOSITIONS = ("near", "behind", "beside", "under", "by", "with", "to", "of", "above", "from", "on", "in")
# (singular, plural) verb forms: the agreement target. The rest of the sentence never marks number.
VERBS = (("is", "are"), ("was", "were"), ("has", "have"), ("looks", "look"), ("seems", "seem"), ("stays", "stay"))
FIRST_NAMES = (
    "anna", "tom", "mia", "leo", "sara", "ben", "nora", "max", "ella", "sam", "lily", "jack", "rosa", "omar", "ida",
    "paul", "vera", "hugo", "lena", "ivan",
)
LAST_NAMES = (
    "berg", "lind", "moss", "hale", "ford", "kent", "reed", "vale", "cole", "dunn", "frost", "grey", "hart", "lake",
    "marsh", "nash", "pike", "rowe", "stone", "wade",
)
PLACES = ("market", "river", "school", "park", "station", "library", "farm", "beach", "city", "bakery")
STORY_VERBS = ("saw", "met", "called", "helped", "visited", "thanked")
NUMBERS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Set phrases: after the first word or two, the rest is fixed.
PHRASES = (
    "once upon a time there was a little house .",
    "at the end of the day we went home .",
    "all of a sudden it began to rain .",
    "in the middle of the night it was very quiet .",
    "thank you very much , said the teacher .",
    "good morning , said the farmer .",
    "as soon as possible , said the girl .",
    "every now and then the birds sing .",
)
EXTRA_WORDS = (
    "a", "the", "and", "then", "later", "went", "gave", "found", "walked", "said", ".", ",", ":", "here", "there",
)

_TOKEN = re.compile(r"[a-z0-9']+|[^\sa-z0-9']")


def tokenize(text: str) -> list[str]:
    """Lowercase, then split into words and single punctuation marks: "The keys, too." -> the keys , too ."""
    return _TOKEN.findall(text.lower())


class Vocab:
    """word <-> id. Ids 0, 1, 2 are <pad>, <bos>, <unk>; every other word maps to its id or to <unk>."""

    def __init__(self, words: list[str]):
        if list(words[: len(SPECIALS)]) != list(SPECIALS):
            raise ValueError(f"a vocabulary must start with {SPECIALS}; got {words[:3]}")
        if len(set(words)) != len(words):
            raise ValueError("the vocabulary lists a word twice; each word needs one id")
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.pad_id, self.bos_id, self.unk_id = (self.index[s] for s in SPECIALS)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def id(self, word: str) -> int:
        return self.index.get(word, self.unk_id)

    def word(self, token_id: int) -> str:
        if not 0 <= token_id < len(self.words):
            raise IndexError(f"token id {token_id} is outside the vocabulary 0-{len(self.words) - 1}")
        return self.words[token_id]

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.id(t) for t in tokens]

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.words, indent=0) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        return cls(json.loads(Path(path).read_text()))


def build_vocab() -> Vocab:
    """Every word the generator can emit, specials first, then sorted so the ids never depend on set order."""
    words = set(EXTRA_WORDS) | set(ADJECTIVES) | set(PREPOSITIONS) | set(FIRST_NAMES) | set(LAST_NAMES)
    words |= set(PLACES) | set(STORY_VERBS) | set(NUMBERS) | set(DAYS)
    words |= {w for pair in NOUNS + VERBS for w in pair}
    words |= {w for p in PHRASES for w in tokenize(p)}
    return Vocab(list(SPECIALS) + sorted(words))



def vocabulary_words() -> tuple[str, ...]:
    """Every word of the vocabulary, without specials or punctuation, in vocabulary order: what random
    in-vocabulary sequences are drawn from."""
    return tuple(w for w in build_vocab().words[len(SPECIALS):] if w[0].isalnum())


@dataclass(frozen=True)
class ExampleSentence:
    relation: str  # "nearby", "repeat" or "agreement"
    label: str  # what to look for, shown next to the button
    text: str


def example_sentences() -> list[ExampleSentence]:
    """Fixed, readable sentences for the app's one-click examples, labelled by the relation they show."""
    return [
        ExampleSentence("nearby", "Counting: each word follows from the one before",
                        "one , two , three , four , five , six , seven ."),
        ExampleSentence("nearby", "A set phrase",
                        "once upon a time there was a little house . at the end of the day we went home ."),
        ExampleSentence("repeat", "A name comes back: the last name can be copied from its first mention",
                        "anna berg went to the market . tom lind saw anna berg at the park ."),
        ExampleSentence("repeat", "Two people, each mentioned again",
                        "mia frost and leo hart walked to the river . later leo hart found the keys . "
                        "mia frost gave leo hart a red cup ."),
        ExampleSentence("repeat", "A list of words said again: from its second word on, it can be copied",
                        "anna berg said : red lamp river cup . then tom lind said : red lamp river cup ."),
        ExampleSentence("agreement", "The verb agrees with 'keys', not with the nearer 'cabinet'",
                        "the keys to the cabinet are on the table ."),
        ExampleSentence("agreement", "The verb agrees with 'dog', not with the nearer 'trees'",
                        "the old dog near the tall trees is happy ."),
        ExampleSentence("agreement", "The verb agrees with 'teachers', not with 'child'",
                        "the teachers with the little child were quiet ."),
    ]


_SINGULAR_NOUNS = {s for s, _ in NOUNS}
_PLURAL_NOUNS = {p for _, p in NOUNS}
_VERB_FORMS = {form for pair in VERBS for form in pair}
_REPEATABLE = set(FIRST_NAMES) | set(LAST_NAMES) | _SINGULAR_NOUNS | _PLURAL_NOUNS | set(ADJECTIVES) | set(PLACES)


@dataclass(frozen=True)
class GroundTruth:
    """What the generator's grammar says about a typed text. Positions index the model's tokens (<bos> = 0)."""

    subjects: tuple[tuple[int, int], ...]  # (subject_pos, verb_pos) of each agreement clause found
    repeats: tuple[tuple[int, int], ...]  # (first, second) mentions of a repeated name or content word


def ground_truth(tokens: list[str] | tuple[str, ...]) -> GroundTruth:
    """Read the relations the corpus builds in off a tokenized text (with <bos> first), using its vocabulary:

    - agreement: a clause "the [adj] NOUN ... VERB" where VERB is one of the agreeing verb forms; the subject is
      the first noun of the clause (the attractor inside a prepositional phrase comes after it);
    - repeats: a name or content word that occurred earlier in the text (its first mention and this one).
    Works on any text, so a typed sentence in the generator's style gets its ground truth too.
    """
    subjects, repeats = [], []
    clause_start = 1
    subject = None
    seen: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if i == 0:
            continue
        if tok in (".", ",", ":", "and", "then", "later"):
            clause_start, subject = i + 1, None
            continue
        if subject is None and i >= clause_start and (tok in _SINGULAR_NOUNS or tok in _PLURAL_NOUNS) \
                and "the" in tokens[clause_start:i]:
            subject = i
        elif tok in _VERB_FORMS and subject is not None:
            subjects.append((subject, i))
            subject = None
        if tok in _REPEATABLE:
            if tok in seen and i - seen[tok] > 1:
                repeats.append((seen[tok], i))
            else:
                seen.setdefault(tok, i)
    return GroundTruth(tuple(subjects), tuple(repeats))
