"""`load_model(name)`: the one entry point from a model name to an adapter behind the contract; `checkpoints(name)`:
the training steps a model was saved at. The built-in models are one table of `ModelSpec`s: the page reads titles,
load notes and whether a name ships with the app from it, never by comparing a name."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from mha_viz.contract import Model, ModelLoadError

Progress = Callable[[str], None] | None


def _minilm(progress: Progress) -> Model:
    from mha_viz.models.bert.adapter import load_minilm  # the in-repo encoder: no transformers import

    return load_minilm()


def _smollm2(progress: Progress) -> Model:
    from mha_viz.models.hf import load_smollm2

    return load_smollm2(progress)


def _tiny(progress: Progress) -> Model:
    from mha_viz.models.tiny.adapter import load_tiny

    return load_tiny(trained=True)


def _tiny_untrained(progress: Progress) -> Model:
    from mha_viz.models.tiny.adapter import load_tiny

    return load_tiny(trained=False)


def _tiny_steps() -> list[int]:
    from mha_viz.models.tiny.adapter import checkpoint_steps

    return checkpoint_steps()


@dataclass(frozen=True)
class ModelSpec:
    name: str  # what load_model takes, and the value of ?model= in links
    title: str  # the picker's label
    load: Callable[[Progress], Model]
    # Said while the model loads the first time on a server; None when loading takes a second or two.
    load_note: str | None = None
    # The training steps saved for it (load one as f"{family}@{step}"); None for models saved at no step.
    steps: Callable[[], list[int]] | None = None
    family: str | None = None  # the name a saved step is loaded under: "tiny" for tiny and tiny-untrained


SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("minilm", "all-MiniLM-L6-v2 — encoder, 6 layers x 12 heads", _minilm),
    ModelSpec("smollm2", "SmolLM2-135M-Instruct — causal LM, 30 layers x 9 heads", _smollm2,
              load_note="Loading SmolLM2 (the first start on a server converts its GGUF to float32, about 20-30 s)"),
    ModelSpec("tiny", "tiny — in-repo stack, trained here", _tiny, steps=_tiny_steps, family="tiny"),
    ModelSpec("tiny-untrained", "tiny-untrained — same stack at its seeded initialisation", _tiny_untrained,
              steps=_tiny_steps, family="tiny"),
)
_BY_NAME = {spec.name: spec for spec in SPECS}
BUILTIN = {spec.name: spec.title for spec in SPECS}  # name -> title, in the picker's order (the first is the default)

_STEP = re.compile(r"^([a-z][a-z0-9-]*)@(\d{1,9})$")


def spec(name: str) -> ModelSpec | None:
    """The built-in model `name` names, also for a saved step ("tiny@400" -> the tiny spec); None otherwise."""
    if not isinstance(name, str):
        return None
    name = name.strip()
    if name in _BY_NAME:
        return _BY_NAME[name]
    match = _STEP.match(name)
    family = _BY_NAME.get(match.group(1)) if match else None
    return family if family is not None and family.steps is not None else None


def step_of(name: str) -> int | None:
    """N for "family@N" of a built-in family, whether or not N was saved; None otherwise."""
    match = _STEP.match(name.strip()) if isinstance(name, str) else None
    return int(match.group(2)) if match and spec(name) is not None else None


def checkpoints(name: str) -> list[int]:
    """The sorted training steps saved for model `name` (load one with `load_model(f"{name}@{step}")`);
    [] for models saved at no step but their last (every model but the in-repo tiny one)."""
    found = spec(name)
    return found.steps() if found is not None and found.steps is not None else []


def is_shipped(name: str) -> bool:
    """True for a model that ships with the app (a built-in name, or `tiny@N` at a saved step): loading it reads
    nothing from outside the install, so a link may open it without asking the visitor first."""
    if not isinstance(name, str):
        return False
    name = name.strip()
    if name in _BY_NAME:
        return True
    step = step_of(name)
    return step is not None and step in checkpoints(name)


def load_model(name: str, progress: Callable[[str], None] | None = None) -> Model:
    """Load a built-in model by name ("tiny@N": the tiny model at training step N, see `checkpoints`), or a
    Hugging Face id / local folder holding a safetensors model.

    Raises ModelLoadError with a message that says what went wrong and what to do.
    """
    if not isinstance(name, str) or not name.strip():
        raise ModelLoadError(f"Model name must be non-empty text; try one of: {', '.join(BUILTIN)}")
    key = name.strip()
    if key in _BY_NAME:
        return _BY_NAME[key].load(progress)
    step = step_of(key)
    if step is not None:
        from mha_viz.models.tiny.adapter import load_tiny

        return load_tiny(step=step)  # a step that was not saved: ModelLoadError listing the saved ones
    from mha_viz.models.hf import load_custom

    return load_custom(key)
