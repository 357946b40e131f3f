"""The transformers adapter (on MiniLM's weights; the app runs MiniLM on the in-repo encoder, tests/models/bert)
against transformers' own eager path, and ablation against a hand-made reference."""
import threading

import pytest
import torch

from mha_viz import InputError, load_model
from mha_viz.models.hf import load_minilm_hf

from reference import eager_copy, zero_head_hook

TEXT = "The keys to the cabinet are on the table."


@pytest.fixture(scope="module")
def minilm():
    return load_minilm_hf()


def test_contract_shapes_and_rows(minilm):
    run = minilm.run(TEXT)
    n = len(run.tokens)
    assert (minilm.n_layers, minilm.n_heads) == (6, 12)
    assert run.attentions.shape == (6, 12, n, n)
    assert run.attentions.dtype == torch.float32 and run.output.dtype == torch.float32
    assert run.output.shape == (n, 384)
    assert run.logits is None
    assert run.tokens[0] == "[CLS]" and run.tokens[-1] == "[SEP]"
    assert torch.allclose(run.attentions.sum(-1), torch.ones(6, 12, n), atol=1e-5)
    assert run.ablated == frozenset()


def test_attentions_equal_transformers_eager(minilm):
    ref = eager_copy(minilm)
    enc = minilm._tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = ref(**enc, output_attentions=True)
    assert len(out.attentions) == 6
    expected = torch.stack([a[0] for a in out.attentions])  # (L, H, Q, K)
    run = minilm.run(TEXT)
    assert torch.allclose(run.attentions, expected, atol=1e-5)
    assert torch.allclose(run.output, out.last_hidden_state[0], atol=1e-5)


@pytest.mark.parametrize("layer,head", [(0, 0), (2, 7), (5, 11)])
def test_ablation_equals_reference(minilm, layer, head):
    ref = eager_copy(minilm)
    d_head = 384 // 12
    dense = ref.encoder.layer[layer].attention.output.dense
    handle = dense.register_forward_pre_hook(zero_head_hook(head, d_head))
    enc = minilm._tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = ref(**enc, output_attentions=True)
    handle.remove()
    run = minilm.run(TEXT, ablate={(layer, head)})
    assert torch.allclose(run.output, out.last_hidden_state[0], atol=1e-5)
    assert torch.allclose(run.attentions, torch.stack([a[0] for a in out.attentions]), atol=1e-5)


def test_ablation_changes_only_what_it_should(minilm):
    base = minilm.run(TEXT)
    run = minilm.run(TEXT, ablate={(2, 3)})
    assert run.ablated == frozenset({(2, 3)})
    assert (run.output - base.output).abs().max() > 1e-3
    # Earlier layers and the ablated layer's own patterns are untouched; later layers move.
    assert torch.equal(run.attentions[:3], base.attentions[:3])
    assert (run.attentions[3:] - base.attentions[3:]).abs().max() > 1e-4
    # Nothing was left on the shared model: the next plain run is the baseline, bit for bit.
    again = minilm.run(TEXT)
    assert torch.equal(again.output, base.output) and torch.equal(again.attentions, base.attentions)


def test_batch_of_masks_equals_single_runs(minilm):
    keep = torch.ones(3, 6, 12)
    keep[1, 0, 4] = 0
    keep[2, 5, 0] = 0
    outs, logits = minilm.run_batch_keep(TEXT, keep)
    assert logits is None
    for row, ablate in enumerate([set(), {(0, 4)}, {(5, 0)}]):
        assert torch.allclose(outs[row], minilm.run(TEXT, ablate=ablate).output, atol=1e-5)


def test_threads_see_only_their_own_ablation(minilm):
    sets = [frozenset({(i % 6, (i * 5) % 12)}) for i in range(8)]
    expected = [minilm.run(TEXT, ablate=s).output for s in sets]
    got = [None] * 8
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        for _ in range(3):
            got[i] = minilm.run(TEXT, ablate=sets[i]).output

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for i in range(8):
        # Not bit-equality: a matmul may take another kernel path for differently aligned buffers in another thread.
        # Each thread's result must match its own ablation and be far from every other thread's.
        assert torch.allclose(got[i], expected[i], atol=1e-5), f"thread {i} differs from its single-thread run"
        for j in range(8):
            if sets[j] != sets[i]:
                assert (got[i] - expected[j]).abs().max() > 1e-3, f"thread {i} saw thread {j}'s ablation"


def test_bad_input_is_explained(minilm):
    with pytest.raises(InputError, match="empty"):
        minilm.run("   \n ")
    with pytest.raises(InputError, match="does not exist"):
        minilm.run(TEXT, ablate={(6, 0)})
    with pytest.raises(InputError, match="pairs"):
        minilm.run(TEXT, ablate={"L0H0"})


def test_long_text_is_truncated_and_counted(minilm):
    run = minilm.run("word " * 700)
    assert len(run.tokens) == 512
    assert run.truncated == 702 - 512  # 700 words + [CLS] + [SEP]
    assert run.attentions.shape == (6, 12, 512, 512)


def test_load_model_by_name_is_the_same_adapter():
    model = load_model("minilm")
    assert model.info.kind == "encoder" and model.n_layers == 6


def test_norm_inputs_rebuild_the_attention_output(minilm):
    """sum_j alpha_ij f(x_j) over keys and heads must equal the layer's attention output before its bias."""
    layer = 2
    values, w_o = minilm.norm_inputs(TEXT)  # (L, H, K, dh), (L, H, dh, D)
    run = minilm.run(TEXT)
    vectors = torch.einsum("hqk,hkd,hde->qe", run.attentions[layer], values[layer], w_o[layer])  # (Q, D)
    dense = minilm._model.encoder.layer[layer].attention.output.dense
    captured = {}
    handle = dense.register_forward_hook(lambda m, args, out: captured.setdefault("out", out))
    enc = minilm._tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        minilm._model(**enc)
    handle.remove()
    assert torch.allclose(vectors, captured["out"][0] - dense.bias, atol=1e-4)
