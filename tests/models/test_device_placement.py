"""One code path on the CPU and a GPU (issue 35 item 4): MHA_VIZ_DEVICE places every model, the in-repo stacks
included, and MHA_VIZ_DTYPE keeps their weights in bfloat16 while the attention weights and every score shown stay
float32 and close to the float32 run. Only the CPU runs here (CI has no GPU); the CUDA path is the same code, and
benchmarks/device_check.py checks it on a CUDA machine.

Measured on this CPU (the bounds below leave about 2x room): bfloat16 against float32, largest difference of an
attention weight 0.018 (tiny), 0.018 (MiniLM, patched), 0.0001 (a random 2-layer Llama folder, whose
attention is near uniform); of the final hidden states, 0.5-1.2% of their largest value."""
import pytest
import torch

from mha_viz import load_model
from mha_viz.models.placement import module_device
from mha_viz.settings import settings

TEXT = "The keys to the old cabinet are on the table, so Anna gave the keys to Ben."
SOURCE = "The keys to the old cabinet are on the table, so Mary gave the keys to Ben."


@pytest.fixture
def placed(monkeypatch):
    """placed(name, dtype): a fresh load of `name` (a model name, or a key of `user_folders`) under
    MHA_VIZ_DEVICE=cpu and MHA_VIZ_DTYPE=dtype; never the session's shared models."""
    def load(name, dtype="float32"):
        monkeypatch.setenv("MHA_VIZ_DEVICE", "cpu")
        monkeypatch.setenv("MHA_VIZ_DTYPE", dtype)
        settings.cache_clear()
        try:
            return load_model(name)
        finally:
            settings.cache_clear()
    yield load
    settings.cache_clear()


def _network(model) -> torch.nn.Module:
    for attr in ("lm", "encoder", "stack", "_model"):  # tiny, BERT, compiled, transformers
        if hasattr(model, attr):
            return getattr(model, attr)
    raise AssertionError(f"no network on {type(model).__name__}")


def _weights_dtype(model) -> torch.dtype:
    return next(p for p in _network(model).parameters() if p.is_floating_point()).dtype


@pytest.mark.parametrize("name", ["tiny", "minilm", "written-induction", "llama"])
def test_every_model_is_placed_where_the_setting_says(placed, user_folders, name):
    model = placed(str(user_folders[name]) if name in user_folders else name, "bfloat16")
    assert module_device(_network(model)) == model.device == torch.device("cpu")
    # A compiled program keeps float32: its exact weights would be rounded by bfloat16.
    assert _weights_dtype(model) == (torch.float32 if name.startswith("written") else torch.bfloat16)
    text = TEXT if not name.startswith("written") else " ".join(model.config.vocab[:3] * 2)
    run = model.run(text, ablate={(0, 0)})
    for tensor in (run.attentions, run.output):
        assert tensor.device.type == "cpu" and tensor.dtype == torch.float32
    weights = model.head_weights(0)
    assert weights.w_q.dtype == weights.w_o.dtype == torch.float32 and weights.w_o.device.type == "cpu"


# The largest difference allowed between a bfloat16 and a float32 run's attention weights, per model.
BF16_ATTENTION = {"tiny": 0.04, "minilm": 0.04, "llama": 0.015}


@pytest.mark.parametrize("name", sorted(BF16_ATTENTION))
def test_bfloat16_runs_give_float32_attention_close_to_the_float32_run(placed, user_folders, name):
    source = str(user_folders[name]) if name in user_folders else name
    full, half = placed(source, "float32"), placed(source, "bfloat16")
    assert _weights_dtype(full) == torch.float32 and _weights_dtype(half) == torch.bfloat16
    bound = BF16_ATTENTION[name]
    for kwargs in ({}, {"ablate": {(0, 1), (1, 2)}}, {"ablate": {(1, 0)}, "ablation": "mean"},
                   {"patch": {(1, 1)}, "source": SOURCE}):
        a, b = full.run(TEXT, **kwargs), half.run(TEXT, **kwargs)
        assert b.attentions.dtype == torch.float32
        gap = float((a.attentions - b.attentions).abs().max())
        assert gap < bound, (kwargs, gap)
        # Each row of weights sums to 1 to float32 precision, not bfloat16's: the softmax ran in float32.
        assert torch.allclose(b.attentions.sum(-1), torch.ones(()), atol=1e-5)
        scale = float(a.output.abs().max())
        assert float((a.output - b.output).abs().max()) < 0.05 * scale, kwargs


@pytest.mark.parametrize("name", ["tiny", "minilm", "llama"])
def test_bfloat16_scores_inside_a_head_are_float32_and_agree_with_its_weights(placed, user_folders, name):
    model = placed(str(user_folders[name]) if name in user_folders else name, "bfloat16")
    heads = model.inside_layer(TEXT, 1)  # raises when softmax(scores) differs from the weights by over 1e-4
    assert all(h.scores.dtype == h.weights.dtype == h.q.dtype == torch.float32 for h in heads)
    outputs = model.head_outputs(TEXT)
    assert outputs.dtype == torch.float32 and outputs.device.type == "cpu"


def test_tiny_keeps_its_readout_in_bfloat16(placed):
    """Direct effects check the frozen-scale norm against the model's own output; in bfloat16 that output is
    rounded to bfloat16, which the check allows (and float32's tolerance, unchanged, would refuse)."""
    readout = placed("tiny", "bfloat16").readout(TEXT)
    assert readout is not None and readout.logits.dtype == torch.float32


def test_the_batch_budgets_follow_the_model_device(placed, monkeypatch):
    """A model on a CUDA device sizes its batches by that device's free memory (a faked reading here): the
    head-importance map's growing batches and the census's padded ones."""
    from mha_viz.models import schedule

    model = placed("tiny")
    on_cpu = model.wave_rows(60)
    assert on_cpu == max(1, min(schedule.WAVE_TOKENS // 60, schedule.BATCH_ATTENTION // (model.n_heads * 60 * 60 * 4)))
    gib = 2**30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (1 * gib, 80 * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 0)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 0)
    model._device = torch.device("cuda", 0)  # what placing it on a GPU sets; the reading above is that GPU's
    room = schedule.cuda_budget(1 * gib, 0, 0)
    assert model.wave_rows(60) == min(room.wave_tokens // 60, room.attention // (model.n_heads * 60 * 60 * 4))
    assert model.wave_rows(60) > on_cpu
    lengths = [60] * 40
    assert len(model._batches(lengths)) < len(model.__class__._batches(placed("tiny"), lengths))


def test_bfloat16_batched_paths_run_and_stay_near_float32(placed):
    """The engine's batched paths (growing batches resumed from kept bfloat16 states, padded batches) in bfloat16:
    the head-importance map and `run_many` come back float32, near the float32 model's (the map moved by 4.5% of
    its largest value here: its KL is read from logits the bfloat16 LM head rounded)."""
    from mha_viz.analysis.importance import head_importance

    full, half = placed("tiny"), placed("tiny", "bfloat16")
    a, b = head_importance(full, TEXT), head_importance(half, TEXT)
    assert b.dtype == torch.float32 and float((a - b).abs().max()) < 0.1 * float(a.abs().max())
    texts = [TEXT, SOURCE, "the cat sat on the mat"]
    ours = half.run_many(texts, lambda i, run: run.attentions)
    for text, att in zip(texts, ours):
        assert att.dtype == torch.float32
        assert float((att - full.run(text).attentions).abs().max()) < BF16_ATTENTION["tiny"]


@pytest.mark.parametrize("arch", ["GPT-2", "GPT-Neo", "Gemma 2", "Qwen3"])
def test_bfloat16_transformers_architectures_attend_in_float32(placed, tmp_path, arch):
    """The transformers attention function (and GPT-Neo's own `_attn`, wrapped) attend in float32 when the weights
    are bfloat16: weights float32, near float32's, and inside a head the recomputed softmax(q . k) matches them.
    Measured: every interface architecture of the matrix within 0.01 of float32 (Qwen3 0.0099, Gemma 3 0.0094);
    Bloom, MPT and Falcon, whose whole attention forward mha-viz replaces, are the next test."""
    from tests.models.hf.architectures import BY_NAME, build

    text = "the cat sat on the mat while anna gave the old keys to ben"
    folder = build(BY_NAME[arch], tmp_path / "model", (text,))
    full, half = placed(str(folder)), placed(str(folder), "bfloat16")
    a, b = full.run(text, ablate={(1, 0)}), half.run(text, ablate={(1, 0)})
    assert b.attentions.dtype == torch.float32 and float((a.attentions - b.attentions).abs().max()) < 0.02
    assert all(h.weights.dtype == torch.float32 for h in half.inside_layer(text, 1))


@pytest.mark.parametrize("arch", ["Bloom", "MPT", "Falcon", "Falcon (alibi)"])
def test_bfloat16_replaced_attention_forwards_attend_in_float32(placed, tmp_path, arch):
    """Bloom, MPT and Falcon, whose whole attention forward mha-viz replaces (models/hf/ablation.py), attend in
    float32 under bfloat16 weights as the attention function does: weights float32 and near float32's, and inside
    a head q . kᵀ * scale + the ALiBi term (float32 too) sums to the scores whose softmax is the weights.
    Measured against the float32 run: largest difference of an attention weight 0.0001-0.0002 (0.0016-0.0021, rows
    summing to 1 only to 2e-3, and inside() refused, while these forwards attended in bfloat16); the ALiBi term
    equal to the float32 run's."""
    from tests.models.hf.architectures import BY_NAME, build
    from tests.models.hf.test_inside_alibi import FALCON_ALIBI

    text = "the cat sat on the mat while anna gave the old keys to ben"
    folder = build(FALCON_ALIBI if arch == "Falcon (alibi)" else BY_NAME[arch], tmp_path / "model", (text,))
    full, half = placed(str(folder)), placed(str(folder), "bfloat16")
    assert _weights_dtype(half) == torch.bfloat16
    a, b = full.run(text, ablate={(1, 0)}), half.run(text, ablate={(1, 0)})
    assert b.attentions.dtype == torch.float32 and float((a.attentions - b.attentions).abs().max()) < 0.02
    assert torch.allclose(b.attentions.sum(-1), torch.ones(()), atol=1e-5)  # a float32 softmax, not bfloat16's
    heads = half.inside_layer(text, 1)  # raises when softmax(scores) differs from the weights by over 1e-4
    alibi = arch != "Falcon"  # the matrix's Falcon is rotary
    for h, f in zip(heads, full.inside_layer(text, 1)):
        assert h.scores.dtype == h.weights.dtype == h.q.dtype == torch.float32
        assert (h.position_bias is not None) == alibi
        allowed = torch.isfinite(h.scores)  # (Q, K)
        pieces = h.q @ h.k.T * h.scale  # (Q, K)
        if alibi:
            assert h.position_bias.dtype == torch.float32
            torch.testing.assert_close(h.position_bias[allowed], f.position_bias[allowed], atol=1e-6, rtol=0)
            pieces = pieces + h.position_bias
        torch.testing.assert_close(h.scores[allowed], pieces[allowed], atol=1e-5, rtol=0)
