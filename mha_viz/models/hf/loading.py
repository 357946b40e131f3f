"""Loading a transformers model with eager attention, our ablation function, and no remote code."""
from __future__ import annotations

from mha_viz.contract import ModelInfo, ModelLoadError
from mha_viz.models.hf import policy
from mha_viz.models.hf.ablation import ATTN_IMPL, OWN_ATTENTION, OWN_FORWARD, own_key, register
from mha_viz.models.hf.adapter import HFModel
from mha_viz.models.hf.policy import check_size
from mha_viz.settings import settings, torch_device, torch_dtype


def _kind_of(config) -> str:
    archs = " ".join(getattr(config, "architectures", None) or [])
    if getattr(config, "is_encoder_decoder", False):
        raise ModelLoadError(
            f"'{config.model_type}' is an encoder-decoder model; mha-viz shows self-attention of encoders and "
            "decoder-only language models. Try an encoder (e.g. BERT) or a causal LM (e.g. GPT-2, SmolLM2)."
        )
    if "CausalLM" in archs or "LMHeadModel" in archs:
        return "causal-lm"
    if "MaskedLM" in archs:
        return "masked-lm"
    if not archs:  # e.g. a config read from GGUF: judge by the model type
        from transformers.models.auto.modeling_auto import (
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
            MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        )

        causal, masked = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES
        if config.model_type in causal and config.model_type not in masked:
            return "causal-lm"
    return "encoder"


def _auto_class(kind: str):
    import transformers

    return {
        "causal-lm": transformers.AutoModelForCausalLM,
        "masked-lm": transformers.AutoModelForMaskedLM,
        "encoder": transformers.AutoModel,
    }[kind]


def _heads_of(config) -> tuple[int, int | None]:
    n_heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head", None)
    if not n_heads:
        raise ModelLoadError(f"'{config.model_type}' config has no attention head count; it has no attention we "
                             "can read.")
    return int(n_heads), getattr(config, "num_key_value_heads", None)


def build_hf_model(name: str, title: str, source: str, *, gguf_file: str | None = None, dtype=None) -> HFModel:
    """Load `source` (a folder or hub id) with eager attention, our ablation hook, and no remote code; on
    MHA_VIZ_DEVICE, its weights in `dtype` (default MHA_VIZ_DTYPE)."""
    import transformers

    register()
    try:
        if gguf_file:
            config = transformers.AutoConfig.from_pretrained(source, gguf_file=gguf_file, trust_remote_code=False)
        else:
            config = transformers.AutoConfig.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ModelLoadError(policy.explain_load_failure(name, err)) from None
    if getattr(config, "is_encoder_decoder", False) and not gguf_file:
        from mha_viz.models.hf.seq2seq import build_seq2seq_model

        check_size(config, name)
        return build_seq2seq_model(name, title, source, config)
    kind = _kind_of(config)
    check_size(config, name)
    check_attention_interface(config, kind, name)
    n_heads, n_kv = _heads_of(config)
    device = torch_device()
    load_args = dict(attn_implementation="eager", trust_remote_code=False,
                     dtype=torch_dtype(device) if dtype is None else dtype)
    if device.type == "cuda":
        load_args["device_map"] = "auto"  # accelerate spreads a model too large for one device
    if gguf_file:
        load_args["gguf_file"] = gguf_file
    else:
        load_args["use_safetensors"] = True  # pickle checkpoints can run code when loaded
    try:
        gguf = {"gguf_file": gguf_file} if gguf_file else {}
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=False, **gguf)
        model = _auto_class(kind).from_pretrained(source, **load_args)
    except (OSError, ValueError, EnvironmentError) as err:
        raise ModelLoadError(policy.explain_load_failure(name, err)) from None
    model.set_attn_implementation(ATTN_IMPL)
    model.eval()
    device = model.device  # where the inputs go: the first device when accelerate split the model
    n_layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0))
    max_pos = int(getattr(config, "max_position_embeddings", 0) or getattr(config, "n_positions", 0) or 10**9)
    info = ModelInfo(
        name=name, title=title, kind=kind, n_layers=n_layers, n_heads=n_heads,
        max_tokens=min(max_pos, settings().max_tokens), n_kv_heads=n_kv if n_kv and n_kv != n_heads else None,
    )
    return HFModel(info, model, tokenizer, device)  # counts the layers that really run, see HFModel


# What the attention of architectures outside transformers' attention interface, and not wrapped by mha-viz
# (hf/ablation.py), computes besides q . k, in words.
_OWN_ATTENTION = {
    "deberta": "disentangled content and relative-position scores",
}


def check_attention_interface(config, kind: str, name: str) -> None:
    """Refuse, before any weights load, an architecture whose attention does not go through transformers' attention
    interface: our attention function never runs there, so its heads can be neither read nor switched off."""
    import sys

    import transformers

    _heads_of(config)  # a model with no attention at all (Mamba, an RWKV) says so first

    try:
        cls = _auto_class(kind)._model_mapping[type(config)]
    except (KeyError, ValueError):
        return  # a class transformers cannot map: loading says why
    # Our attention function runs the model's own eager attention, found beside its classes, or wraps an attention
    # module's own method where we know it (hf/ablation.py), a class found by its name and then asked for its key:
    # DeBERTa's DisentangledSelfAttention is not DeBERTa-v2's.
    module = sys.modules.get(cls.__module__)
    found = (getattr(module, key.rpartition(".")[2], None) for key in (*OWN_ATTENTION, *OWN_FORWARD))
    if getattr(module, "eager_attention_forward", None) is not None or \
            any(isinstance(c, type) and own_key(c) is not None for c in found):
        return
    what = _OWN_ATTENTION.get(config.model_type, "attention code of its own")
    raise ModelLoadError(
        f"'{name}' is a {config.model_type} model ({cls.__name__}), whose attention ({what}) does not go through "
        f"transformers' attention interface (transformers {transformers.__version__}), so mha-viz cannot read or "
        "switch off its heads. Try a model of an architecture that does, e.g. GPT-2, Llama, Qwen, Gemma, Mistral, "
        "GPT-NeoX (Pythia), BERT or RoBERTa."
    )


def load_custom(name: str) -> HFModel:
    """A user's model: a local folder or a hub id. Off when MHA_VIZ_ALLOW_CUSTOM=0."""
    name = name.strip()
    kind, path = policy._check_name(name)
    if kind == "folder":
        return build_hf_model(name, f"{path.name} (local folder)", str(path))
    if not policy._hub_reachable():  # looked up at call time: tests replace it
        raise ModelLoadError(
            f"Could not load '{name}': the Hugging Face hub cannot be reached from here (no network, or "
            "HF_HUB_OFFLINE is set), and it is not a folder on this machine. Use a built-in model, or download "
            "the model elsewhere and point to its folder (config.json + *.safetensors)."
        )
    return build_hf_model(name, f"{name} (Hugging Face)", name)
