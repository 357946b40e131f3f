"""`load_model(name)`: the one entry point from a model name to an adapter behind the contract; `checkpoints(name)`:
the training steps a model was saved at."""
from __future__ import annotations

import re
from typing import Callable

from mha_viz.contract import Model, ModelLoadError

BUILTIN = {
    "minilm": "all-MiniLM-L6-v2 — encoder, 6 layers x 12 heads",
    "smollm2": "SmolLM2-135M-Instruct — causal LM, 30 layers x 9 heads",
    "tiny": "tiny — in-repo stack, trained here",
    "tiny-untrained": "tiny-untrained — same stack at its seeded initialisation",
}

_STEP = re.compile(r"^tiny@(\d{1,9})$")


def checkpoints(name: str) -> list[int]:
    """The sorted training steps saved for model `name` (load one with `load_model(f"{name}@{step}")`);
    [] for models saved at no step but their last (every model but the in-repo tiny one)."""
    if isinstance(name, str) and (name.strip() in ("tiny", "tiny-untrained") or _STEP.match(name.strip())):
        from mha_viz.models.tiny.adapter import checkpoint_steps

        return checkpoint_steps()
    return []


def is_shipped(name: str) -> bool:
    """True for a model that ships with the app (a built-in name, or `tiny@N` at a saved step): loading it reads
    nothing from outside the install, so a link may open it without asking the visitor first."""
    if not isinstance(name, str):
        return False
    name = name.strip()
    if name in BUILTIN:
        return True
    match = _STEP.match(name)
    return bool(match) and int(match.group(1)) in checkpoints("tiny")


def load_model(name: str, progress: Callable[[str], None] | None = None) -> Model:
    """Load a built-in model by name ("tiny@N": the tiny model at training step N, see `checkpoints`), or a
    Hugging Face id / local folder holding a safetensors model.

    Raises ModelLoadError with a message that says what went wrong and what to do.
    """
    if not isinstance(name, str) or not name.strip():
        raise ModelLoadError(f"Model name must be non-empty text; try one of: {', '.join(BUILTIN)}")
    key = name.strip()
    if key == "minilm":
        from mha_viz.models.bert.adapter import load_minilm  # the in-repo encoder: no transformers import

        return load_minilm()
    if key == "smollm2":
        from mha_viz.models.hf import load_smollm2

        return load_smollm2(progress)
    if key in ("tiny", "tiny-untrained"):
        from mha_viz.models.tiny.adapter import load_tiny

        return load_tiny(trained=key == "tiny")
    step = _STEP.match(key)
    if step:
        from mha_viz.models.tiny.adapter import load_tiny

        return load_tiny(step=int(step.group(1)))
    from mha_viz.models.hf import load_custom

    return load_custom(key)
