"""One rule for special positions in every adapter (mha_viz.models.special): a position is special when the
tokenizer added it ([CLS], [SEP], <bos>), never because the text produced a special id (a typed "[MASK]" or
"<|im_start|>", the [UNK] an emoji becomes). Mean ablation leaves special positions out of a head's mean, so a typed
token must not move which positions the mean reads."""
import pytest
import torch

from mha_viz.models.hf import load_minilm_hf
from tests.helpers import loaded


@pytest.fixture(scope="module")
def minilm_hf():
    return load_minilm_hf()  # the transformers adapter on MiniLM's weights and tokenizer


@pytest.fixture(params=["minilm", "minilm-hf"])
def bert_like(request, minilm_hf):
    """MiniLM on the in-repo BERT adapter (what load_model("minilm") gives) and on the transformers adapter."""
    return loaded("minilm") if request.param == "minilm" else minilm_hf


def test_the_emoji_unk_is_unknown_not_special(bert_like):
    enc = bert_like.encoding("I like 🙂 a lot.")
    assert enc.labels[3] == "[UNK]"
    assert enc.special == (0, 7)  # [CLS] and [SEP]; before the rule: (0, 3, 7)
    assert enc.unknown == (3,)


@pytest.mark.parametrize("text", ["The [MASK] sat on the mat.", "[MASK] is [SEP] here [UNK] and [CLS]"])
def test_typed_special_tokens_are_the_texts(bert_like, text):
    enc = bert_like.encoding(text)
    assert "[MASK]" in enc.labels
    assert enc.special == (0, len(enc.ids) - 1)


def test_truncated_text_keeps_its_added_end(bert_like):
    enc = bert_like.encoding("word [MASK] " * 400)
    assert enc.dropped > 0 and enc.labels[-1] == "[SEP]"
    assert enc.special == (0, len(enc.ids) - 1)


def test_typed_im_start_is_not_special_for_smollm2():
    model = loaded("smollm2")
    for text in ("<|im_start|>The cat sat on the mat.", "The cat sat.<|im_start|>"):
        enc = model.encoding(text)
        assert "<|im_start|>" in enc.labels, enc.labels  # one token, a special id of the tokenizer
        assert enc.special == ()  # SmolLM2's tokenizer adds nothing to a text


def test_tiny_marks_only_its_bos():
    model = loaded("tiny")
    enc = model.encoding("the qwxyz sees the cat .")
    assert enc.special == (0,)
    assert 2 in enc.unknown and 2 not in enc.special  # <unk> is listed as unknown, like [UNK], never as special


def _mean_over(model, text, added):
    """A head's mean over the positions the tokenizer did not add, from its outputs -> (L, H, dh)."""
    outputs = model.head_outputs(text)  # (L, H, T, dh)
    ordinary = [p for p in range(outputs.shape[2]) if p not in added]
    return outputs[:, :, ordinary].mean(2)  # (L, H, dh)


@pytest.mark.parametrize("name, text, added", [
    # Before the rule head_means left the typed token out: max |difference| 0.17 ([MASK]), 0.18 (the emoji's
    # [UNK]), 0.43 (<|im_start|> at position 0 of SmolLM2, its sink), 0.81 (<|im_start|> at the end).
    ("minilm", "The [MASK] sat on the mat.", "ends"),
    ("minilm", "I like 🙂 a lot.", "ends"),
    ("smollm2", "<|im_start|>The cat sat on the mat.", "none"),
    ("smollm2", "The cat sat on the mat.<|im_start|>", "none"),
    ("tiny", "the qwxyz sees the cat .", "bos"),
])
def test_head_means_read_every_position_the_text_made(name, text, added):
    model = loaded(name)
    n = model.token_count(text)
    added = {"ends": (0, n - 1), "none": (), "bos": (0,)}[added]
    torch.testing.assert_close(model.head_means([text]), _mean_over(model, text, added), atol=1e-5, rtol=0)


def test_mean_ablation_moves_only_by_what_the_typed_token_says():
    """Typing [MASK] instead of a word changes the mean by that one position's output, weighted 1/n: the mean
    still reads the same positions (here 7 of 9), not one fewer."""
    model = loaded("minilm")
    typed, plain = "The [MASK] sat on the mat.", "The cat sat on the mat."
    a, b = model.head_outputs(typed), model.head_outputs(plain)  # (L, H, 9, dh) each
    assert a.shape == b.shape
    shift = model.head_means([typed]) - model.head_means([plain])  # (L, H, dh)
    torch.testing.assert_close(shift, (a[:, :, 1:-1] - b[:, :, 1:-1]).mean(2), atol=1e-5, rtol=0)
