"""What a user's own model may be: a local folder or a hub id, safetensors only, under a size cap.

`preview_custom` says what a model id would be (folder or hub id, size estimated from a config that is already on
this machine) without loading or fetching anything: a shared link can name any model, and the page asks the
visitor before it loads one.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from mha_viz.contract import ModelLoadError
from mha_viz.settings import settings

MAX_CONFIG_BYTES = 1_000_000  # a config.json is a few kB; a bigger file is not one we parse on a page open


@dataclass(frozen=True)
class CustomPreview:
    """What a custom model id refers to, found offline. `params` is None when no config is readable here."""
    name: str
    kind: str  # "folder" or "hub"
    params: int | None
    where: str  # where the estimate came from, or why there is none, in words for the page


def _check_custom_allowed() -> None:
    """ModelLoadError where this server turns models from a name or folder off (MHA_VIZ_ALLOW_CUSTOM=0)."""
    if not settings().allow_custom:
        raise ModelLoadError(
            "Custom models are turned off on this server (MHA_VIZ_ALLOW_CUSTOM=0). Pick a built-in model."
        )


def _check_name(name: str) -> tuple[str, Path | None]:
    """("folder", path) or ("hub", None) for a name a user may load; ModelLoadError otherwise. No network."""
    _check_custom_allowed()
    if not name or len(name) > 300 or any(ch in name for ch in "\n\r\t\0"):
        raise ModelLoadError("A model id must be a Hugging Face id like 'bert-base-uncased' or a folder path.")
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").exists():
            # A compiled folder (compiled.json) never gets here (`registry.load_model`), so say what each kind needs.
            raise ModelLoadError(
                f"'{name}' exists but is not a model folder: it has no config.json and no compiled.json. A Hugging "
                "Face model folder holds config.json, the tokenizer files and *.safetensors; a compiled program's "
                "folder holds compiled.json and weights.safetensors (write one with `mha-viz compile PROGRAM.py "
                "--out FOLDER`)."
            )
        return "folder", path
    if name.startswith(("http://", "https://")) or ".." in name or name.startswith(("/", "~", ".")):
        raise ModelLoadError(
            f"'{name}' is not a folder on this machine nor a Hugging Face id (ids look like 'owner/name', "
            "without URLs or '..')."
        )
    return "hub", None


def preview_custom(name: str) -> CustomPreview:
    """What loading `name` would mean, found without the network and without loading weights.

    Raises ModelLoadError for what `load_custom` would refuse before any download (custom models off, a bad name,
    a folder without config.json, an estimate over MHA_VIZ_MAX_PARAMS).
    """
    name = name.strip()
    kind, path = _check_name(name)
    if kind == "folder":
        config_file, source = path / "config.json", "its config.json"
    else:
        config_file, source = _cached_hub_config(name), "the copy of its config.json in this machine's hub cache"
    config = _read_config(config_file) if config_file else None
    if config is None:
        why = ("its config.json could not be read" if kind == "folder"
               else "it cannot be estimated offline: this server has no copy of its config")
        return CustomPreview(name, kind, None, why)
    params = estimate_params(config)
    _refuse_over_cap(params, name)
    return CustomPreview(name, kind, params or None, f"estimated from {source}" if params
                         else f"{source} gives no sizes to estimate from")


def _cached_hub_config(repo_id: str) -> Path | None:
    """The hub cache's config.json for `repo_id`, if one was downloaded before; never touches the network."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # an id the hub library rejects (bad characters, too long) simply has no cached copy
        return None
    return Path(found) if isinstance(found, str) else None


def _read_config(path: Path) -> dict | None:
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


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


def estimate_params(config) -> int:
    """Parameters estimated from a config (a transformers config object or its config.json as a dict): per layer
    attention 4*d^2 plus an MLP of 8*d^2, plus the embeddings. 0 when the config gives no sizes."""
    def get(*keys):
        for key in keys:
            value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return int(value)
        return 0

    d = get("hidden_size", "n_embd", "d_model")
    layers = get("num_hidden_layers", "n_layer", "num_layers")
    vocab = get("vocab_size")
    return 12 * layers * d * d + vocab * d


def _refuse_over_cap(estimate: int, name: str) -> None:
    cap = settings().max_params
    if cap and estimate > float(cap):
        raise ModelLoadError(
            f"'{name}' has about {estimate / 1e6:.0f}M parameters, over this server's cap of "
            f"{float(cap) / 1e6:.0f}M (MHA_VIZ_MAX_PARAMS). Pick a smaller model."
        )


def check_size(config, name: str) -> None:
    """Refuse a model over MHA_VIZ_MAX_PARAMS, estimated from its config before any weights are fetched."""
    _refuse_over_cap(estimate_params(config), name)


def explain_load_failure(name: str, err: Exception) -> str:
    """One line for a failed load: no safetensors, no network, or not a model at all (loading and seq2seq share it)."""
    text = str(err)
    if "use_safetensors" in text or "safetensors" in text.lower() and "not found" in text.lower():
        return (f"'{name}' has no safetensors weights. mha-viz refuses pickle checkpoints (.bin/.pt) because "
                "loading them can run arbitrary code; convert the model to safetensors first.")
    if "offline" in text.lower() or "connect" in text.lower() or "resolve" in text.lower() or "network" in text.lower():
        return (f"Could not load '{name}': the Hugging Face hub cannot be reached from here (no network?). "
                "Use a built-in model or a local folder that holds config.json and *.safetensors.")
    return (f"Could not load '{name}': it is neither a built-in model, a folder holding a model "
            f"(config.json + *.safetensors), nor a model id the hub knows. Details: {text.splitlines()[0][:300]}")
