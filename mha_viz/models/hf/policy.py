"""What a user's own model may be: a local folder or a hub id, safetensors only, under a size cap."""
from __future__ import annotations

import os
from pathlib import Path

from mha_viz.contract import ModelLoadError
from mha_viz.settings import settings


def load_custom(name: str) -> HFModel:
    """A user's model: a local folder or a hub id. Off when MHA_VIZ_ALLOW_CUSTOM=0."""
    if not settings().allow_custom:
        raise ModelLoadError(
            "Custom models are turned off on this server (MHA_VIZ_ALLOW_CUSTOM=0). Pick a built-in model."
        )
    name = name.strip()
    from mha_viz.models.hf.loading import build_hf_model  # here: loading imports this module's size check

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


def check_size(config, name: str) -> None:
    """Refuse a model over MHA_VIZ_MAX_PARAMS, estimated from its config before any weights are fetched."""
    cap = settings().max_params
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
