"""Batched head runs on encoder-decoder models (BART, Marian, T5; models/hf/seq2seq_rows.py): rows of one forward,
each switching off or patching heads of any kind, each equal to `run` with the same heads, on tiny random folders
whose weights (std 0.3, test_seq2seq_patching.strong_config) make every edit move the logits well past the
tolerance, so a row whose edit were lost would fail."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mha_viz.contract import InputError  # noqa: E402
from mha_viz.models.hf.loading import load_custom  # noqa: E402
from tests.models.hf.test_seq2seq import CONFIGS, L_DEC, L_ENC, OTHER, SOURCE, TARGET, H, seq2seq_folder  # noqa: E402
from tests.models.hf.test_seq2seq_patching import strong_config  # noqa: E402

TOL = 1e-4
MOVED = 1e-3  # every row's edit moves some logit by more than this (checked), so the comparison can fail


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def model(request, tmp_path_factory):
    arch = request.param
    return load_custom(str(seq2seq_folder(tmp_path_factory.mktemp(f"{arch}-rows"), strong_config(arch), arch=arch)))


CROSS = L_ENC + L_DEC  # the first cross-attention projection in `_modules()` order
# (projection index, head) switched off per row, and the same heads as `run` names them.
ROWS = [
    ([], {}),
    ([(0, 1)], {"ablate": {(0, 1)}}),  # an encoder head
    ([(L_ENC + 2, 3)], {"ablate": {(L_ENC + 2, 3)}}),  # decoder layer 2's self-attention head 3
    ([(CROSS + 1, 2)], {"ablate_cross": {(1, 2)}}),  # decoder layer 1's cross-attention head 2
    ([(1, 0), (L_ENC, 0), (CROSS, 3)], {"ablate": {(1, 0), (L_ENC, 0)}, "ablate_cross": {(0, 3)}}),
]


def _keep(model, rows) -> torch.Tensor:
    keep = torch.ones(len(rows), model.keep_layers, H)  # (B, M, H)
    for row, (heads, _) in enumerate(rows):
        for index, head in heads:
            keep[row, index, head] = 0.0
    return keep


def _patch_args(args: dict) -> dict:
    return {{"ablate": "patch", "ablate_cross": "patch_cross"}[k]: v for k, v in args.items()}


def test_the_layout_is_every_projection(model):
    assert model.keep_layers == L_ENC + 2 * L_DEC == len(model._modules())


def test_zeroed_rows_equal_single_runs(model):
    output, logits = model.run_batch_keep(SOURCE, _keep(model, ROWS), target=TARGET)  # (B, T, D), (B, T, V)
    base = model.run(SOURCE, target=TARGET)
    for row, (heads, args) in enumerate(ROWS):
        single = model.run(SOURCE, target=TARGET, **args)
        assert (logits[row] - single.logits).abs().max() <= TOL, (heads, args)
        assert (output[row] - single.output).abs().max() <= TOL, (heads, args)
        if heads:
            assert (single.logits - base.logits).abs().max() > MOVED, f"{heads} barely moves the logits"


def test_patched_rows_equal_single_runs_from_the_second_source(model):
    assert model.token_count(OTHER) == model.token_count(SOURCE), "encoder heads patch position by position"
    second = [o[None] for o in model.head_outputs_all(OTHER, TARGET)]  # each (1, H, P, dh)
    _, logits = model.run_batch_keep(SOURCE, _keep(model, ROWS), second, target=TARGET)  # (B, T, V)
    base = model.run(SOURCE, target=TARGET)
    for row, (heads, args) in enumerate(ROWS[1:], start=1):
        single = model.run(SOURCE, target=TARGET, source=OTHER, **_patch_args(args))
        assert (logits[row] - single.logits).abs().max() <= TOL, (heads, args)
        assert (single.logits - base.logits).abs().max() > MOVED, f"patching {heads} barely moves the logits"
    assert (logits[0] - base.logits).abs().max() <= TOL, "a row with every head on is the run itself"


def test_positions_and_the_greedy_target(model):
    keep = _keep(model, ROWS[:4])
    _, every = model.run_batch_keep(SOURCE, keep)  # no target: the source's greedy continuation, as `run`
    _, some = model.run_batch_keep(SOURCE, keep, positions=[0, -1])  # (B, 2, V)
    assert torch.equal(some, every[:, [0, -1]])
    assert (every[3] - model.run(SOURCE, ablate_cross={(1, 2)}).logits).abs().max() <= TOL


def test_bad_shapes_say_the_layout(model):
    with pytest.raises(InputError, match=rf"keep must be \(B, {model.keep_layers}, {H}\)"):
        model.run_batch_keep(SOURCE, torch.ones(1, L_ENC, H), target=TARGET)  # the encoder's layers only
    with pytest.raises(InputError, match="one entry per output projection"):
        model.run_batch_keep(SOURCE, _keep(model, ROWS[:2]), [None] * L_ENC, target=TARGET)
    short = [o[None] for o in model.head_outputs_all("the cat", TARGET)]  # another source length
    with pytest.raises(InputError, match="same token count"):
        model.run_batch_keep(SOURCE, _keep(model, ROWS[:2]), short, target=TARGET)
    with pytest.raises(InputError, match="outside the target"):
        model.run_batch_keep(SOURCE, _keep(model, ROWS[:2]), target=TARGET, positions=[99])


def test_a_second_source_patches_rows_on_this_texts_decoder_input(model):
    """`source=`: the heads off take their outputs on the second source read on this run's decoder input, as `run`
    patches them, with or without a target (none: this source's greedy continuation, not the second's)."""
    for target in (TARGET, None):
        _, logits = model.run_batch_keep(SOURCE, _keep(model, ROWS), target=target, source=OTHER)  # (B, T, V)
        for row, (heads, args) in enumerate(ROWS[1:], start=1):
            single = model.run(SOURCE, target=target, source=OTHER, **_patch_args(args))
            assert (logits[row] - single.logits).abs().max() <= TOL, (target, heads)
    with pytest.raises(InputError, match="same number of tokens"):
        model.run_batch_keep(SOURCE, _keep(model, ROWS[:2]), target=TARGET, source="the cat")
    _, cross_only = model.run_batch_keep(SOURCE, _keep(model, [ROWS[3]]), target=TARGET, source="the cat")
    single = model.run(SOURCE, target=TARGET, source="the cat", patch_cross={(1, 2)})
    assert (cross_only[0] - single.logits).abs().max() <= TOL, "cross heads line up on the target alone"


@pytest.mark.parametrize("ablation", ["mean", "resample"])
def test_mean_and_resample_rows_equal_single_runs(model, ablation):
    """`ablation=`: a head off takes the value `run` gives it under that meaning, over the same reference texts."""
    reference = [OTHER, "a cat ran over the mat", SOURCE]
    _, logits = model.run_batch_keep(SOURCE, _keep(model, ROWS), target=TARGET, ablation=ablation,
                                     reference=reference)
    for row, (heads, args) in enumerate(ROWS[1:], start=1):
        single = model.run(SOURCE, target=TARGET, ablation=ablation, reference=reference, **args)
        assert (logits[row] - single.logits).abs().max() <= TOL, (ablation, heads)
        zero = model.run(SOURCE, target=TARGET, **args)
        assert (single.logits - zero.logits).abs().max() > MOVED, f"{ablation} of {heads} is zero ablation"


def test_importance_of_every_kind_on_top_of_the_heads_off(model):
    """`every_kind_importance`: each head switched off alone on top of those already off, as KL from the run with
    only those off; NaN at the heads already off."""
    from mha_viz.analysis import effects
    from mha_viz.analysis.patch_kinds import every_kind_importance

    off = {(0, 1)}
    scores = every_kind_importance(model, SOURCE, TARGET, off, position=-1)  # (L_enc + 2 L_dec, H)
    assert scores.shape == (model.keep_layers, H) and torch.isnan(scores[0, 1])
    base = model.run(SOURCE, target=TARGET, ablate=off).logits
    for (layer, head), args in (((CROSS + 1, 2), {"ablate": off, "ablate_cross": {(1, 2)}}),
                                ((L_ENC + 2, 3), {"ablate": off | {(L_ENC + 2, 3)}})):
        want = effects.next_token_kl(base, model.run(SOURCE, target=TARGET, **args).logits, position=-1)
        assert float(scores[layer, head]) == pytest.approx(want, abs=1e-4), (layer, head)
        assert want > 1e-4
