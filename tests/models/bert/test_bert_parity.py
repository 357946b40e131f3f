"""The in-repo BERT encoder (models/bert), which the app runs MiniLM on, against transformers: the same tokens and
numbers from every method of the contract as the transformers adapter (models/hf) on the same weights, and
against transformers' own BertModel with its own tokenizer (no mha-viz code on that side)."""
import sys

import pytest
import torch

from mha_viz import load_model
from mha_viz.models.bert.adapter import BertModel
from mha_viz.models.hf import load_minilm_hf

from reference import eager_copy, hf_inputs

TEXTS = [
    "The keys to the cabinet are on the table.",
    "Héllo wörld! naïve café 😀 ﬁ",
    "a",
    "日本語のテキスト and mixed ＡＢＣ",
    "  spaces   and\ttabs\nnewlines  ",
    "[MASK] is [SEP] here [UNK] and [CLS]",
    "word " * 600,  # past the 512-token limit: both cut it the same way, [SEP] kept
]
TEXT = TEXTS[0]
ATOL = 2e-5


@pytest.fixture(scope="module")
def native():
    model = load_model("minilm")
    assert isinstance(model, BertModel)
    return model


@pytest.fixture(scope="module")
def hf():
    return load_minilm_hf()


def test_loading_minilm_does_not_import_transformers():
    # The point of the in-repo encoder: a cold start without transformers' import (benchmarks/RESULTS.md).
    import subprocess

    code = ("import sys; from mha_viz import load_model; m = load_model('minilm'); m.run('The keys are here.'); "
            "print(sorted(k for k in ('transformers', 'sympy', 'torch._dynamo') if k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_same_tokens_and_numbers_as_the_transformers_adapter(native, hf, text):
    a, b = hf.run(text), native.run(text)
    assert b.tokens == a.tokens and b.token_ids == a.token_ids
    assert (b.special, b.unknown, b.truncated) == (a.special, a.unknown, a.truncated)
    torch.testing.assert_close(b.attentions, a.attentions, atol=ATOL, rtol=0)
    torch.testing.assert_close(b.output, a.output, atol=ATOL, rtol=0)
    assert b.logits is None
    assert native.token_count(text) == hf.token_count(text)
    assert native.decode_ids(a.token_ids[:12]) == hf.decode_ids(a.token_ids[:12])


def test_equals_transformers_bert_with_its_own_tokenizer(native):
    ref = eager_copy(native)
    for text in TEXTS:
        enc = hf_inputs(native, text)
        with torch.no_grad():
            out = ref(**enc, output_attentions=True)
        run = native.run(text)
        assert run.token_ids == enc["input_ids"][0].tolist()
        torch.testing.assert_close(run.attentions, torch.stack([a[0] for a in out.attentions]), atol=ATOL, rtol=0)
        torch.testing.assert_close(run.output, out.last_hidden_state[0], atol=ATOL, rtol=0)


@pytest.mark.parametrize("ablate", [{(0, 3)}, {(2, 1), (5, 11)}])
@pytest.mark.parametrize("ablation", ["zero", "mean", "resample"])
def test_interventions_equal_the_transformers_adapter(native, hf, ablate, ablation):
    a, b = hf.run(TEXT, ablate, ablation=ablation), native.run(TEXT, ablate, ablation=ablation)
    torch.testing.assert_close(b.attentions, a.attentions, atol=ATOL, rtol=0)
    torch.testing.assert_close(b.output, a.output, atol=ATOL, rtol=0)
    keep = torch.ones(3, 6, 12)  # (B, L, H)
    keep[1, 0, 0] = 0
    keep[2, 3, 4] = 0
    torch.testing.assert_close(native.run_batch_keep(TEXT, keep)[0], hf.run_batch_keep(TEXT, keep)[0], atol=ATOL,
                               rtol=0)


def test_inside_a_layer_equals_the_transformers_adapter(native, hf):
    for x, y in zip(hf.inside_layer(TEXT, 2, {(0, 1)}), native.inside_layer(TEXT, 2, {(0, 1)})):
        for field in ("q", "k", "v", "scores", "weights", "contribution", "resid", "bias"):
            torch.testing.assert_close(getattr(y, field), getattr(x, field), atol=1e-4, rtol=0, msg=field)
        assert (y.scale, y.kv_head, y.ablated, y.tokens) == (x.scale, x.kv_head, x.ablated, x.tokens)


def test_norms_head_outputs_and_gradients_equal_the_transformers_adapter(native, hf):
    va, wa = hf.norm_inputs(TEXT, {(1, 1)})
    vb, wb = native.norm_inputs(TEXT, {(1, 1)})
    torch.testing.assert_close(vb, va, atol=ATOL, rtol=0)
    torch.testing.assert_close(wb, wa, atol=0, rtol=0)
    torch.testing.assert_close(native.head_outputs(TEXT), hf.head_outputs(TEXT), atol=ATOL, rtol=0)
    def metric(out, logits):
        return out[1:].pow(2).sum()

    (oa, ga), (ob, gb) = hf.head_gradients(TEXT, metric), native.head_gradients(TEXT, metric)
    torch.testing.assert_close(ob, oa, atol=ATOL, rtol=0)
    torch.testing.assert_close(gb, ga, atol=1e-4, rtol=1e-4)


def test_the_rest_of_the_contract_matches(native, hf):
    assert native.info == hf.info
    assert native.mask_token == hf.mask_token == "[MASK]"
    assert native.readout(TEXT) is None and hf.readout(TEXT) is None
    assert native.examples() == hf.examples()
    assert native.token_id("keys") == hf.token_id("keys")
    assert native.decode(native.token_id("keys")) == hf.decode(hf.token_id("keys")) == "keys"
    with pytest.raises(Exception, match="not one"):
        native.token_id("keys keys")
