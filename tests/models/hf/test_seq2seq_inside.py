"""Inside a head of an encoder-decoder model (BART, Marian, T5), every kind, against transformers itself on
test_seq2seq.py's tiny random folders: the weights are its eager output_attentions, weights @ v is the head's
slice of its output projection's input, the contributions plus the bias are that projection's output, softmax of
the scores is the weights, and the residual stream is its hidden state entering the layer."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mha_viz.contract import InputError  # noqa: E402
from mha_viz.models.hf import seq2seq_inside  # noqa: E402
from tests.models.hf import test_seq2seq as base  # noqa: E402

SOURCE = base.SOURCE
folder, pair = base.folder, base.pair  # its fixtures: the tiny random folders and (our model, transformers' own)

TARGET = "a dog ran"  # shorter than the source, so cross-attention's (T, S) is not square
KINDS = ("Encoder", "Decoder", "Cross")
TOL = 1e-4


def _o(theirs, kind: str, layer: int) -> torch.nn.Module:
    stack = theirs.get_encoder() if kind == "Encoder" else theirs.get_decoder()
    if hasattr(stack, "block"):  # T5
        block = stack.block[layer].layer
        return block[1].EncDecAttention.o if kind == "Cross" else block[0].SelfAttention.o
    one = stack.layers[layer]
    return one.encoder_attn.out_proj if kind == "Cross" else one.self_attn.out_proj


def _theirs(theirs, run, kind: str, layer: int, hooks: dict | None = None):
    """transformers' forward on the run's ids -> (its outputs, the output projection's (input, output)), each
    (P, ...) with `hooks` {(kind, layer, head): value} written into those heads' slices first."""
    seen, handles, dh = {}, [], 8  # test_seq2seq.py's configs: d_model 32 over 4 heads, T5's d_kv 8
    for (k, l, h), value in (hooks or {}).items():
        def pre(module, args, h=h, value=value):
            x = args[0].clone()  # (1, P, H * dh)
            x[..., h * dh:(h + 1) * dh] = value
            return (x, *args[1:])
        handles.append(_o(theirs, k, l).register_forward_pre_hook(pre))
    # Registered after the edits, so it sees the input they made.
    handles.append(_o(theirs, kind, layer).register_forward_pre_hook(lambda m, a: seen.__setitem__("in", a[0][0])))
    handles.append(_o(theirs, kind, layer).register_forward_hook(lambda m, a, o: seen.__setitem__("out", o[0])))
    try:
        with torch.no_grad():
            out = theirs(input_ids=torch.tensor([run.token_ids]), decoder_input_ids=torch.tensor([run.target_ids]),
                         output_attentions=True, output_hidden_states=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return out, seen["in"], seen["out"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_equals_transformers(pair, kind):
    model, theirs = pair
    run = model.run(SOURCE, target=TARGET)
    S, T, H, dh = len(run.token_ids), len(run.target_ids), model.n_heads, model.dh
    assert S != T
    n_layers = model.n_enc if kind == "Encoder" else model.n_dec
    for layer in range(n_layers):
        heads = seq2seq_inside.inside_layer(model, SOURCE, layer, kind, target=TARGET)
        out, ctx, proj = _theirs(theirs, run, kind, layer)
        maps = {"Encoder": out.encoder_attentions, "Decoder": out.decoder_attentions,
                "Cross": out.cross_attentions}[kind]
        Q, K = (S, S) if kind == "Encoder" else (T, T) if kind == "Decoder" else (T, S)
        weights = torch.stack([h.weights for h in heads])  # (H, Q, K)
        assert weights.shape == (H, Q, K)
        assert float((weights - maps[layer][0]).abs().max()) < TOL
        for h in heads:
            assert h.layer == layer and h.q.shape == (Q, dh) and h.k.shape == (K, dh) and h.v.shape == (K, dh)
            assert float((torch.softmax(h.scores, -1) - h.weights).abs().max()) < TOL
            z = h.weights @ h.v  # (Q, dh)
            assert float((z - ctx[:, h.head * dh:(h.head + 1) * dh]).abs().max()) < TOL
        total = sum(h.contribution for h in heads) + (0.0 if heads[0].bias is None else heads[0].bias)  # (Q, D)
        assert float((total - proj).abs().max()) < TOL
        if kind != "Cross":  # the residual stream entering the layer is the stack's hidden state there
            hidden = (out.encoder_hidden_states if kind == "Encoder" else out.decoder_hidden_states)[layer][0]
            assert float((heads[0].resid - hidden).abs().max()) < TOL
        assert heads[0].tokens == (run.tokens if kind == "Encoder" else run.target_tokens)
        assert heads[0].key_tokens == (run.tokens if kind == "Cross" else None)


def test_decoder_scores_are_causal_and_t5_adds_its_position_bias(pair):
    model, _ = pair
    t5 = model._model.config.model_type == "t5"
    h = seq2seq_inside.inside(model, SOURCE, 1, 2, "Decoder", target=TARGET)  # a later layer: T5 reuses layer 0's
    assert torch.isneginf(h.scores).sum() == h.scores.shape[0] * (h.scores.shape[0] - 1) // 2
    assert (h.position_bias is not None) == t5
    if t5:
        allowed = torch.isfinite(h.scores)
        assert torch.allclose((h.q @ h.k.T * h.scale + h.position_bias)[allowed], h.scores[allowed], atol=TOL)
    cross = seq2seq_inside.inside(model, SOURCE, 1, 2, "Cross", target=TARGET)
    assert cross.position_bias is None and not torch.isneginf(cross.scores).any()


def test_heads_switched_off_add_nothing_or_their_mean(pair):
    model, theirs = pair
    run = model.run(SOURCE, target=TARGET)
    n_enc = model.n_enc
    heads = seq2seq_inside.inside_layer(model, SOURCE, 1, "Cross", target=TARGET, ablate={(0, 1), (n_enc + 1, 3)},
                                        ablate_cross={(1, 2)})
    assert [h.ablated for h in heads] == [False, False, True, False]
    assert float(heads[2].contribution.abs().max()) == 0.0
    # Downstream of the switched-off self-attention heads, the projection's output is transformers' with those
    # slices zeroed.
    _, _, proj = _theirs(theirs, run, "Cross", 1, {("Encoder", 0, 1): 0.0, ("Decoder", 1, 3): 0.0,
                                                   ("Cross", 1, 2): 0.0})
    total = sum(h.contribution for h in heads) + (0.0 if heads[0].bias is None else heads[0].bias)
    assert float((total - proj).abs().max()) < TOL
    dec = seq2seq_inside.inside_layer(model, SOURCE, 1, "Decoder", target=TARGET, ablate={(n_enc + 1, 3)})
    assert [h.ablated for h in dec] == [False, False, False, True]

    mean = seq2seq_inside.inside_layer(model, SOURCE, 0, "Cross", target=TARGET, ablate_cross={(0, 3)},
                                       ablation="mean", reference=[SOURCE, "the bird flew over the house"])
    cross = model.n_enc + model.n_dec  # the first cross projection in head_outputs_all's order
    value = torch.cat([model.head_outputs_all(t)[cross][3] for t in (SOURCE, "the bird flew over the house")])
    w_o = _o(theirs, "Cross", 0).weight.detach()[:, 3 * model.dh:4 * model.dh]  # (D, dh)
    expected = value.mean(0) @ w_o.T  # (D,)
    assert torch.allclose(mean[3].contribution, expected.expand_as(mean[3].contribution), atol=TOL)


def test_bad_requests_say_why(pair):
    model, _ = pair
    with pytest.raises(InputError, match="kind must be one of"):
        seq2seq_inside.inside_layer(model, SOURCE, 0, "Both")
    with pytest.raises(InputError, match="does not exist"):
        seq2seq_inside.inside_layer(model, SOURCE, model.n_enc, "Encoder")
    with pytest.raises(InputError, match="does not exist"):
        seq2seq_inside.inside_layer(model, SOURCE, 0, "Cross", ablate_cross={(model.n_dec, 0)})
