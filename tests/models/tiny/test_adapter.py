"""The tiny adapter honours the data contract and leaves no state behind on the shared model."""
import pytest
import torch

from mha_viz.contract import InputError, Model
from mha_viz.models.tiny.adapter import TinyModel, load_tiny


@pytest.fixture(scope="module", params=[True, False], ids=["trained", "untrained"])
def model(request):
    return load_tiny(trained=request.param)


TEXT = "the keys to the cabinet are on the table ."


def test_contract_shapes(model):
    assert isinstance(model, Model) and isinstance(model, TinyModel)
    assert model.info.kind == "causal-lm"
    run = model.run(TEXT)
    L, H, T, V = model.n_layers, model.n_heads, len(run.tokens), len(model.vocab)
    assert run.tokens[0] == "<bos>" and run.tokens[1:] == TEXT.split()
    assert run.attentions.shape == (L, H, T, T) and run.attentions.dtype == torch.float32
    assert run.output.shape == (T, model.config.d_model) and run.output.dtype == torch.float32
    assert run.logits.shape == (T, V) and run.logits.dtype == torch.float32
    assert run.token_ids[0] == model.vocab.bos_id and len(run.token_ids) == T
    assert run.special == (0,) and run.unknown == () and run.truncated == 0 and run.ablated == frozenset()


def test_rows_sum_to_one_and_lower_triangular(model):
    a = model.run(TEXT).attentions
    torch.testing.assert_close(a.sum(-1), torch.ones(a.shape[:-1]), atol=1e-5, rtol=0)
    T = a.shape[-1]
    assert torch.all(a[..., ~torch.ones(T, T, dtype=torch.bool).tril()] == 0)


def test_ablation_changes_logits_and_leaves_no_state(model):
    base = model.run(TEXT)
    abl = model.run(TEXT, ablate={(0, 0), (1, 2)})
    assert abl.ablated == frozenset({(0, 0), (1, 2)})
    assert not torch.allclose(abl.logits, base.logits)
    assert torch.equal(abl.attentions[0], base.attentions[0])  # layer 0 patterns are upstream of any ablation
    again = model.run(TEXT)
    assert torch.equal(again.logits, base.logits) and torch.equal(again.attentions, base.attentions)


def test_unknown_words_flagged_and_shown_as_typed(model):
    run = model.run("The zebra was near the keys")
    assert run.tokens[2] == "zebra"
    assert run.unknown == (2,)
    assert run.token_ids[2] == model.vocab.unk_id
    assert model.decode(run.token_ids[2]) == "<unk>"


def test_truncation_keeps_the_first_max_len_tokens(model):
    n = model.config.max_len
    words = ["one"] * (n + 5)
    run = model.run(" ".join(words))
    assert len(run.tokens) == n and run.truncated == 6  # <bos> takes one of the n places


def test_serves_max_len_positions_of_a_longer_table(tmp_path):
    """The stack is trained on train_margin positions past max_len; the page is never given them."""
    from mha_viz.models.tiny.architecture import TinyConfig
    from mha_viz.models.tiny.train import TrainConfig, train

    cfg = TinyConfig(n_layers=2, n_heads=4, d_model=32, max_len=20, d_mlp=64, train_margin=3)
    train(tmp_path / "m", cfg, TrainConfig(steps=2, batch_size=4, checkpoints=()), quiet=True)
    small = load_tiny(folder=tmp_path / "m")
    assert small.lm.pos.weight.shape[0] == 23
    assert small.info.max_tokens == 20 and small.embeddings().positions.shape[0] == 20
    run = small.run(" ".join(["one"] * 30))
    assert len(run.tokens) == 20 and run.truncated == 11


def test_run_batch_keep_matches_run(model):
    L, H = model.n_layers, model.n_heads
    keep = torch.ones(3, L, H)
    keep[1, 0, 1] = 0
    keep[2] = 0
    out, logits = model.run_batch_keep(TEXT, keep)
    T = len(model.run(TEXT).tokens)
    assert out.shape == (3, T, model.config.d_model) and logits.shape == (3, T, len(model.vocab))
    torch.testing.assert_close(logits[0], model.run(TEXT).logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[1], model.run(TEXT, {(0, 1)}).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(InputError, match="keep must be"):
        model.run_batch_keep(TEXT, torch.ones(L, H))


def test_bad_input_messages(model):
    with pytest.raises(InputError, match="empty"):
        model.run("   ")
    with pytest.raises(InputError, match="does not exist"):
        model.run(TEXT, ablate={(99, 0)})


def test_top_predictions(model):
    from mha_viz.app.common import top_predictions

    run = model.run(TEXT)
    top = top_predictions(model, run.logits[-1], k=5)  # the page's path: topk + the model's decode
    assert len(top) == 5 and all(isinstance(w, str) for w, _ in top)
    assert top == sorted(top, key=lambda wp: -wp[1]) and 0 < sum(p for _, p in top) <= 1 + 1e-6


def test_untrained_twin_is_the_seeded_start():
    a, b = load_tiny(trained=False), load_tiny(trained=False)
    assert a.info.name == "tiny-untrained" and "untrained" in a.info.title
    for (n1, p1), (n2, p2) in zip(a.lm.state_dict().items(), b.lm.state_dict().items()):
        assert torch.equal(p1, p2)
    trained = load_tiny()
    assert not torch.equal(trained.lm.head.weight, a.lm.head.weight)


def test_missing_weights_say_how_to_fix(tmp_path):
    from mha_viz.contract import ModelLoadError
    with pytest.raises(ModelLoadError, match="make train"):
        load_tiny(folder=tmp_path)


def test_norm_inputs_rebuild_the_attention_output():
    """sum over heads and keys of alpha_ij v_j W_O^h equals the layer's output projection before its bias."""
    from mha_viz.models.tiny.adapter import load_tiny

    model = load_tiny()
    text = "the keys to the cabinet are on the table ."
    values, w_o = model.norm_inputs(text, {(0, 1)})  # (L, H, K, dh), (L, H, dh, D)
    run = model.run(text, {(0, 1)})
    layer = 1
    rebuilt = torch.einsum("hqk,hkd,hde->qe", run.attentions[layer], values[layer], w_o[layer])  # (Q, D)
    block = model.lm.blocks[layer]
    captured = {}
    handle = block.attn.out.register_forward_hook(lambda m, args, out: captured.setdefault("out", out))
    with torch.no_grad():
        model.lm(torch.tensor([run.token_ids]), torch.ones(model.n_layers, model.n_heads).index_put_(
            (torch.tensor([0]), torch.tensor([1])), torch.tensor(0.0)))
    handle.remove()
    assert torch.allclose(rebuilt, captured["out"][0] - block.attn.out.bias, atol=1e-5)
