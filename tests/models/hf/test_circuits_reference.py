"""The Circuits view's weights and maps against an independent reference: TransformerLens (test-only dependency,
requirements-test.txt), its TransformerBridge over the same transformers model, with no weight processing on
either side (the bridge's default: no fold_ln, no centring of writing weights, no folded value biases; ours never
folds, see mha_viz/analysis/circuits/; were the bridge to fold, its W_Q would differ, as these models' norm gains
are moved off 1). TransformerLens splits fused projections with its own code (GPT-NeoX's
per-head interleaved [q | k | v] in `NeoxArchitectureAdapter.split_qkv_matrix`, GPT-2's Conv1D thirds) and
repeats grouped key/value heads over their query heads (`_expand_kv_heads`), so a wrong split on our side shows.

Compared per architecture (a tiny random model from the architecture matrix, tests/models/hf/architectures.py):
  * every layer's W_Q, W_K, W_V (H, D, dh), W_O (H, dh, D) and biases b_Q, b_K, b_V (H, dh), b_O (D,) from
    `model.head_weights` (what `mha_viz.circuits` and the Circuits view read) against the bridge's; a bias we
    read as None is one the bridge says the checkpoint lacks;
  * the embeddings (`model.embeddings`) against W_E, W_U (and W_pos where the model learns positions);
  * the QK and OV circuits: each head's token maps (`qk_token_map`, `ov_token_map`, the view's heatmaps) against
    W_E QK W_Eᵀ and W_E OV W_U built from TransformerLens's FactoredMatrix, the position map against
    W_pos QK W_posᵀ; the singular values of W_Q W_Kᵀ and W_V W_O (`Circuits.qk_singular`, `ov_singular`) against
    FactoredMatrix.S; the composition scores against `TransformerBridge.all_composition_scores`; the copying scores
    against sum(λ) / sum(|λ|) of TransformerLens's eigenvalues of W_E OV W_U.
"""
from __future__ import annotations

import os

import pytest
import torch

import mha_viz
from mha_viz.analysis import circuits as circ
from tests.models.hf import matrix
from tests.models.hf.architectures import BY_NAME, build

if not os.environ.get("CI"):  # in CI (make test installs requirements-test.txt) a missing TransformerLens must fail
    pytest.importorskip("transformer_lens", reason="transformer_lens (requirements-test.txt) is not installed: the "
                                                   "circuits' reference comparison needs it")
import transformer_lens  # noqa: E402,F401

ARCHS = ("GPT-NeoX", "GPT-2", "Llama")  # fused interleaved q/k/v; fused Conv1D thirds; separate, grouped-query
N_TOKENS = 256  # token rows of the token maps compared (the vocabulary is 4,096)
MAX_DIFF: dict[tuple[str, str], float] = {}  # (arch, what) -> the largest difference seen, for the summary below


def _close(ours: torch.Tensor, theirs: torch.Tensor, arch: str, what: str, atol: float, rtol: float = 0.0) -> None:
    theirs = theirs.detach().float()
    assert ours.shape == theirs.shape, f"{arch} {what}: shape {tuple(ours.shape)} vs TransformerLens's " \
                                       f"{tuple(theirs.shape)}"
    diff = float((ours.float() - theirs).abs().max()) if ours.numel() else 0.0
    MAX_DIFF[(arch, what)] = max(diff, MAX_DIFF.get((arch, what), 0.0))
    torch.testing.assert_close(ours.float(), theirs, atol=atol, rtol=rtol, msg=lambda m: f"{arch} {what}: {m}")


@pytest.fixture(scope="module", params=ARCHS)
def pair(request, tmp_path_factory):
    """(architecture, mha-viz's model, TransformerLens's bridge) over one folder of random weights."""
    import transformers
    from transformer_lens.model_bridge import TransformerBridge

    arch = BY_NAME[request.param]
    with matrix.offline():
        folder = build(arch, tmp_path_factory.mktemp("tl_circuits") / arch.name.replace(" ", "_"))
        model = mha_viz.load_model(str(folder))
        hf = getattr(transformers, arch.model).from_pretrained(folder, attn_implementation="eager").eval()
        bridge = TransformerBridge.boot_transformers(str(folder), hf_model=hf,
                                                     tokenizer=transformers.AutoTokenizer.from_pretrained(folder))
    return arch.name, model, bridge


def _bridge_bias(bridge, name: str) -> torch.Tensor | None:
    """TransformerLens's stacked bias (L, ...), or None where it says the checkpoint has none."""
    try:
        return getattr(bridge, name)
    except AttributeError as err:
        assert "no such parameter" in str(err), err
        return None


def test_per_head_weights_and_biases_equal_transformer_lens(pair):
    arch, model, bridge = pair
    theirs = {"w_q": bridge.W_Q, "w_k": bridge._expand_kv_heads(bridge.W_K),
              "w_v": bridge._expand_kv_heads(bridge.W_V), "w_o": bridge.W_O}  # (L, H, D, dh) x 3, (L, H, dh, D)
    biases = {"b_q": _bridge_bias(bridge, "b_Q"), "b_k": _bridge_bias(bridge, "b_K"),
              "b_v": _bridge_bias(bridge, "b_V"), "b_o": _bridge_bias(bridge, "b_O")}
    for layer in range(model.n_layers):
        w = model.head_weights(layer)
        for name, stacked in theirs.items():
            _close(getattr(w, name), stacked[layer], arch, name.upper(), atol=0.0)
        for name, stacked in biases.items():
            ours = getattr(w, name)
            assert (ours is None) == (stacked is None), f"{arch} layer {layer} {name}: ours {ours is None and 'None'}" \
                                                        f", TransformerLens's {stacked is None and 'None'}"
            if ours is None:
                continue
            ref = stacked[layer]  # (H_kv, dh) for grouped k/v biases: repeated over their query heads like W_K
            if name in ("b_k", "b_v") and ref.ndim == 2 and ref.shape[0] != model.n_heads:
                ref = ref.repeat_interleave(model.n_heads // ref.shape[0], dim=0)
            _close(ours, ref, arch, name.upper(), atol=0.0)


def test_embeddings_equal_transformer_lens(pair):
    arch, model, bridge = pair
    emb = model.embeddings()
    _close(emb.tokens, bridge.W_E, arch, "W_E", atol=0.0)
    _close(emb.unembed, bridge.W_U.T, arch, "W_U", atol=0.0)
    if emb.positions is None:
        with pytest.raises(AttributeError):
            bridge.W_pos  # noqa: B018 - TransformerLens agrees there is no learned position table
    else:
        _close(emb.positions, bridge.W_pos, arch, "W_pos", atol=0.0)


def test_token_and_position_maps_equal_transformer_lens(pair):
    """The view's QK and OV heatmaps of every head against TransformerLens's circuits through its embeddings."""
    arch, model, bridge = pair
    emb = model.embeddings()
    rows = torch.arange(N_TOKENS)
    w_e = bridge.W_E.detach()[:N_TOKENS]  # (R, D)
    qk = w_e @ bridge.QK @ w_e.T  # FactoredMatrix (L, H, R, R)
    ov = w_e @ bridge.OV @ bridge.W_U.detach()  # FactoredMatrix (L, H, R, V)
    qk_ab, ov_ab = qk.AB.detach(), ov.AB.detach()
    pos = None
    if emb.positions is not None:
        w_p = bridge.W_pos.detach()  # (P, D)
        pos = (w_p @ bridge.QK @ w_p.T).AB.detach()  # (L, H, P, P)
    for layer in range(model.n_layers):
        w = model.head_weights(layer)
        for h in range(model.n_heads):
            scale = float(qk_ab[layer, h].abs().max())
            _close(circ.qk_token_map(emb.tokens[rows], w.w_q[h], w.w_k[h]), qk_ab[layer, h], arch, "QK token map",
                   atol=1e-5 * scale)
            scale = float(ov_ab[layer, h].abs().max())
            _close(circ.ov_token_map(emb.tokens, w.w_v[h], w.w_o[h], emb.unembed, rows=rows), ov_ab[layer, h], arch,
                   "OV token map", atol=1e-5 * scale)
            if pos is not None:
                ours = circ.qk_position_map(emb.positions, w.w_q[h], w.w_k[h], causal=False)
                _close(ours, pos[layer, h], arch, "QK position map", atol=1e-5 * float(pos[layer, h].abs().max()))


def test_singular_values_composition_and_copying_equal_transformer_lens(pair):
    arch, model, bridge = pair
    c = mha_viz.circuits(model)
    dh = c.d_head
    # FactoredMatrix.S of a (D, dh) x (dh, D) product: its dh singular values, descending, as ours.
    qk_s, ov_s = bridge.QK.S.detach()[..., :dh], bridge.OV.S.detach()[..., :dh]  # (L, H, dh)
    _close(c.qk_singular, qk_s, arch, "QK singular values", atol=1e-5 * float(qk_s.max()), rtol=1e-4)
    _close(c.ov_singular, ov_s, arch, "OV singular values", atol=1e-5 * float(ov_s.max()), rtol=1e-4)
    for mode in ("q", "k", "v"):
        theirs = bridge.all_composition_scores(mode.upper()).scores.detach()  # (L, H, L, H), 0 where not later
        earlier = c.composition[mode].isfinite()  # (L, H, L, H): earlier layer into later layer
        assert int(earlier.sum()) == model.n_heads ** 2 * model.n_layers * (model.n_layers - 1) // 2
        assert (theirs[~earlier] == 0).all()
        _close(c.composition[mode][earlier], theirs[earlier], arch, f"{mode.upper()}-composition", atol=1e-5)
    lam = (bridge.W_E.detach() @ bridge.OV @ bridge.W_U.detach()).eigenvalues  # (L, H, dh) complex
    copying = lam.sum(-1).real / lam.abs().sum(-1)  # (L, H)
    _close(c.copying, copying, arch, "copying", atol=1e-5)


def test_report_the_largest_differences(pair):
    """Not a check: prints what the comparisons above measured (pytest -s), for the issue and the notes."""
    arch = pair[0]
    for (name, what), diff in sorted(MAX_DIFF.items()):
        if name == arch:
            print(f"{arch:9s} {what:22s} max |ours - TransformerLens| = {diff:.3g}")
