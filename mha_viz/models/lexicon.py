"""The word lists a model's census inputs are drawn from.

    english_lexicon(model)  -> Lexicon: the English words below that `model` reads as one token each; what
                               `EditableModel.lexicon()` answers for every model without a vocabulary of its own
                               (the tiny model answers with its corpus's words, `TinyModel.lexicon`)
    lexicon(model)          -> model.lexicon(), kept for callers of the function

A word is kept only where `model.token_id` says it is exactly one token both after a space (" dog") and at the start
of a text ("dog"): so "the same word" is one token wherever it stands, and positions line up.
"""
from __future__ import annotations

import functools

from mha_viz.contract import InputError, Lexicon, Model

__all__ = ["Lexicon", "english_lexicon", "lexicon"]

# (singular, plural) nouns, adjectives, prepositions and (singular, plural) transitive verbs for English models.
NOUNS = (
    ("dog", "dogs"), ("cat", "cats"), ("key", "keys"), ("book", "books"), ("door", "doors"), ("table", "tables"),
    ("bird", "birds"), ("tree", "trees"), ("house", "houses"), ("car", "cars"), ("letter", "letters"),
    ("window", "windows"), ("teacher", "teachers"), ("farmer", "farmers"), ("lamp", "lamps"), ("chair", "chairs"),
    ("boat", "boats"), ("picture", "pictures"), ("cup", "cups"), ("horse", "horses"), ("girl", "girls"),
    ("boy", "boys"), ("friend", "friends"), ("player", "players"), ("student", "students"), ("doctor", "doctors"),
    ("river", "rivers"), ("road", "roads"), ("box", "boxes"), ("bag", "bags"), ("ship", "ships"), ("king", "kings"),
    ("plant", "plants"), ("song", "songs"), ("road", "roads"), ("apple", "apples"), ("shop", "shops"),
    ("city", "cities"), ("village", "villages"), ("garden", "gardens"),
)
ADJECTIVES = (
    "old", "new", "red", "small", "big", "green", "quiet", "dark", "bright", "little", "blue", "heavy", "happy",
    "warm", "tall", "young", "cold", "long", "strong", "black", "white", "good", "bad", "large", "short", "clean",
)
PREPOSITIONS = ("near", "behind", "beside", "under", "by", "with", "to", "of", "above", "from", "on", "in")
TRANSITIVE = (
    ("sees", "see"), ("likes", "like"), ("finds", "find"), ("wants", "want"), ("needs", "need"), ("takes", "take"),
    ("holds", "hold"), ("makes", "make"), ("helps", "help"), ("opens", "open"), ("keeps", "keep"),
    ("moves", "move"), ("loves", "love"), ("calls", "call"), ("gets", "get"), ("brings", "bring"),
)
# More common words for random sequences (any part of speech).
OTHER_WORDS = (
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state",
    "family", "group", "country", "problem", "hand", "part", "place", "case", "week", "company", "system",
    "program", "question", "work", "number", "night", "point", "home", "water", "room", "mother", "area", "money",
    "story", "fact", "month", "lot", "right", "study", "job", "word", "business", "issue", "side", "kind", "head",
    "service", "father", "power", "hour", "game", "line", "end", "member", "law", "market", "music", "food",
    "paper", "name", "party", "team", "idea", "body", "face", "office", "door", "health", "art", "war", "history",
    "level", "form", "air", "table", "moment", "rock", "color", "field", "love", "light", "stone", "wind", "fire",
    "sun", "moon", "star", "sea", "hill", "snow", "rain", "glass", "gold", "iron", "milk", "bread", "horse",
)


def _one_token(model: Model, word: str) -> bool:
    try:
        model.token_id(word)
        model.token_id(" " + word)
    except InputError:
        return False
    return True


def lexicon(model: Model) -> Lexicon:
    """The census's words for `model`: `model.lexicon()`."""
    return model.lexicon()


@functools.lru_cache(maxsize=8)  # a pure function of the tokenizer; kept off the shared model object
def english_lexicon(model: Model, min_words: int = 24) -> Lexicon:
    """The words of the lists above that `model` reads as one token each; InputError when too few are."""
    one = {w for w in {*OTHER_WORDS, *ADJECTIVES, *PREPOSITIONS, *(w for p in NOUNS + TRANSITIVE for w in p)}
           if _one_token(model, w)}
    nouns = tuple(p for p in dict.fromkeys(NOUNS) if p[0] in one and p[1] in one)
    verbs = tuple(p for p in TRANSITIVE if p[0] in one and p[1] in one)
    determiner = "the" if _one_token(model, "the") else ""
    words = tuple(sorted(one - set(PREPOSITIONS)))
    if len(words) < min_words or len(nouns) < 4 or len(verbs) < 2 or not determiner:
        raise InputError(
            f"{model.name}: only {len(words)} of the census's English words are single tokens for this tokenizer "
            f"({len(nouns)} noun pairs, {len(verbs)} verb pairs); the census needs at least {min_words} words, 4 "
            "noun pairs, 2 verb pairs and 'the'. Pass texts=... for the text scores, or use a model with an "
            "English word-level vocabulary.")
    period = "." if _one_token(model, ".") else ""
    return Lexicon(words=words, nouns=nouns, adjectives=tuple(a for a in ADJECTIVES if a in one),
                   prepositions=tuple(p for p in PREPOSITIONS if p in one) or ("of",), verbs=verbs,
                   determiner=determiner, object_determiner=determiner, period=period,
                   source="English words that are one token for this model's tokenizer")
