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
import unicodedata
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
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
    # Widened for issue 51: everyday nouns a student's sentence has, so agreement is learned on more than a few.
    ("bottle", "bottles"), ("student", "students"), ("doctor", "doctors"), ("apple", "apples"), ("shoe", "shoes"),
    ("flower", "flowers"), ("phone", "phones"), ("painting", "paintings"), ("player", "players"),
    ("plate", "plates"), ("bag", "bags"), ("coat", "coats"), ("clock", "clocks"), ("woman", "women"),
    ("man", "men"), ("baby", "babies"), ("story", "stories"), ("bridge", "bridges"), ("garden", "gardens"),
    ("computer", "computers"), ("pencil", "pencils"), ("song", "songs"), ("friend", "friends"),
    ("nurse", "nurses"), ("glass", "glasses"), ("wall", "walls"), ("road", "roads"), ("shop", "shops"),
)
ADJECTIVES = (
    "old", "new", "red", "small", "big", "green", "quiet", "dark", "bright", "little", "blue", "heavy", "happy",
    "wet", "warm", "tall", "young", "clean", "empty", "broken", "strange", "cold", "yellow", "white", "busy", "long",
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

# Casing: every text is lowercased before it is split, so "The" and "the" are one token and a capital letter
# never makes a word unknown (the model cannot tell a name's capital from a sentence's first word; the display
# shows the lowercased token). Accents are dropped ("café" -> cafe) and typographic quotes and dashes read as
# their ASCII marks, so text pasted from a word processor reads like typed text.
_TYPOGRAPHY = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-",
                             "\u2014": "-", "\u2026": "...", "\u00a0": " "})
# Words (letters and digits), English clitics split off as in the Penn Treebank ("don't" -> do n't, "it's" ->
# it 's: one token for "n't" and one for "'s" instead of a word per contraction), and any other character alone.
_TOKEN = re.compile(r"[^\W\d_]+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|[^\W_]+|\S")
CLITICS = ("n't", "'s", "'re", "'ve", "'ll", "'d", "'m")
CONTINUES = "##"  # a piece that continues the word before it (WordPiece's mark, as in BERT)
LETTERS = tuple("abcdefghijklmnopqrstuvwxyz")
DIGITS = tuple("0123456789")
PUNCTUATION = tuple("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def normalize(text: str) -> str:
    """Typographic marks to ASCII, accents dropped (NFKD, then combining marks removed), lowercased."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY))
    return "".join(c for c in text if not unicodedata.combining(c)).lower()


def tokenize(text: str) -> list[str]:
    """Split into words, clitics and single other characters (not yet into the vocabulary's pieces):
    "The keys, too." -> the keys , too .   "Don't!" -> do n't !"""
    return _TOKEN.findall(normalize(text))


class Vocab:
    """token <-> id, and the tokenizer: a word the vocabulary holds is one token; any other word is read in
    pieces, greedily longest first from its start (WordPiece, Wu et al. 2016 as BERT uses it): a first piece,
    then pieces marked "##" that continue it ("zxqv" -> zx ##q ##v). Every letter and digit is a piece in both
    places, so any word of letters and digits is read; only a character that is no piece (an emoji, a letter of
    another script) becomes <unk>, alone.

    Ids 0, 1, 2 are <pad>, <bos>, <unk>. `words` are the vocabulary's whole words (what random in-vocabulary
    sequences are drawn from), `pieces` the rest besides the specials and punctuation."""

    def __init__(self, tokens: list[str], n_words: int | None = None, n_marks: int = 0):
        if list(tokens[: len(SPECIALS)]) != list(SPECIALS):
            raise ValueError(f"a vocabulary must start with {SPECIALS}; got {tokens[:3]}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("the vocabulary lists a token twice; each token needs one id")
        self.tokens = list(tokens)
        self.index = {w: i for i, w in enumerate(self.tokens)}
        self.pad_id, self.bos_id, self.unk_id = (self.index[s] for s in SPECIALS)
        start = len(SPECIALS) + n_marks
        end = len(self.tokens) if n_words is None else start + n_words
        self.marks = tuple(self.tokens[len(SPECIALS):start])  # punctuation and clitics
        self.whole_words = tuple(self.tokens[start:end])
        self.pieces = tuple(self.tokens[end:])
        if n_words is None:  # a word list from before pieces: its punctuation marks are no words
            self.marks = tuple(w for w in self.whole_words if not w[0].isalnum())
            self.whole_words = tuple(w for w in self.whole_words if w[0].isalnum())
        self._longest = max(len(t.removeprefix(CONTINUES)) for t in self.tokens)

    @property
    def words(self) -> list[str]:
        """Every token, by id (kept under its old name: labels, embeddings and tests read it)."""
        return self.tokens

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.index

    def id(self, token: str) -> int:
        return self.index.get(token, self.unk_id)

    def word(self, token_id: int) -> str:
        if not 0 <= token_id < len(self.tokens):
            raise IndexError(f"token id {token_id} is outside the vocabulary 0-{len(self.tokens) - 1}")
        return self.tokens[token_id]

    def split(self, word: str) -> list[str]:
        """One word (from `tokenize`) -> its tokens: itself if known, else its pieces; <unk> for a character
        that no piece reads."""
        return [token for token, _ in self._read(word)]

    def _read(self, word: str) -> list[tuple[str, str]]:
        """(token, the text it reads) for each token of one word."""
        if word in self.index:
            return [(word, word)]
        if not self.pieces:  # a vocabulary of whole words only (before issue 51): the word is unknown, whole
            return [(UNK, word)]
        out, i = [], 0
        while i < len(word):
            mark = CONTINUES if i else ""
            for j in range(min(len(word), i + self._longest), i, -1):
                if mark + word[i:j] in self.index:
                    out.append((mark + word[i:j], word[i:j]))
                    i = j
                    break
            else:
                out.append((UNK, word[i]))
                i += 1
        return out

    def tokenize(self, text: str) -> list[str]:
        """Text -> the tokens the model reads: "Zxqv waited." -> z ##x ##q ##v waited ."""
        return [t for w in tokenize(text) for t in self.split(w)]

    def read(self, text: str) -> tuple[list[str], list[str]]:
        """Text -> (labels, tokens): each token's label is the token, except that an <unk> is labelled with the
        character it stands for, as typed (lowercased)."""
        pairs = [pair for w in tokenize(text) for pair in self._read(w)]
        return [label if token == UNK else token for token, label in pairs], [token for token, _ in pairs]

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.id(t) for t in tokens]

    def save(self, path: str | Path) -> None:
        data = {"specials": list(SPECIALS), "marks": list(self.marks), "words": list(self.whole_words),
                "pieces": list(self.pieces)}
        Path(path).write_text(json.dumps(data, indent=0) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        data = json.loads(Path(path).read_text())
        if isinstance(data, list):  # a word list from before pieces: every token a word
            return cls(data)
        return cls(data["specials"] + data["marks"] + data["words"] + data["pieces"], len(data["words"]),
                   len(data["marks"]))


# The vocabulary's whole words: the generator's words, then the most frequent words of everyday English (OpenSubtitles
# counts, as pyspellchecker ships them) up to N_SPOKEN, then the most frequent words of the training English up to
# N_WORDS. Spoken counts bring the words a student types that WordNet's examples seldom use ("dad", "forty",
# "thursday"); the training English brings the words of its own sentences. Every whole word is trained: random
# repeats draw from all of them.
N_SPOKEN = 3500
N_WORDS = 5000
N_FIRST_PIECES = 200  # word beginnings of 2-4 letters, for the words outside the vocabulary
N_NEXT_PIECES = 500  # "##" pieces of 2-4 letters (endings, syllables), for the same


def spoken_counts() -> dict[str, int]:
    """English word counts from OpenSubtitles as the pyspellchecker package ships them (MIT license)."""
    import gzip
    from importlib import resources

    try:
        data = (resources.files("spellchecker") / "resources" / "en.json.gz").read_bytes()
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError("the tiny vocabulary is built from pyspellchecker's English word counts: "
                                  "pip install pyspellchecker (requirements.txt)") from e
    return json.loads(gzip.decompress(data))


def generator_words() -> set[str]:
    """Every word the generated texts use (names, nouns and verb forms of the relations, set phrases)."""
    words = set(EXTRA_WORDS) | set(ADJECTIVES) | set(PREPOSITIONS) | set(FIRST_NAMES) | set(LAST_NAMES)
    words |= set(PLACES) | set(STORY_VERBS) | set(NUMBERS) | set(DAYS)
    words |= {w for pair in NOUNS + VERBS for w in pair}
    words |= {w for p in PHRASES for w in tokenize(p)}
    return {w for w in words if w[0].isalnum()}


@lru_cache(maxsize=1)
def build_vocab() -> Vocab:
    """The vocabulary, from the generator's words, spoken English counts and the training English
    (`english.sentences("train")`):

    1. marks: every ASCII punctuation mark and the clitics ("n't", "'s", ...);
    2. words: the generator's words, then the most frequent spoken words up to `N_SPOKEN` in all, then the most
       frequent words of the training English up to `N_WORDS` (ties alphabetical), sorted;
    3. pieces: every letter and digit, alone and as "##" continuation; the `N_FIRST_PIECES` word beginnings and
       `N_NEXT_PIECES` continuations of 2-4 characters that the English's other words use most (each counted
       once per occurrence of the word), so a rare word is read in a few pieces, not letter by letter.
    Deterministic: counts, then the text, decide every order."""
    from mha_viz.models.tiny.english import sentences

    counts = Counter(w for s in sentences("train") for w in tokenize(s))
    wordlike = {w: c for w, c in counts.items() if w[0].isalnum() and w not in CLITICS}
    chosen = generator_words()
    ranked = lambda counter: [w for w, _ in sorted(counter.items(), key=lambda wc: (-wc[1], wc[0]))]  # noqa: E731
    for limit, source in ((N_SPOKEN, spoken_counts()), (N_WORDS, wordlike)):
        for w in ranked(source):
            if len(chosen) >= limit:
                break
            if w.isascii() and w.isalnum() and tokenize(w) == [w]:
                chosen.add(w)
    first, rest = Counter(), Counter()
    for w, c in wordlike.items():
        if w in chosen:
            continue
        for n in range(2, 5):
            if len(w) > n:
                first[w[:n]] += c
            for i in range(1, len(w) - n + 1):
                rest[CONTINUES + w[i : i + n]] += c
    words = sorted(chosen)
    marks = list(PUNCTUATION) + list(CLITICS)
    singles = [p for p in LETTERS + DIGITS if p not in chosen]
    pieces = singles + [CONTINUES + c for c in LETTERS + DIGITS]
    pieces += [p for p in ranked(first)[:N_FIRST_PIECES] if p not in chosen] + ranked(rest)[:N_NEXT_PIECES]
    return Vocab(list(SPECIALS) + marks + words + pieces, len(words), len(marks))


def vocabulary_words() -> tuple[str, ...]:
    """Every whole word of the vocabulary (no specials, punctuation or pieces), in vocabulary order: what random
    in-vocabulary sequences are drawn from."""
    return build_vocab().whole_words


@dataclass(frozen=True)
class ExampleSentence:
    relation: str  # "nearby", "repeat" or "agreement"
    label: str  # what to look for, shown next to the button
    text: str


def example_sentences() -> list[ExampleSentence]:
    """Fixed, readable sentences for the app's one-click examples, labelled by the relation they show: ordinary
    English, typed as a student would (capitals, punctuation), which the tokenizer reads whole (issue 51)."""
    return [
        ExampleSentence("nearby", "Counting: each word follows from the one before",
                        "One, two, three, four, five, six, seven."),
        ExampleSentence("nearby", "A set phrase",
                        "Once upon a time there was a little house. At the end of the day we went home."),
        ExampleSentence("repeat", "A sentence said twice: from its second word on, the second copy can be copied",
                        "My cat likes to sleep on the warm windowsill after lunch. "
                        "My cat likes to sleep on the warm windowsill after lunch."),
        ExampleSentence("repeat", "A name comes back: the last name can be copied from its first mention",
                        "Anna Berg went to the market. Tom Lind saw Anna Berg at the park."),
        ExampleSentence("repeat", "Two people, each mentioned again",
                        "Mia Frost and Leo Hart walked to the river. Later Leo Hart found the keys. "
                        "Mia Frost gave Leo Hart a red cup."),
        ExampleSentence("repeat", "A list of words said again: from its second word on, it can be copied",
                        "Anna Berg said: red lamp, river, cup. Then Tom Lind said: red lamp, river, cup."),
        ExampleSentence("agreement", "The verb agrees with 'keys', not with the nearer 'cabinet'",
                        "The keys to the cabinet are on the table."),
        ExampleSentence("agreement", "The verb agrees with 'dog', not with the nearer 'trees'",
                        "The old dog near the tall trees is happy."),
        ExampleSentence("agreement", "The verb agrees with 'teachers', not with 'child'",
                        "The teachers with the little child were quiet."),
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
