"""Parity of our explicit-softmax attention with torch's fused kernel and with nn.MultiheadAttention."""
import pytest
import torch
from torch.nn import functional as F

from mha_viz.models.attention import MultiHeadSelfAttention, attention

B, T, D, H = 2, 7, 32, 4


@pytest.fixture
def layer():
    torch.manual_seed(0)
    mha = MultiHeadSelfAttention(D, H, max_len=16)
    # Non-zero biases, so a bias mix-up would show in the parity tests.
    for p in mha.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return mha.eval()


@pytest.fixture
def x():
    return torch.randn(B, T, D, generator=torch.Generator().manual_seed(1))  # (B, T, D)


def _heads(mha, x):
    q, k, v = mha.qkv(x).split(D, dim=-1)  # 3 x (B, T, D)
    return [t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v)]  # 3 x (B, H, T, dh)


def test_pure_attention_matches_sdpa(layer, x):
    q, k, v = _heads(layer, x)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    out, weights = attention(q, k, v, mask)  # (B, H, T, dh), (B, H, T, T)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, H, T), atol=1e-6, rtol=0)


def test_module_matches_sdpa_on_same_projections(layer, x):
    out, weights = layer(x)
    q, k, v = _heads(layer, x)
    ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, dh)
    expected = layer.out(ctx.transpose(1, 2).reshape(B, T, D))  # (B, T, D)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert weights.shape == (B, H, T, T)


def test_module_matches_torch_multihead_attention(layer, x):
    ref = torch.nn.MultiheadAttention(D, H, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(layer.qkv.weight)
        ref.in_proj_bias.copy_(layer.qkv.bias)
        ref.out_proj.weight.copy_(layer.out.weight)
        ref.out_proj.bias.copy_(layer.out.bias)
    ref.eval()
    causal_block = ~torch.ones(T, T, dtype=torch.bool).tril()  # True = may NOT attend, torch's convention
    ref_out, ref_w = ref(x, x, x, attn_mask=causal_block, need_weights=True, average_attn_weights=False)
    out, weights = layer(x)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, ref_w, atol=1e-5, rtol=1e-5)


def test_causal_mask_zeroes_future(layer, x):
    _, weights = layer(x)
    future = ~torch.ones(T, T, dtype=torch.bool).tril()
    assert torch.all(weights[..., future] == 0)
    # And the output at a position does not change when later tokens change.
    x2 = x.clone()
    x2[:, -1] += 5.0
    out1, _ = layer(x)
    out2, _ = layer(x2)
    torch.testing.assert_close(out1[:, :-1], out2[:, :-1])
    assert not torch.allclose(out1[:, -1], out2[:, -1])


@pytest.mark.parametrize("head", range(H))
def test_head_keep_zeroes_exactly_that_heads_slice(layer, x, head):
    # With an identity output projection, the output IS the concatenated head outputs.
    with torch.no_grad():
        layer.out.weight.copy_(torch.eye(D))
        layer.out.bias.zero_()
    keep = torch.ones(H)
    keep[head] = 0
    full, w_full = layer(x)
    ablated, w_abl = layer(x, keep)
    dh = D // H
    sl = slice(head * dh, (head + 1) * dh)
    assert torch.all(ablated[..., sl] == 0)
    others = torch.ones(D, dtype=torch.bool)
    others[sl] = False
    assert torch.equal(ablated[..., others], full[..., others])
    assert torch.any(full[..., sl] != 0)
    assert torch.equal(w_abl, w_full)  # the ablated head's pattern is still computed


def test_head_keep_per_batch_item(layer, x):
    keep = torch.tensor([[1.0, 1, 1, 1], [0, 1, 1, 1]])  # (B, H): ablate head 0 only for the second item
    out, _ = layer(x, keep)
    full, _ = layer(x)
    assert torch.equal(out[0], full[0])
    assert not torch.allclose(out[1], full[1])


def test_bad_head_keep_shape_says_what_to_pass(layer, x):
    with pytest.raises(ValueError, match=r"head_keep must have shape \(4,\)"):
        layer(x, torch.ones(3))


def test_too_long_input_is_refused(layer):
    with pytest.raises(ValueError, match="max_len"):
        layer(torch.zeros(1, 17, D))


def test_length_scaled_attention_is_a_plain_loop_over_rows_with_log_of_keys_seen(layer, x):
    """Scalable-Softmax as the tiny model uses it (TinyConfig.length_scaled): query t's scores q.k / sqrt(dh) times
    log(t + 1) (log 2 for query 0, which has one key), re-derived here one row at a time with math.log."""
    import math

    scaled = MultiHeadSelfAttention(D, H, max_len=16, length_scaled=True)
    scaled.load_state_dict(layer.state_dict())
    out, weights = scaled.eval()(x)  # (B, T, D), (B, H, T, T)
    q, k, v = _heads(layer, x)
    dh = D // H
    for b in range(B):
        for h in range(H):
            for t in range(T):
                s = [float(q[b, h, t] @ k[b, h, j]) / math.sqrt(dh) * math.log(max(t + 1, 2)) for j in range(t + 1)]
                top = max(s)
                e = [math.exp(v_ - top) for v_ in s]
                want = torch.tensor([w / sum(e) for w in e] + [0.0] * (T - t - 1))  # (T,)
                torch.testing.assert_close(weights[b, h, t], want, atol=1e-6, rtol=1e-5)
    plain, _ = layer(x)
    assert not torch.allclose(out, plain, atol=1e-3)  # the factor changes the layer's output
    with pytest.raises(ValueError, match="causal"):
        MultiHeadSelfAttention(D, H, max_len=16, causal=False, length_scaled=True)
