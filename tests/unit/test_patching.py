"""Patching, attribution patching and direct effects (mha_viz/analysis/patching.py) against independent references:
one Model.run per head, central finite differences, and a hand-built sum of the residual stream's parts."""
import pytest
import torch

from mha_viz.analysis.importance import head_importance
from mha_viz.analysis.patching import (
    Metric,
    attribution_patching,
    direct_effects,
    normalise,
    patching_map,
    rank_correlation,
    top_heads,
)
from mha_viz.contract import InputError

from helpers import loaded

TEXT = "the keys to the old cabinet are on the table"
SOURCE = "the key to the old cabinets is on the table"


@pytest.fixture(scope="module")
def tiny():
    return loaded("tiny")


def _metric(model, text=TEXT):
    """The logit difference between the two likeliest next words after TEXT: a metric that really moves."""
    top = model.run(text).logits[-1].topk(2).indices.tolist()
    return Metric("logit_diff", position=-1, answer=top[0], other=top[1])


def test_logit_difference_and_cosine_metrics():
    logits = torch.zeros(2, 3, 5)  # (B, T, V)
    logits[0, -1, 1], logits[0, -1, 4], logits[1, -1, 1] = 2.0, 0.5, -1.0
    m = Metric("logit_diff", position=-1, answer=1, other=4)
    assert m(None, logits).tolist() == [1.5, -1.0]
    assert float(m(None, logits[0])) == 1.5
    target = torch.randn(3, 4)  # (T, D)
    cos = Metric("cosine", target=target)
    assert torch.allclose(cos(target, None), torch.tensor(1.0))
    assert torch.allclose(cos(torch.stack([target, -target]), None), torch.tensor([1.0, -1.0]))
    with pytest.raises(InputError, match="LM head"):
        m(torch.zeros(3, 4), None)


def test_batched_patching_map_equals_one_run_per_head(tiny):
    metric = _metric(tiny)
    seen = []
    result = patching_map(tiny, TEXT, SOURCE, metric, chunk=5, progress=seen.append)
    assert result.patched.shape == (tiny.n_layers, tiny.n_heads)
    assert result.text_value == pytest.approx(float(metric(None, tiny.run(TEXT).logits)), abs=1e-5)
    assert result.source_value == pytest.approx(float(metric(None, tiny.run(SOURCE).logits)), abs=1e-5)
    for layer in range(tiny.n_layers):
        for head in range(tiny.n_heads):
            run = tiny.run(TEXT, patch={(layer, head)}, source=SOURCE)
            assert result.patched[layer, head] == pytest.approx(float(metric(None, run.logits)), abs=1e-4)
    assert (result.patched - result.text_value).abs().max() > 1e-3, "some head must move the metric"
    assert seen[-1] == 1.0 and seen == sorted(seen)
    moved = result.moved
    gap = result.source_value - result.text_value
    assert torch.allclose(moved * gap, result.patched - result.text_value, atol=1e-5)


def test_patching_map_refuses_a_length_mismatch(tiny):
    n, m = tiny.token_count(TEXT), tiny.token_count("the table")
    assert n == len(tiny.run(TEXT).tokens) and m == len(tiny.run("the table").tokens) and n != m
    with pytest.raises(InputError, match=rf"source text has {m} tokens and the text has {n}"):
        patching_map(tiny, TEXT, "the table", _metric(tiny))


def test_patching_map_for_an_encoder_uses_the_embedding_cosine():
    model = loaded("minilm")
    text, source = "The cat sat on the mat.", "The dog sat on the mat."
    metric = Metric("cosine", target=model.run(source).output)
    result = patching_map(model, text, source, metric, chunk=24)
    assert result.source_value == pytest.approx(1.0, abs=1e-5) and result.text_value < 0.999
    layer, head = top_heads(result.moved, 1)[0][0]
    run = model.run(text, patch={(layer, head)}, source=source)
    assert result.patched[layer, head] == pytest.approx(float(metric(run.output, None)), abs=1e-5)


def _interpolated(model, text, source, metric, head, eps):
    """The metric with one head's output moved a fraction eps of the way from the text's to the source's."""
    z_text, z_src = model.head_outputs(text), model.head_outputs(source)  # (L, H, T, dh)
    keep = torch.ones(1, model.n_layers, model.n_heads)
    keep[0, head[0], head[1]] = 0.0
    replace = (z_text + eps * (z_src - z_text))[None]  # (1, L, H, T, dh)
    return float(metric(*model.run_batch_keep(text, keep, replace)))


def test_attribution_equals_exact_patching_in_the_small_patch_limit(tiny):
    """Its gradient against a central finite difference: d metric / d eps at eps = 0 for a patch of size eps."""
    metric = _metric(tiny)
    estimate = attribution_patching(tiny, TEXT, SOURCE, metric)  # (L, H)
    assert estimate.shape == (tiny.n_layers, tiny.n_heads)
    eps = 1e-2
    for head, _ in top_heads(estimate, 4):
        slope = (_interpolated(tiny, TEXT, SOURCE, metric, head, eps)
                 - _interpolated(tiny, TEXT, SOURCE, metric, head, -eps)) / (2 * eps)
        assert estimate[head] == pytest.approx(slope, rel=2e-2, abs=1e-3)


def test_attribution_leaves_no_gradient_on_the_shared_model(tiny):
    attribution_patching(tiny, TEXT, SOURCE, _metric(tiny))
    assert all(p.grad is None for p in tiny.lm.parameters())


def test_direct_effects_and_the_rest_add_up_to_the_logit_difference(tiny):
    metric = _metric(tiny)
    parts = direct_effects(tiny.readout(TEXT), -1, metric.answer, metric.other)
    assert parts.total == pytest.approx(float(metric(None, tiny.run(TEXT).logits)), abs=1e-4)
    assert float(parts.heads.sum()) + parts.rest == pytest.approx(parts.total, abs=1e-3)
    assert parts.heads.abs().max() > 1e-3


def test_direct_effects_equal_a_hand_built_projection(tiny):
    """Each head's term z @ W_O through LayerNorm with its scale frozen, then onto W_U[a] - W_U[b], built here
    from the blocks' own modules and a recorded LayerNorm input."""
    metric = _metric(tiny)
    readout = tiny.readout(TEXT)
    lm = tiny.lm
    ids = torch.tensor([tiny.encode(TEXT)[1]])
    seen = []
    handle = lm.ln_f.register_forward_pre_hook(lambda module, args: seen.append(args[0][0, -1]))
    try:
        with torch.no_grad():
            lm(ids)
    finally:
        handle.remove()
    x = seen[0]  # (D,) the final residual at the last position
    scale = torch.sqrt(x.var(unbiased=False) + lm.ln_f.eps)
    u = lm.head.weight[metric.answer] - lm.head.weight[metric.other]  # (D,)
    z = tiny.head_outputs(TEXT)[:, :, -1]  # (L, H, dh)
    dh = z.shape[-1]
    expected = torch.zeros(tiny.n_layers, tiny.n_heads)
    for layer, block in enumerate(lm.blocks):
        for head in range(tiny.n_heads):
            term = block.attn.out.weight[:, head * dh:(head + 1) * dh] @ z[layer, head]  # (D,)
            expected[layer, head] = (lm.ln_f.weight * (term - term.mean()) / scale) @ u
    got = direct_effects(readout, -1, metric.answer, metric.other).heads
    assert torch.allclose(got, expected.detach(), atol=1e-4)


def test_mean_ablation_importance_equals_one_run_per_head(tiny):
    # The verb comes next: switching heads off moves this prediction (after "table" the retrained tiny model is
    # sure of "." whatever is off, so zero and mean ablation would both be ~0 there and could not be told apart).
    text = "the keys to the old cabinet"
    batched = head_importance(tiny, text, ablation="mean", chunk=5)
    base = tiny.run(text).logits[-1].log_softmax(-1)
    for layer, head in [(0, 0), (1, 2), (tiny.n_layers - 1, tiny.n_heads - 1)]:
        after = tiny.run(text, ablate={(layer, head)}, ablation="mean").logits[-1].log_softmax(-1)
        kl = float((base.exp() * (base - after)).sum())
        assert batched[layer, head] == pytest.approx(max(kl, 0.0), abs=1e-5)
    assert not torch.allclose(batched, head_importance(tiny, text, chunk=12), atol=1e-4)


def test_rank_correlation_and_top_heads():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert rank_correlation(a, a * 10) == pytest.approx(1.0)
    assert rank_correlation(a, -a) == pytest.approx(-1.0)
    from scipy.stats import spearmanr

    x, y = torch.randn(5, 7), torch.randn(5, 7).round()  # rounding makes ties
    assert rank_correlation(x, y) == pytest.approx(spearmanr(x.flatten(), y.flatten()).statistic, abs=1e-9)
    assert top_heads(torch.tensor([[0.1, -5.0], [2.0, 0.0]]), 2) == [((0, 1), -5.0), ((1, 0), 2.0)]
    assert normalise(torch.tensor([1.0]), 2.0, 4.0).item() == 0.5
