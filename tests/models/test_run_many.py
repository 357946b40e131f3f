"""`Model.run_many`, the multi-text batch of the contract: texts of different lengths share a forward, right-padded,
and each text comes out as when it runs alone (to float tolerance), for every model kind; the head means that mean
ablation uses are built on the same padded batches."""
import pytest
import torch

from mha_viz.contract import Model
from mha_viz.models import interventions

KINDS = ["tiny", "minilm", "smollm2", "llama", "gpt2", "masked", "encoder"]
# Different lengths (1 to 20-odd tokens), so every batch pads; the tiny model reads only its own words.
TEXTS = {
    "tiny": ["the dog sees the cat .", "a", "the keys near the old cabinet have a red lamp .", "one , two ."],
    "other": ["The cat sat on the mat.", "Hi", "The keys to the old cabinet are on the table near the window, "
              "said the farmer to the doctor.", "one two three"],
}


def _texts(kind):
    return TEXTS["tiny" if kind.startswith("tiny") else "other"]


@pytest.mark.parametrize("kind", KINDS)
def test_padded_batches_give_each_text_its_own_run(kind, model_of):
    model = model_of(kind)
    texts = _texts(kind)
    assert type(model).pads  # the padded path is the one under test
    order, batches = [], []
    batched = model.run_many(texts, lambda i, run: (order.append(i), run)[1], logits=True, progress=batches.append)
    assert batches == [len(texts)]  # one forward held them all, padded to the longest
    assert sorted(order) == list(range(len(texts)))
    lengths = {len(run.tokens) for run in batched}
    assert len(lengths) == len(texts)  # so every text but the longest was padded
    for text, got in zip(texts, batched):
        alone = model.run(text)
        assert (got.tokens, got.token_ids, got.special, got.unknown) == (alone.tokens, alone.token_ids, alone.special,
                                                                          alone.unknown)
        assert got.attentions.shape == alone.attentions.shape
        torch.testing.assert_close(got.attentions, alone.attentions, atol=2e-5, rtol=1e-4)
        scale = float(alone.output.abs().max())
        torch.testing.assert_close(got.output, alone.output, atol=1e-5 * scale + 1e-6, rtol=1e-4)
        assert (got.logits is None) == (alone.logits is None)
        if alone.logits is not None:
            scale = float(alone.logits.abs().max())
            torch.testing.assert_close(got.logits, alone.logits, atol=1e-5 * scale + 1e-6, rtol=1e-4)


@pytest.mark.parametrize("kind", ["tiny", "minilm", "gpt2"])
def test_without_logits_the_runs_carry_none_and_the_reductions_are_kept_in_order(kind, model_of):
    model = model_of(kind)
    texts = _texts(kind)
    kept = model.run_many(texts, lambda i, run: (i, run.logits, run.attentions[0, 0, -1].sum()))
    assert [i for i, _, _ in kept] == list(range(len(texts)))
    assert all(logits is None for _, logits, _ in kept)
    assert all(abs(float(s) - 1.0) < 1e-5 for _, _, s in kept)  # the last row of each text's own attention


@pytest.mark.parametrize("kind", ["tiny", "minilm", "smollm2", "llama", "masked"])
def test_the_one_by_one_default_gives_the_same_runs(kind, model_of):
    """`Model.run_many` (what an adapter without padding gets) and the engine's padded one agree."""
    model = model_of(kind)
    texts = _texts(kind)
    padded = model.run_many(texts, lambda i, run: run.attentions)
    plain = Model.run_many(model, texts, lambda i, run: run.attentions)
    for a, b in zip(padded, plain):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_head_means_from_padded_batches_equal_the_mean_of_each_text_alone(kind, model_of, monkeypatch):
    model = model_of(kind)
    texts = tuple(_texts(kind))
    monkeypatch.setattr(interventions, "_MEANS", interventions.PerModelCache())  # computed here, not looked up
    means = model.head_means(texts)  # (L, H, dh)
    per_text = []
    for text in texts:
        enc = model.encoding(text)
        ordinary = [p for p in range(len(enc.ids)) if p not in enc.special] or list(range(len(enc.ids)))
        per_text.append(model.head_outputs(text)[:, :, ordinary].mean(2))  # (L, H, dh)
    expected = torch.stack(per_text).mean(0)
    torch.testing.assert_close(means, expected, atol=1e-5 * float(expected.abs().max()) + 1e-6, rtol=1e-4)


def test_batches_stay_within_both_budgets(model_of):
    model = model_of("smollm2")
    lengths = [3, 40, 7, 7, 500, 12, 40, 1, 64]
    groups = model._batches(lengths)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    per_row = model.n_layers * model.n_heads
    for g in groups:
        t = max(lengths[i] for i in g)
        assert len(g) == 1 or (len(g) * t <= interventions.BATCH_TOKENS
                               and len(g) * per_row * t * t <= interventions.BATCH_ATTENTION)
    assert [4] in groups  # 500 tokens of SmolLM2's 270 heads are over the attention budget: alone
