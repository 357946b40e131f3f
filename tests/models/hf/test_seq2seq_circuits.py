"""Circuits of encoder-decoder models (BART, Marian, T5) from tiny random local folders whose weights are drawn at
std 0.3 (so a head's slices taken from the wrong rows or columns give other numbers): every kind's weights per head
against transformers' own projections in one forward, and `circuits(model, kind)` against the maps built here."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mha_viz.analysis import circuits as circ  # noqa: E402
from mha_viz.contract import InputError  # noqa: E402
from mha_viz.models.hf.loading import load_custom  # noqa: E402
from tests.models.hf.test_seq2seq import CONFIGS, MODEL_CLASS, SOURCE, TARGET, _tokenizer  # noqa: E402

KINDS = ("Encoder", "Decoder", "Cross")
STD = 0.3
ATOL = 1e-4


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    """(our model, transformers' own eager model) from one folder, every matrix of the weights drawn at std 0.3."""
    arch = request.param
    path = tmp_path_factory.mktemp(arch)
    torch.manual_seed(0)
    model = getattr(transformers, MODEL_CLASS[arch])(CONFIGS[arch]())
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim >= 2:
                p.normal_(0.0, STD)
    model.save_pretrained(path, safe_serialization=True)
    _tokenizer(path)
    theirs = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager").eval()
    return load_custom(str(path)), theirs


def _projections(theirs, kind: str) -> list[tuple[torch.nn.Module, list[torch.nn.Module]]]:
    """(attention module, [q, k, v, o]) of every layer of `kind` in transformers' model, written out here."""
    stack = theirs.get_encoder() if kind == "Encoder" else theirs.get_decoder()
    if hasattr(stack, "block"):  # T5
        mods = [b.layer[1].EncDecAttention if kind == "Cross" else b.layer[0].SelfAttention for b in stack.block]
        return [(a, [a.q, a.k, a.v, a.o]) for a in mods]
    mods = [layer.encoder_attn if kind == "Cross" else layer.self_attn for layer in stack.layers]
    return [(a, [a.q_proj, a.k_proj, a.v_proj, a.out_proj]) for a in mods]


def _forward(theirs, run, kind: str):
    """transformers' forward on the run's ids, each layer of `kind`'s projections' inputs and outputs caught."""
    seen, hooks = [], []
    for _, mods in _projections(theirs, kind):
        layer = {}
        seen.append(layer)
        for name, mod in zip("qkvo", mods):
            hooks.append(mod.register_forward_hook(
                lambda m, args, out, _n=name, _l=layer: _l.update({_n + "_in": args[0][0], _n: out[0]})))
    try:
        with torch.no_grad():
            out = theirs(input_ids=torch.tensor([run.token_ids]), decoder_input_ids=torch.tensor([run.target_ids]),
                         output_attentions=True, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return out, seen


@pytest.mark.parametrize("kind", KINDS)
def test_every_heads_slices_give_transformers_projections(pair, kind):
    """Every layer of `kind`: x @ w_q[h] + b_q[h] is head h's part of the q projection's output (k, v alike), the
    heads' outputs through w_o[h] plus b_o are the output projection's output; Cross's keys and values read the
    encoder's last hidden state."""
    ours, theirs = pair
    run = ours.run(SOURCE, target=TARGET)
    out, seen = _forward(theirs, run, kind)
    H, dh = ours.n_heads, ours.dh
    assert len(seen) == (ours.info.n_layers if kind == "Encoder" else ours.decoder_layers())
    for layer, caught in enumerate(seen):
        w = ours.head_weights(layer, kind=kind)
        assert w.layer == layer and w.w_q.shape == (H, 32, dh) and w.w_o.shape == (H, dh, 32)
        for name in "qkv":
            x = caught[f"{name}_in"]  # (P, D)
            weight, bias = getattr(w, f"w_{name}"), getattr(w, f"b_{name}")
            for h in range(H):
                mine = x @ weight[h] + (0.0 if bias is None else bias[h])  # (P, dh)
                assert torch.allclose(mine, caught[name][:, h * dh:(h + 1) * dh], atol=ATOL), (kind, layer, name, h)
        z = caught["o_in"].view(-1, H, dh)  # (Q, H, dh)
        total = sum(z[:, h] @ w.w_o[h] for h in range(H)) + (0.0 if w.b_o is None else w.b_o)  # (Q, D)
        assert torch.allclose(total, caught["o"], atol=ATOL), (kind, layer)
        if kind == "Cross":
            assert torch.allclose(caught["k_in"], out.encoder_last_hidden_state[0], atol=ATOL)


@pytest.mark.parametrize("kind", KINDS)
def test_scale_and_position_bias_stay_outside_the_weights(pair, kind):
    """The weights are the projections themselves: the module's scale (BART, Marian: dh ** -0.5; T5: 1) times
    q·kᵀ, plus T5's relative bias where `weights_leave_out` names it, gives transformers' attention weights."""
    ours, theirs = pair
    run = ours.run(SOURCE, target=TARGET)
    out, seen = _forward(theirs, run, kind)
    maps = {"Encoder": out.encoder_attentions, "Decoder": out.decoder_attentions, "Cross": out.cross_attentions}
    left_out = ours.weights_leave_out(kind=kind)
    first = _projections(theirs, kind)[0][0]
    t5_bias = kind != "Cross" and getattr(first, "has_relative_attention_bias", False)
    assert bool(left_out) == t5_bias and all("relative position bias" in x for x in left_out)
    for layer, (attn, _) in enumerate(_projections(theirs, kind)):
        w = ours.head_weights(layer, kind=kind)
        x_q, x_k = seen[layer]["q_in"], seen[layer]["k_in"]
        q = torch.einsum("pd,hde->hpe", x_q, w.w_q) + (0.0 if w.b_q is None else w.b_q[:, None])  # (H, Q, dh)
        k = torch.einsum("pd,hde->hpe", x_k, w.w_k) + (0.0 if w.b_k is None else w.b_k[:, None])  # (H, K, dh)
        scores = q @ k.transpose(-2, -1) * attn.scaling  # (H, Q, K)
        if t5_bias:
            with torch.no_grad():
                scores = scores + first.compute_bias(*scores.shape[-2:])[0]  # (H, Q, K)
        if kind == "Decoder":
            n = scores.shape[-1]
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        assert torch.allclose(scores.softmax(-1), maps[kind][layer][0], atol=ATOL), (kind, layer)


@pytest.mark.parametrize("kind", KINDS)
def test_circuits_of_each_kind_are_the_maps_built_here(pair, kind):
    """Singular values of each head's W_Q W_Kᵀ and W_V W_O, built as D x D matrices here; composition as
    `composition_scores` of the stacked weights (Cross: Q-composition only, and the page's reason); copying through
    the shared embedding and the LM head (Encoder: the embedding in the LM head's place)."""
    ours, theirs = pair
    c = circ.circuits(ours, kind=kind)
    n = ours.info.n_layers if kind == "Encoder" else ours.decoder_layers()
    ws = [ours.head_weights(layer, kind=kind) for layer in range(n)]
    w_q, w_k, w_v, w_o = (torch.stack([getattr(w, f) for w in ws]) for f in ("w_q", "w_k", "w_v", "w_o"))
    dh = ours.dh
    qk = torch.linalg.svdvals(w_q.double() @ w_k.double().transpose(-2, -1))[..., :dh]  # (L, H, dh)
    ov = torch.linalg.svdvals(w_v.double() @ w_o.double())[..., :dh]  # (L, H, dh)
    assert torch.allclose(c.qk_singular.double(), qk, rtol=1e-4, atol=1e-4)
    assert torch.allclose(c.ov_singular.double(), ov, rtol=1e-4, atol=1e-4)
    want = circ.composition_scores(w_q, w_k, w_v, w_o)
    assert set(c.composition) == ({"q"} if kind == "Cross" else {"q", "k", "v"})
    assert (c.composition_note != "") == (kind == "Cross")
    for mode, scores in c.composition.items():
        assert torch.allclose(scores, want[mode], equal_nan=True, atol=1e-5), mode
        assert scores[0, 0, 1, 0].isfinite()
    tokens = theirs.get_input_embeddings().weight.detach()  # (V, D)
    unembed = None if kind == "Encoder" else theirs.get_output_embeddings().weight.detach()  # (V, D)
    assert torch.allclose(c.copying, circ.copying_scores(w_v, w_o, tokens, unembed), atol=1e-5)
    assert c.kind == kind and c.left_out == ours.weights_leave_out(kind=kind)


def test_circuits_without_a_kind_are_the_encoders_and_one_stack_refuses_a_kind(pair):
    ours, _ = pair
    assert circ.circuits(ours) is circ.circuits(ours, kind="Encoder")
    assert circ.circuits(ours).n_layers == ours.n_layers
    from mha_viz.models.registry import load_model

    with pytest.raises(InputError, match="leave kind out"):
        circ.circuits(load_model("tiny"), kind="Decoder")
