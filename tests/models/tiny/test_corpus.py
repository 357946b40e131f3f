"""The generator is seeded, and its ground truth points at the right words (corpus and vocabulary)."""
import random

import pytest

from mha_viz.models.tiny import corpus, vocabulary
from mha_viz.models.tiny.corpus import agreement_examples, nearby_examples, repeat_examples, training_texts
from mha_viz.models.tiny.vocabulary import BOS, UNK, build_vocab, example_sentences, tokenize

SG = {s for s, _ in corpus.NOUNS}
PL = {p for _, p in corpus.NOUNS}


def test_seeded_determinism():
    assert training_texts(50, 7, 64) == training_texts(50, 7, 64)
    assert training_texts(50, 7, 64) != training_texts(50, 8, 64)
    assert agreement_examples(20, 1) == agreement_examples(20, 1)
    assert repeat_examples(20, 1) == repeat_examples(20, 1)


def test_global_random_state_is_not_used():
    random.seed(0)
    a = training_texts(5, 1, 64)
    random.seed(99)
    assert training_texts(5, 1, 64) == a


def test_lengths_and_bos():
    for ex in training_texts(200, 0, 64) + agreement_examples(50, 0) + repeat_examples(50, 0) + nearby_examples(50, 0):
        assert ex.tokens[0] == BOS and BOS not in ex.tokens[1:]
        assert len(ex.tokens) <= 64


@pytest.mark.parametrize("attractor", ["opposite", "same", "random"])
def test_agreement_ground_truth(attractor):
    for ex in agreement_examples(200, 3, attractor):
        subj, verb, attr = ex.tokens[ex.subject_pos], ex.tokens[ex.verb_pos], ex.tokens[ex.attractor_pos]
        assert subj in (PL if ex.plural else SG)
        assert verb == ex.verb_forms[int(ex.plural)]
        assert ex.tokens[ex.attractor_pos + 1 : ex.verb_pos] == ()  # the attractor sits right before the verb
        assert ex.subject_pos < ex.attractor_pos < ex.verb_pos
        if attractor == "opposite":
            assert attr in (SG if ex.plural else PL)
        if attractor == "same":
            assert attr in (PL if ex.plural else SG)


def test_agreement_without_attractor():
    for ex in agreement_examples(50, 3, "none"):
        assert ex.attractor_pos is None and ex.verb_pos == ex.subject_pos + 1
        assert ex.tokens[ex.verb_pos] == ex.verb_forms[int(ex.plural)]
    with pytest.raises(ValueError, match="attractor must be"):
        agreement_examples(1, 0, "nearest")


def test_training_attractor_number_is_independent_of_subject():
    # Otherwise "take the opposite of the nearest noun" would solve agreement without looking at the subject.
    same = opposite = 0
    rng = random.Random(0)
    for _ in range(2000):
        words, info = corpus.agreement_sentence(rng, "random")
        attr_plural = words[info["attractor_pos"]] in PL
        same += attr_plural == info["plural"]
        opposite += attr_plural != info["plural"]
    assert 0.45 < same / (same + opposite) < 0.55


def test_repeat_ground_truth():
    names = lists = 0
    for ex in repeat_examples(100, 5) + repeat_examples(100, 5, lists=True) + training_texts(100, 5, 64):
        for first, second in ex.repeats:
            assert first < second
            # The continuation is copyable: the same token follows both mentions.
            assert ex.tokens[first] == ex.tokens[second] and ex.tokens[first + 1] == ex.tokens[second + 1]
            if ex.tokens[first] in corpus.FIRST_NAMES:
                assert ex.tokens[first + 1] in corpus.LAST_NAMES
                names += 1
            else:
                assert ex.tokens[first] in corpus.LIST_WORDS and ex.tokens[first - 1] in corpus.LIST_WORDS + (":",)
                lists += 1
    assert names > 100 and lists > 50
    assert all(ex.tokens[f] in corpus.FIRST_NAMES for ex in repeat_examples(50, 6) for f, _ in ex.repeats)


def test_names_are_unique_within_a_text():
    for ex in training_texts(300, 2, 64):
        pairs = {(a, b) for a, b in zip(ex.tokens, ex.tokens[1:]) if a in corpus.FIRST_NAMES}
        firsts = [a for a, _ in pairs]
        assert len(firsts) == len(set(firsts)), ex.text


def test_tokenizer_and_vocab():
    assert tokenize("The Keys, too.") == ["the", "keys", ",", "too", "."]
    v = build_vocab()
    assert v.words[:3] == ["<pad>", "<bos>", "<unk>"]
    assert v.id("zxqv") == v.unk_id and v.word(v.unk_id) == UNK  # not one token: the tokenizer reads it in pieces
    assert v.encode(["the", "keys"]) == [v.id("the"), v.id("keys")]
    assert 5000 < len(v) < 6000  # 5,000 whole words and their pieces: the embedding stays small (assets/ < 30 MB)
    with pytest.raises(IndexError, match="outside the vocabulary"):
        v.word(100_000)


def test_vocab_roundtrip(tmp_path):
    v = build_vocab()
    v.save(tmp_path / "vocab.json")
    assert vocabulary.Vocab.load(tmp_path / "vocab.json").words == v.words


def test_every_generated_word_is_in_the_vocabulary():
    v = build_vocab()
    for ex in training_texts(300, 4, 64):
        assert all(t in v for t in ex.tokens)
        assert tokenize(ex.text) == list(ex.tokens[1:])  # the text round-trips through the tokenizer


def test_example_sentences_cover_each_relation_are_ordinary_english_and_read_whole():
    from mha_viz.models.tiny.vocabulary import ground_truth

    v = build_vocab()
    sentences = example_sentences()
    assert {s.relation for s in sentences} == {"nearby", "repeat", "agreement"}
    for s in sentences:
        tokens = v.tokenize(s.text)
        assert s.text[0].isupper() and s.text[-1] == "."  # typed as a student would
        assert all(t in v.whole_words or not t[0].isalnum() for t in tokens), (s.text, tokens)
        truth = ground_truth(["<bos>", *tokens])
        if s.relation == "agreement":
            assert truth.subjects, s.text
        if s.relation == "repeat":
            assert truth.repeats or s.text.count(". ") == 1, s.text


def test_ground_truth_reads_back_what_the_generator_wrote():
    from mha_viz.models.tiny.vocabulary import ground_truth

    for example in agreement_examples(100, seed=11):
        assert (example.subject_pos, example.verb_pos) in ground_truth(list(example.tokens)).subjects
    for example in repeat_examples(50, seed=11):
        assert set(example.repeats) <= set(ground_truth(list(example.tokens)).repeats)
    assert ground_truth(["<bos>", "the", "keys", "to", "the", "cabinet", "are", "on", "the", "table", "."]).subjects \
        == ((2, 6),)


def test_random_repeats_ground_truth_and_share():
    words = set(corpus.vocabulary_words())
    assert len(words) > 150 and not words & {*vocabulary.SPECIALS, ".", ",", ":"}
    texts = training_texts(400, 9, 64, random_share=0.5)
    rand = [ex for ex in texts if ex.relation == "random-repeat"]
    assert 0.4 < len(rand) / len(texts) < 0.6
    for ex in rand:
        assert len(ex.tokens) == 64 and set(ex.tokens[1:]) <= words
        assert ex.repeats
        for first, second in ex.repeats:
            # Each recorded later token repeats its first-copy token, and so does the token after it.
            assert first < second and ex.tokens[first] == ex.tokens[second]
            assert ex.tokens[first + 1] == ex.tokens[second + 1]
    assert training_texts(50, 9, 64, 0.5) == training_texts(50, 9, 64, 0.5)
    with pytest.raises(ValueError, match="probability"):
        training_texts(1, 0, 64, random_share=1.5)


def test_late_repeats_put_a_random_sequence_anywhere_after_ordinary_sentences():
    words = set(corpus.vocabulary_words())
    texts = training_texts(600, 11, 65, random_share=0.3, late_share=0.3)
    late = [ex for ex in texts if ex.relation == "late-repeat"]
    assert 0.2 < len(late) / len(texts) < 0.4
    assert 0.2 < sum(ex.relation == "random-repeat" for ex in texts) / len(texts) < 0.4
    first_ends = []
    for ex in late:
        assert len(ex.tokens) == 65 and ex.tokens[0] == BOS
        firsts = sorted({f for f, _ in ex.repeats})
        start, n = firsts[0], ex.repeats[0][1] - ex.repeats[0][0]
        body = ex.tokens[start:]
        assert set(body) <= words and len(set(body[:n])) == n  # n distinct random words ...
        assert all(body[i] == body[i % n] for i in range(len(body)))  # ... said again until the text is full
        before = ex.tokens[1:start]
        cut = max((i for i, t in enumerate(before) if t == "."), default=-1) + 1  # whole sentences, or none ...
        filler = before[cut:]  # ... then distinct random words up to its start
        assert set(filler) <= words and len(set(filler)) == len(filler) and not set(filler) & set(body)
        for first, second in ex.repeats:
            assert ex.tokens[first] == ex.tokens[second] and ex.tokens[first + 1] == ex.tokens[second + 1]
        first_ends.append(start + n - 1)
    # The first copy, whose words a later copy needs to read the previous token of, reaches the last third.
    assert max(first_ends) >= 2 * 65 // 3 and min(first_ends) < 65 // 3
    assert training_texts(50, 9, 64, 0.3, 0.3) == training_texts(50, 9, 64, 0.3, 0.3)
    with pytest.raises(ValueError, match="probability"):
        training_texts(1, 0, 64, random_share=0.6, late_share=0.6)


def test_held_out_random_probes():
    seqs = corpus.random_sequences(20, seed=5, length=30)
    assert all(len(ex.tokens) == 31 and ex.tokens[0] == BOS for ex in seqs)
    assert len({ex.tokens for ex in seqs}) == 20
    for ex in corpus.repeated_sequences(30, seed=5, lengths=(8, 24)):
        m = (len(ex.tokens) - 1) // 2
        assert 8 <= m <= 24 and ex.tokens[1 : m + 1] == ex.tokens[m + 1 :]
        assert len(set(ex.tokens[1 : m + 1])) == m  # distinct words: "the first occurrence" is unambiguous
        assert ex.repeats == tuple((1 + i, 1 + m + i) for i in range(m))


def test_early_repeats_say_a_short_sequence_twice_right_after_bos_then_a_random_repeat():
    words = set(corpus.vocabulary_words())
    texts = training_texts(600, 12, 65, random_share=0.3, late_share=0.2, early_share=0.2)
    early = [ex for ex in texts if ex.relation == "early-repeat"]
    assert 0.12 < len(early) / len(texts) < 0.28
    second_starts = []
    for ex in early:
        assert len(ex.tokens) == 65 and ex.tokens[0] == BOS and set(ex.tokens[1:]) <= words
        start, m = ex.repeats[0][0], ex.repeats[0][1] - ex.repeats[0][0]
        assert 1 <= start <= 3 and 3 <= m <= 5
        short = ex.tokens[start : start + m]
        assert ex.tokens[start + m : start + 2 * m] == short and len(set(short)) == m  # said twice, distinct words
        body = ex.tokens[start + 2 * m :]
        n = next(i for i in range(1, len(body)) if body[i] == body[0])
        assert n >= 4 and all(body[i] == body[i % n] for i in range(len(body)))  # then a random repeat ...
        assert not set(body) & set(short) and not set(ex.tokens[1:start]) & (set(body) | set(short))  # ... of others
        for first, second in ex.repeats:
            assert first < second and ex.tokens[first] == ex.tokens[second]
            # The short sequence's last word is followed by the random repeat the second time, not by itself.
            assert ex.tokens[first + 1] == ex.tokens[second + 1] or second == start + 2 * m - 1
        second_starts.append(start + m)
    # The second copy, where induction is needed, falls in the first positions: 4 (3 words after <bos>) to 12.
    assert min(second_starts) == 4 and max(second_starts) <= 12
    # No early share: the texts are those of the recipe without it, draw for draw.
    assert training_texts(80, 5, 65, 0.4, 0.2) == training_texts(80, 5, 65, 0.4, 0.2, 0.0)
    with pytest.raises(ValueError, match="probability"):
        training_texts(1, 0, 64, random_share=0.5, late_share=0.3, early_share=0.3)
