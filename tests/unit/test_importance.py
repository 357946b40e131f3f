"""Head importance in batch equals the one-head-at-a-time loop."""
import pytest
import torch

from mha_viz.analysis.importance import head_importance
from mha_viz.models.bert.adapter import load_minilm
from mha_viz.models.hf import load_smollm2

from reference import head_importance_loop


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


@pytest.mark.parametrize("name", ["tiny", "minilm", "smollm2"])
def test_resuming_after_the_unedited_layers_changes_no_number(name):
    """run_batch_keep skips the layers before the first edited one (taken from the unedited run) and computes
    only the logits asked for: the same numbers as every layer computed, rows edited in different layers."""
    from helpers import loaded

    model = loaded(name)
    text = "When Mary and John went to the store, John gave a drink to"
    L, H = model.n_layers, model.n_heads
    keep = torch.ones(3, L, H)  # (B, L, H)
    keep[0, L // 2, 1] = keep[1, L - 1, 0] = keep[2, L - 1, H - 1] = 0.0
    assert model.can_resume, f"{name} should resume (its stack reports edit.start)"
    out, logits = model.run_batch_keep(text, keep)
    at_last = model.run_batch_keep(text, keep, positions=[-1])[1]
    own = "can_resume" in vars(model)  # the transformers adapter sets it per instance, the in-repo ones per class
    model.can_resume = False  # for this test only: every layer computed, the reference
    try:
        full_out, full_logits = model.run_batch_keep(text, keep)
    finally:
        if own:
            model.can_resume = True
        else:
            del model.can_resume
    # Float32 rounding only: the resumed rows go through matmuls of other batch shapes, whose kernels may sum in
    # another order (SmolLM2 on an AVX-512 Xeon: 7.6e-05 on outputs up to 36, 2e-06 of their size; within 1e-5 on
    # the AVX2 EPYC before), so the tolerance is relative to each tensor's size.
    def close(a, b, rel):
        return torch.allclose(a, b, atol=rel * float(b.abs().max()), rtol=0)

    assert close(out, full_out, 1e-5)
    if logits is not None:
        assert close(logits, full_logits, 1e-5)
        assert at_last.shape == (3, 1, full_logits.shape[-1])
        assert close(at_last[:, 0], full_logits[:, -1], 1e-5)


@pytest.mark.parametrize("name", ["minilm", "smollm2"])
def test_the_gradient_estimate_ranks_heads_as_the_exact_map_does(name):
    """The instant estimate (second-order, sampled) against the exact single-head ablation map: it is labelled an
    estimate; this checks it is a useful one (rank correlation over every head)."""
    from scipy.stats import spearmanr

    from mha_viz.analysis.importance import importance_estimate

    from helpers import loaded

    model = loaded(name)
    text = "The keys to the cabinet are on the table, so Anna gave the keys to Ben."
    exact = head_importance(model, text)
    estimate = importance_estimate(model, text, samples=16)
    rho = spearmanr(exact.flatten(), estimate.flatten())[0]
    print(f"{name}: Spearman rho {rho:.2f} over {exact.numel()} heads")
    assert rho > 0.6
    off = frozenset({(0, 1)})
    assert importance_estimate(model, text, base_off=off, samples=2)[0, 1] == 0
