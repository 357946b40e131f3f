"""The tiny model's tokenizer loses no word: whole words where the vocabulary has them, pieces for the rest,
<unk> only for a character no piece reads (issue 51)."""
import pytest

from mha_viz.models.tiny.vocabulary import CONTINUES, UNK, build_vocab, tokenize

# Thirty ordinary sentences of the kind a student types (school, news, stories, instructions), written for this
# test: none is from the training text.
SENTENCES = (
    "My little brother forgot his lunch box on the bus this morning.",
    "Please read chapter four before Thursday and answer the questions at the end.",
    "The city council voted to build a new bridge across the river next year.",
    "Grandma baked two apple pies, and we ate one of them before dinner.",
    "If it rains tomorrow, the football match will be moved to Saturday.",
    "Mix the flour with the sugar, then add three eggs and stir slowly.",
    "Our teacher, Mrs. Patel, showed us how volcanoes form under the ocean.",
    "The museum opens at 9:30 and closes at 5 in the afternoon.",
    "Sam didn't want to go to the dentist, but his mother made him go.",
    "Scientists say the summer of 2023 was one of the hottest on record.",
    "A fox crept quietly through the garden while the family was asleep.",
    "I'm going to the library after school to return my books.",
    "Turn left at the traffic lights and walk straight for about 200 meters.",
    "The players celebrated loudly when the referee blew the final whistle.",
    "Emma's favourite song played on the radio during the long drive home.",
    "Water boils at 100 degrees Celsius at sea level.",
    "We couldn't find the keys anywhere, so we called a neighbour for help.",
    "The old lighthouse stood alone on the rocky cliff above the harbour.",
    "Wash your hands with soap for at least twenty seconds.",
    "The storm knocked down several trees and cut power to thousands of homes.",
    "Who left the window open in the kitchen last night?",
    "Maria and Ahmed are working together on a project about recycling.",
    "The price of bread has gone up again this month.",
    "Once the sun set, the children lit a small fire and told ghost stories.",
    "You should always check the weather before you go hiking in the mountains.",
    "The train to Manchester was delayed by forty minutes because of snow.",
    "She smiled, closed her notebook, and walked out of the classroom.",
    "Plants need light, water and air to grow healthy and strong.",
    "The new phone costs $499, which is too expensive for most students.",
    "After a long day at work, Dad likes to sit in the garden with a cup of tea.",
)


@pytest.fixture(scope="module")
def vocab():
    return build_vocab()


def test_no_word_of_thirty_ordinary_sentences_is_unknown(vocab):
    words = [w for s in SENTENCES for w in tokenize(s)]
    tokens = [t for s in SENTENCES for t in vocab.tokenize(s)]
    assert UNK not in tokens
    # Most words are read whole (a word a student recognises), the rest in pieces: 336 of 369 at 5,000 words.
    alnum = [w for w in words if w[0].isalnum()]
    whole = [w for w in alnum if w in vocab.whole_words]
    assert len(whole) / len(alnum) > 0.85, sorted(set(alnum) - set(whole))


def test_made_up_words_are_read_in_pieces(vocab):
    for word in ("zxqv", "blorptastic", "qwertyuiop", "xkcd42"):
        pieces = vocab.split(word)
        assert UNK not in pieces and len(pieces) > 1
        assert pieces[0][:2] != CONTINUES and all(p.startswith(CONTINUES) for p in pieces[1:])
        assert "".join(p.removeprefix(CONTINUES) for p in pieces) == word  # the pieces spell the word


def test_a_capital_letter_never_makes_a_word_unknown(vocab):
    assert vocab.tokenize("The Cat SAT. the cat sat.") == ["the", "cat", "sat", "."] * 2


def test_punctuation_numbers_and_contractions(vocab):
    assert vocab.tokenize("Don't stop: it's 3.14!") == ["do", "n't", "stop", ":", "it", "'s", "3", ".", "1", "##4", "!"]
    marks = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
    assert vocab.tokenize(marks) == list(marks)


def test_typography_and_accents_read_as_typed_ascii(vocab):
    assert vocab.tokenize("\u201cCaf\u00e9\u201d \u2014 na\u00efve") == vocab.tokenize('"cafe" - naive')


def test_only_unreadable_characters_are_unknown(vocab):
    tokens = vocab.tokenize("I like \U0001F600 and \u65e5\u672c tea")
    assert tokens.count(UNK) == 3
    assert [t for t in tokens if t != UNK] == ["i", "like", "and", "tea"]


def test_vocabulary_is_built_deterministically_and_round_trips(vocab, tmp_path):
    assert build_vocab.__wrapped__().tokens == vocab.tokens  # built again, uncached: the same ids
    vocab.save(tmp_path / "vocab.json")
    from mha_viz.models.tiny.vocabulary import Vocab

    again = Vocab.load(tmp_path / "vocab.json")
    assert again.tokens == vocab.tokens and again.whole_words == vocab.whole_words and again.pieces == vocab.pieces
