"""`load_model(name)`: the one entry point from a model name to an adapter behind the contract."""
from __future__ import annotations

from typing import Callable

from mha_viz.contract import Model, ModelLoadError

BUILTIN = {
    "minilm": "all-MiniLM-L6-v2 — encoder, 6 layers x 12 heads",
    "smollm2": "SmolLM2-135M-Instruct — causal LM, 30 layers x 9 heads",
    "tiny": "tiny — in-repo stack, trained here",
    "tiny-untrained": "tiny-untrained — same stack at its seeded initialisation",
}


def load_model(name: str, progress: Callable[[str], None] | None = None) -> Model:
    """Load a built-in model by name, or a Hugging Face id / local folder holding a safetensors model.

    Raises ModelLoadError with a message that says what went wrong and what to do.
    """
    if not isinstance(name, str) or not name.strip():
        raise ModelLoadError(f"Model name must be non-empty text; try one of: {', '.join(BUILTIN)}")
    key = name.strip()
    if key == "minilm":
        from mha_viz.models.hf import load_minilm

        return load_minilm()
    if key == "smollm2":
        from mha_viz.models.hf import load_smollm2

        return load_smollm2(progress)
    if key in ("tiny", "tiny-untrained"):
        from mha_viz.models.tiny.adapter import load_tiny

        return load_tiny(trained=key == "tiny")
    from mha_viz.models.hf import load_custom

    return load_custom(key)
