"""TinyLM shapes, causality, ablation as an argument, and the seeded initialisation."""
import pytest
import torch

from mha_viz.models.tiny.architecture import TinyConfig, build_model

CFG = TinyConfig(vocab_size=50, n_layers=2, n_heads=4, d_model=32, max_len=16, d_mlp=64, seed=3)


@pytest.fixture(scope="module")
def model():
    return build_model(CFG).eval()


def test_shapes(model):
    ids = torch.randint(0, 50, (3, 10))  # (B, T)
    logits, hidden, attn = model(ids)
    assert logits.shape == (3, 10, 50)
    assert hidden.shape == (3, 10, 32)
    assert attn.shape == (3, 2, 4, 10, 10)
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 2, 4, 10))


def test_causal_logits(model):
    ids = torch.randint(0, 50, (1, 10))
    ids2 = ids.clone()
    ids2[0, -1] = (ids[0, -1] + 1) % 50
    a, _, _ = model(ids)
    b, _, _ = model(ids2)
    torch.testing.assert_close(a[:, :-1], b[:, :-1])


def test_head_keep_shapes_and_effect(model):
    ids = torch.randint(0, 50, (2, 8))
    base, _, attn = model(ids)
    ones, _, _ = model(ids, torch.ones(2, 2, 4))
    assert torch.equal(base, ones)
    keep = torch.ones(2, 4)
    keep[1, 2] = 0  # (L, H) broadcast over the batch
    abl, _, attn_abl = model(ids, keep)
    assert not torch.allclose(abl, base)
    # Layer 1 is the last layer: its own patterns do not depend on its own ablation, layer 0's neither.
    assert torch.equal(attn_abl, attn)
    with pytest.raises(ValueError, match=r"head_keep must be \(2, 4\)"):
        model(ids, torch.ones(4, 2))


def test_ablating_early_head_changes_later_patterns(model):
    ids = torch.randint(0, 50, (1, 8))
    _, _, attn = model(ids)
    keep = torch.ones(2, 4)
    keep[0, 0] = 0
    _, _, attn_abl = model(ids, keep)
    assert torch.equal(attn_abl[:, 0], attn[:, 0])
    assert not torch.equal(attn_abl[:, 1], attn[:, 1])


def test_seeded_initialisation_is_reproducible_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(CFG)
    after = torch.rand(1)
    assert torch.equal(before, after)  # build_model did not consume the caller's random numbers
    b = build_model(CFG)
    for (na, pa), (nb, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert na == nb and torch.equal(pa, pb)


def test_too_long_input_message(model):
    n = CFG.n_positions  # the stack runs its whole position table; the adapter serves max_len of it
    with pytest.raises(ValueError, match=f"keep the first {n}"):
        model(torch.zeros(1, n + 1, dtype=torch.long))
    model(torch.zeros(1, n, dtype=torch.long))


def test_position_table_has_the_training_margin():
    assert CFG.n_positions == CFG.max_len + CFG.train_margin > CFG.max_len
    assert build_model(CFG).pos.weight.shape == (CFG.n_positions, CFG.d_model)
    with pytest.raises(ValueError, match="train_margin"):
        TinyConfig(train_margin=-1)


def test_a_config_from_before_the_margin_loads_with_none():
    """A folder trained before `train_margin` existed has max_len rows of positions: its config.json still loads."""
    old = TinyConfig.from_json('{"vocab_size": 50, "max_len": 16}')
    assert old.train_margin == 0 and old.n_positions == 16
    assert not old.length_scaled  # nor length scaling: its attention is plain softmax
    assert not any(b.attn.query_scale is not None for b in build_model(old).blocks)
    assert all(b.attn.query_scale is not None for b in build_model(CFG).blocks) == CFG.length_scaled


def test_config_roundtrip_and_validation():
    assert TinyConfig.from_json(CFG.to_json()) == CFG
    with pytest.raises(ValueError, match="divisible"):
        TinyConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="does not know"):
        TinyConfig.from_json('{"vocab_size": 5, "colour": "red"}')


def test_loss_ignores_padding():
    model = build_model(CFG)
    ids = torch.randint(3, 50, (2, 10))
    padded = torch.cat([ids, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model.loss(ids, ignore_index=0), model.loss(padded, ignore_index=0))


def test_a_tied_head_is_the_token_embedding_and_is_saved_once():
    from dataclasses import replace

    from mha_viz.models.tiny.architecture import saved_state

    model = build_model(replace(CFG, tied=True))
    assert model.head.weight is model.tok.weight  # one (V, D) table
    assert "head.weight" not in saved_state(model) and "tok.weight" in saved_state(model)
    untied = build_model(TinyConfig.from_json('{"vocab_size": 50, "max_len": 16}'))  # a config from before
    assert not untied.cfg.tied and untied.head.weight is not untied.tok.weight
    assert "head.weight" in saved_state(untied)
