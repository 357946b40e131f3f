"""Head importance in batch equals the one-head-at-a-time loop."""
import pytest
import torch

from mha_viz.analysis.importance import head_importance
from reference import head_importance_loop
from mha_viz.models.hf import load_smollm2
from mha_viz.models.bert.adapter import load_minilm


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


def test_batched_importance_equals_loop_encoder(minilm):
    text = "The keys to the cabinet are on the table."
    seen = []
    batched = head_importance(minilm, text, chunk=10, progress=seen.append)
    loop = head_importance_loop(minilm, text)
    assert batched.shape == (6, 12)
    assert torch.allclose(batched, loop, atol=1e-5)
    assert batched.max() > 1e-4  # some head matters
    assert seen[-1] == 1.0 and seen == sorted(seen)


def test_importance_on_top_of_heads_already_off(minilm):
    text = "A bird sang."
    off = frozenset({(0, 0), (3, 4)})
    batched = head_importance(minilm, text, base_off=off, chunk=32)
    assert batched[0, 0] == 0 and batched[3, 4] == 0
    assert torch.allclose(batched, head_importance_loop(minilm, text, base_off=off), atol=1e-5)


def test_batched_importance_equals_loop_causal_lm():
    smol = load_smollm2()
    text = "Paris is the capital of"
    batched = head_importance(smol, text, chunk=45)
    # The loop over 270 heads is slow; check a spread of heads against single runs.
    base = smol.run(text)
    from mha_viz.analysis import next_token_kl

    for layer, head in [(0, 0), (7, 3), (15, 8), (29, 4)]:
        kl = next_token_kl(base.logits, smol.run(text, ablate={(layer, head)}).logits)
        assert abs(batched[layer, head].item() - kl) < 1e-4
    assert batched.max() > 1e-3
