"""Loading an encoder-decoder transformers model (BART, Marian, T5) for `Seq2SeqModel` (hf/seq2seq.py, which makes
one with `build_seq2seq_model`): eager attention, safetensors only, no remote code, and where its three kinds of
attention keep their output projections.
"""
from __future__ import annotations

import torch

from mha_viz.contract import ModelInfo, ModelLoadError
from mha_viz.settings import settings, torch_device


def out_projections(model) -> tuple[list, list, list]:
    """(encoder self, decoder self, cross) output projections, in layer order, for BART/Marian-style and T5-style
    stacks; ModelLoadError for a layout we do not know."""
    base = model.get_encoder(), model.get_decoder()
    enc, dec = base
    if hasattr(enc, "block"):  # T5: block[i].layer[0] self-attention, decoder layer[1] cross-attention
        return ([b.layer[0].SelfAttention.o for b in enc.block], [b.layer[0].SelfAttention.o for b in dec.block],
                [b.layer[1].EncDecAttention.o for b in dec.block])
    if hasattr(enc, "layers") and hasattr(dec, "layers"):  # BART, Marian, mBART, Pegasus, ...
        try:
            return ([layer.self_attn.out_proj for layer in enc.layers],
                    [layer.self_attn.out_proj for layer in dec.layers],
                    [layer.encoder_attn.out_proj for layer in dec.layers])
        except AttributeError:
            pass
    raise ModelLoadError(f"'{model.config.model_type}' is an encoder-decoder model whose layers mha-viz does not "
                         "know how to find; BART, Marian and T5 are supported.")


def load_seq2seq(name: str, title: str, source: str, config) -> tuple[ModelInfo, object, object, torch.device]:
    """An encoder-decoder `source` (folder or hub id) loaded with eager attention, safetensors only, no remote code
    -> (its ModelInfo, the transformers model, its tokenizer, its device), what `Seq2SeqModel` is made from."""
    import transformers

    from mha_viz.models.hf import policy

    n_heads = getattr(config, "num_attention_heads", None) or getattr(config, "num_heads", None) or \
        getattr(config, "encoder_attention_heads", None)
    if not n_heads:
        raise ModelLoadError(f"'{config.model_type}' config has no attention head count.")
    device = torch_device()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(
            source, attn_implementation="eager", trust_remote_code=False, use_safetensors=True,
            dtype=torch.float32).to(device)
    except (OSError, ValueError, EnvironmentError) as err:
        raise ModelLoadError(policy.explain_load_failure(name, err)) from None
    model.eval()
    max_pos = int(getattr(config, "max_position_embeddings", 0) or 10**9)
    enc, dec, _ = out_projections(model)
    info = ModelInfo(name=name, title=title, kind="encoder-decoder", n_layers=len(enc), n_heads=int(n_heads),
                     max_tokens=min(max_pos, settings().max_tokens), causal=False)
    return info, model, tokenizer, model.device
