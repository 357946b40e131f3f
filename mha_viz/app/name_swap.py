"""Names in a sentence, as the Patching view swaps them: the second sentence of a pair is the first with two names
exchanged (Wang et al. 2022's IOI pairs), found by capitalisation, the model's own name words, and where a sentence
starts. Pure text: no model, no streamlit, so it is tested alone and any view may use it."""
from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z]+")
# Capitalised words that start sentences without being names; enough for the default, which the user can edit.
# Since a name can have several words ("Mary Smith"), an opener left out would join the name after it ("Yesterday
# Mary"): the list holds the common openers (conjunctions, adverbs of time, pronouns, determiners, titles).
_NOT_NAMES = frozenset("A After All Also Although An And Another Any As At Because Before Both But By Dear Dr During "
                       "Each Either Even Every Finally First For From He Her Here His How However I If In It Its "
                       "Just Last Later Many Meanwhile Miss Most Mr Mrs Ms My Neither Never Next No Nobody Not Now "
                       "Of On Once One Only Or Our Perhaps Since So Some Someone Soon Still Suddenly That The Their "
                       "Then There These They This Those Though Today Together Tomorrow Tonight Until We What When "
                       "Where Which While Who Why With Yes Yesterday Yet You Your".split())


_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+)$")


def names_in(text: str, known: frozenset[str] = frozenset()) -> list[tuple[int, int, str]]:
    """Every mention of a name in `text`, in order: (start, end, the name). A name is a run of name words with
    only spaces between them ("Mary Smith"); a name word is capitalised (and not one of the sentence openers in
    _NOT_NAMES) or one of `known`, the words a model knows as names (`Model.name_words`: the tiny model's
    vocabulary is lowercase, "anna berg")."""
    words = [m for m in _WORD.finditer(text)
             if (m.group()[0].isupper() and m.group()[1:].islower() and m.group() not in _NOT_NAMES)
             or m.group().lower() in known]
    runs: list[list[re.Match]] = []
    for m in words:
        if runs and text[runs[-1][-1].end():m.start()] == " ":
            runs[-1].append(m)
        else:
            runs.append([m])
    return [(run[0].start(), run[-1].end(), text[run[0].start():run[-1].end()]) for run in runs]


def swap(text: str, known: frozenset[str] = frozenset()) -> tuple[str, str, str] | None:
    """(second sentence, the name taken out, the name put in): the text with its last name swapped for the other
    name it mentions ("..., John gave a drink to" -> "..., Mary gave a drink to"). None when it names fewer than
    two people. `known`: the model's own name words (`names_in`). A capitalised word is only a guess at a name,
    so names that come back are preferred (the indirect-object pattern: "Mary and John ... John gave ... to
    Mary"), then words capitalised inside a sentence, over a word that only starts one: a long text's "Inside,
    the shop ..." and "... the end of August" are not the pair to swap when Mary and John come back. The name
    put in has as many words as the one taken out where the text has one (a two-word name for a two-word name,
    so the sentences stay as long)."""
    found = names_in(text, known)
    names = list(dict.fromkeys(name for _, _, name in found))
    if len(names) < 2:
        return None
    counts = {name: sum(1 for _, _, n in found if n == name) for name in names}
    inside = {name for start, _, name in found if not _SENTENCE_START.search(text[:start])}

    def rank(name: str) -> int:  # 0: comes back, 1: inside a sentence or a known name, 2: only starts a sentence
        return 0 if counts[name] > 1 else 1 if name in inside or name.split()[0].lower() in known else 2

    best = min(rank(name) for name in names)
    start, end, last = next((s, e, n) for s, e, n in reversed(found) if rank(n) == best)
    others = [name for name in reversed(names) if name != last]  # the most recently first-mentioned first
    # One of as many words first (a name of another length changes the token count, and patching needs the
    # same), then the best-ranked; min keeps the first of equals.
    other = min(others, key=lambda n: (len(n.split()) != len(last.split()), rank(n)))
    return text[:start] + other + text[end:], last, other


def final_name(text: str, known: frozenset[str] = frozenset()) -> tuple[int, str, str] | None:
    """(where the name starts, the name, the other name) when the text's final words (a full stop or other
    punctuation after them allowed) are one of the two names `swap` swaps: "..., John gave a drink to Mary." is
    then the prompt "..., John gave a drink to" with its answer " Mary" against " John". None otherwise."""
    made, found = swap(text, known), names_in(text, known)
    if made is None or not found or re.search(r"[A-Za-z0-9]", text[found[-1][1]:]):
        return None
    start, _, name = found[-1]
    if name not in made[1:]:
        return None
    return start, name, made[2] if name == made[1] else made[1]


def swapped(text: str, known: frozenset[str] = frozenset()) -> str:
    """The second sentence `swap` makes; the text itself when it names fewer than two people. A text that ends
    with one of the two names keeps it and swaps, in the text before it, the last mention of either name for the
    other (the subject's second mention in "When Mary and John ..., John gave a drink to Mary."), as for a text
    that stops before the name: the final name is the answer, not a detail to change."""
    ending = final_name(text, known)
    if ending is not None:
        start, name, other = ending
        mentions = [(s, e, n) for s, e, n in names_in(text[:start], known) if n in (name, other)]
        if mentions:  # always: the other name is mentioned before the final one
            s, e, n = mentions[-1]
            return text[:s] + (other if n == name else name) + text[e:]
    made = swap(text, known)
    return made[0] if made else text


def changed_words(text: str, source: str) -> tuple[str, str] | None:
    """(word in the first sentence, word in the second) where two sentences of as many words differ in one word,
    or in one run of neighbouring words (a two-word name for another: "tom lind" -> "anna berg"), whose first
    words are then the pair; None otherwise."""
    a, b = text.split(), source.split()
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if len(a) != len(b) or not diff or diff != list(range(diff[0], diff[-1] + 1)):
        return None
    strip = lambda w: w.strip(".,;:!?\"'()")  # noqa: E731
    first, second = strip(a[diff[0]]), strip(b[diff[0]])
    return (first, second) if first and second and first != second else None
