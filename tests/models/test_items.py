"""The written models and their learned twins read text one way (`mha_viz.models.items`): the same tokenising and
its errors, the same example texts, and batches padded (and, for an encoder, key-masked) so that `run_many` gives
each text the run it gets alone."""
from __future__ import annotations

import pytest
import torch

from mha_viz import load_model
from mha_viz.contract import InputError
from mha_viz.models.items import ItemsModel

# Two causal written models, an encoder (the histogram reads every position), and a learned twin.
MODELS = ("written-induction", "written-histogram", "learned-induction")


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    return load_model(request.param)


def test_both_families_share_one_reading_of_text(model):
    assert isinstance(model, ItemsModel)
    for name in ("encoding", "decode", "token_id", "examples", "lexicon", "batch", "output_projection"):
        assert getattr(type(model), name) is getattr(ItemsModel, name), f"{type(model).__name__} redefines {name}"


def test_items_encode_with_bos_first_and_say_the_vocabulary_when_refused(model):
    items = model.items
    text = " ".join(items.vocab[:3])
    enc = model.encoding(text)
    assert enc.labels == [items.bos, *text.split()] and enc.special == (0,)
    assert [model.decode(i) for i in enc.ids] == enc.labels
    assert [model.token_id(w) for w in text.split()] == enc.ids[1:]
    assert list(model.embeddings().labels) == list(items.labels)
    with pytest.raises(InputError, match="zebra") as err:
        model.encoding(text + " zebra")
    assert all(v in str(err.value) for v in items.vocab)
    with pytest.raises(InputError, match=f"at most {items.max_items} items"):
        model.encoding(" ".join([items.vocab[0]] * (items.max_items + 1)))


def test_example_texts_are_a_text_of_the_vocabulary_said_twice(model):
    for _, text, _ in model.examples():
        words = text.split()
        assert 2 <= len(words) <= model.items.max_items and set(words) <= set(model.items.vocab)
        half = len(words) // 2
        assert words[:half] == words[half:2 * half]


def test_a_padded_batch_gives_each_text_its_own_run(model):
    vocab, n = model.items.vocab, model.items.max_items
    texts = [" ".join(vocab[i % len(vocab)] for i in range(k)) for k in (2, n, 3)]
    together = model.run_many(texts, lambda i, run: run)
    for text, run in zip(texts, together):
        alone = model.run(text)
        assert run.tokens == alone.tokens
        assert torch.allclose(run.attentions, alone.attentions, atol=1e-5)
        assert torch.allclose(run.output, alone.output, atol=1e-4)
