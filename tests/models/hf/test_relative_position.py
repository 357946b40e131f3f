"""Relative-position encoders whose attention is computed in their own modules, outside transformers' attention
interface: DeBERTa-v2 (disentangled content-to-position and position-to-content scores; He et al. 2021) and MPNet
(a learned bias per head and bucket of distance; Song et al. 2020). mha-viz wraps their self-attention modules
(hf/ablation.py). Checked against transformers' eager forward on the same tiny folders as the architecture matrix:
every layer's weights and head outputs, the hidden states and logits; a head switched off against a forward hook on
its own attention module; padded rows against single runs; and inside a head, the relative terms shown as their own
term against what the model's own code computes."""
from __future__ import annotations

import pytest
import torch

from tests.models.hf import matrix
from tests.models.hf.architectures import BY_NAME, D, H, build

NAMES = ("DeBERTa-v2", "MPNet")
ATOL = 1e-5
LAYER = 1


def _close(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    theirs = theirs.float()
    assert ours.shape == theirs.shape, f"{what}: shape {tuple(ours.shape)} vs {tuple(theirs.shape)}"
    err = float((ours.float() - theirs).abs().max())
    assert err <= ATOL * max(1.0, float(theirs.abs().max())), f"{what}: differs from transformers' by {err:.2e}"


@pytest.fixture(scope="module", params=NAMES)
def loaded(request, tmp_path_factory) -> matrix.Loaded:
    arch = BY_NAME[request.param]
    with matrix.offline():
        folder = build(arch, tmp_path_factory.mktemp(arch.name), (matrix.TEXT, matrix.SOURCE, matrix.OTHER))
        return matrix.load(arch, folder)


def _attention_module(m: matrix.Loaded, layer: int) -> torch.nn.Module:
    """transformers' self-attention module of `layer` in the reference model (the one mha-viz wraps)."""
    encoder = m.ref.base_model.encoder
    attention = encoder.layer[layer].attention
    return attention.self if m.arch.name == "DeBERTa-v2" else attention.attn


def test_every_layer_is_transformers_own(loaded):
    """Weights, head outputs (each layer's context before the output projection), the last hidden state and the
    logits equal transformers' eager forward."""
    m = loaded
    run = m.model.run(matrix.TEXT)
    ref = m.ref_run(matrix.TEXT, output_attentions=True, output_hidden_states=True)
    _close(run.attentions, torch.stack(ref.attentions)[:, 0], "attention weights")  # (L, H, T, T)
    _close(run.output, ref.hidden_states[-1][0], "last hidden state")  # (T, D)
    _close(run.logits, ref.logits[0], "logits")  # (T, V)
    dh = D // H
    ours = m.model.head_outputs(matrix.TEXT)  # (L, H, T, dh)
    for layer in range(m.model.n_layers):
        for head in range(H):
            _close(ours[layer, head], m.captured(matrix.TEXT, layer, head), f"layer {layer} head {head}'s output")
    assert ours.shape[-1] == dh


def test_a_head_off_equals_a_hook_on_its_own_module(loaded):
    """Switching heads off equals a forward hook on each one's self-attention module zeroing the head's slice of the
    context it returns (DeBERTa-v2), or a pre-hook on the module's own output projection `o` (MPNet)."""
    m = loaded
    heads = {(0, 3), (LAYER, 2)}
    dh = D // H
    handles = []
    for layer, head in heads:
        module = _attention_module(m, layer)
        cols = slice(head * dh, (head + 1) * dh)
        if m.arch.name == "DeBERTa-v2":
            def off(mod, args, output, _cols=cols):
                context = output[0].clone()  # (1, T, H * dh): the heads side by side
                context[..., _cols] = 0.0
                return (context, *output[1:])
            handles.append(module.register_forward_hook(off))
        else:
            def off(mod, args, _cols=cols):
                context = args[0].clone()  # (1, T, H * dh)
                context[..., _cols] = 0.0
                return (context, *args[1:])
            handles.append(module.o.register_forward_pre_hook(off))
    try:
        want = m.ref_run(matrix.TEXT).logits[0]  # (T, V)
    finally:
        for handle in handles:
            handle.remove()
    ours = m.model.run(matrix.TEXT, ablate=heads).logits
    _close(ours, want, "logits with two heads off")
    assert float((ours - m.model.run(matrix.TEXT).logits).abs().max()) > 1e-3, "switching the heads off changed nothing"


def test_padded_rows_equal_single_runs(loaded):
    """Texts of different lengths share a right-padded forward (`run_many`): each row is its text run alone."""
    m = loaded
    texts = [matrix.TEXT, "A short one.", matrix.OTHER]
    rows = m.model.run_many(texts, lambda i, run: (run.attentions, run.output))
    for text, (attentions, output) in zip(texts, rows):
        alone = m.model.run(text)
        _close(attentions, alone.attentions, f"padded attention of {text!r}")
        _close(output, alone.output, f"padded output of {text!r}")


def _reference_terms(m: matrix.Loaded) -> torch.Tensor:
    """What layer LAYER adds to its scaled q . k in transformers' forward on TEXT, from the model's own code
    -> (H, Q, K): DeBERTa-v2's c2p + p2c (`disentangled_attention_bias` on that layer's queries and keys), MPNet's
    bucket bias (`compute_position_bias`)."""
    module = _attention_module(m, LAYER)
    seen = {}
    hook = module.register_forward_pre_hook(lambda mod, args, kwargs: seen.update(args=args, kwargs=kwargs),
                                            with_kwargs=True)
    try:
        m.ref_run(matrix.TEXT)
    finally:
        hook.remove()
    hidden = seen["args"][0]  # (1, T, D)
    with torch.no_grad():
        if m.arch.name == "MPNet":
            return m.ref.base_model.encoder.compute_position_bias(hidden)[0]  # (H, Q, K)
        query = module.transpose_for_scores(module.query_proj(hidden), H)  # (H, Q, dh)
        key = module.transpose_for_scores(module.key_proj(hidden), H)  # (H, K, dh)
        kwargs = seen["kwargs"]
        return module.disentangled_attention_bias(query, key, kwargs["relative_pos"], kwargs["rel_embeddings"], 3)


def test_inside_shows_the_relative_terms_as_the_model_computes_them(loaded):
    """inside(): `position_bias` is the model's own relative-position terms, q . kᵀ * scale + position_bias are
    the scores, and their softmax is transformers' weights."""
    m = loaded
    heads = m.model.inside_layer(matrix.TEXT, LAYER)
    want = _reference_terms(m)  # (H, Q, K)
    ref_weights = m.ref_run(matrix.TEXT, output_attentions=True).attentions[LAYER][0]  # (H, Q, K)
    assert float(want.abs().max()) > 1e-2, "the relative terms are too small for this test to see them"
    for h in heads:
        assert h.position_bias is not None
        _close(h.position_bias, want[h.head], f"head {h.head}'s relative terms")
        _close(h.q @ h.k.T * h.scale + h.position_bias, h.scores, f"head {h.head}'s scores from their parts")
        _close(torch.softmax(h.scores, dim=-1), ref_weights[h.head], f"head {h.head}'s weights")


def test_circuits_say_the_relative_terms_are_left_out(loaded):
    """The QK map is token against token; the page is told what it leaves out."""
    notes = loaded.model.weights_leave_out()
    assert any(n.startswith("relative positions") for n in notes), notes
