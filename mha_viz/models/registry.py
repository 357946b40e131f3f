"""`load_model(name)`: the one entry point from a model name to an adapter behind the contract; `checkpoints(name)`:
the training steps a model was saved at; `seeds(name)`: the same recipe trained from other seeds. The built-in
models are one table of `ModelSpec`s: the page reads titles, load notes and whether a name ships with the app from
it, never by comparing a name."""
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


def _written(stem: str) -> Callable[[Progress], Model]:
    """A shipped compiled program (assets/compiled/<stem>/), loaded with torch alone."""
    def load(progress: Progress) -> Model:
        from mha_viz.models.compiled.adapter import load_compiled
        from mha_viz.settings import ASSETS

        return load_compiled(ASSETS / "compiled" / stem, name=f"written-{stem.replace('_', '-')}")

    return load


def _twin(stem: str, seed: int = 0) -> Callable[[Progress], Model]:
    """A learned twin of a shipped written model (assets/twins/<stem>/seed<N>/, `make train-twins`)."""
    def load(progress: Progress) -> Model:
        return _load_twin(stem, seed)

    return load


def _load_twin(stem: str, seed: int) -> Model:
    from mha_viz.models.twin_records import SHIP_AT, TWIN_ASSETS, seed_folder, tried
    from mha_viz.models.twins.adapter import is_twin_folder, load_twin

    folder = seed_folder(TWIN_ASSETS / stem, seed)
    name = twin_name(stem) + (f"#seed{seed}" if seed else "")
    if not is_twin_folder(folder):
        row = next((r for r in tried(TWIN_ASSETS / stem).get("seeds", []) if r["seed"] == seed), None)
        why = (f"seed {seed} reached {100 * row['accuracy']:.1f}% of held-out positions, below "
               f"{100 * SHIP_AT:.0f}%, so it is not shipped as if it had learned the task" if row
               else f"no twin of {stem} was trained from seed {seed}")
        raise ModelLoadError(f"{name}: {why}; shipped: {', '.join(seeds(twin_name(stem))) or 'none'}. Retrain with "
                             "`make train-twins`")
    return load_twin(folder, name=name)


def twin_name(stem: str) -> str:
    """The name a written program's learned twin loads under: "three_heads" -> "learned-three-heads"."""
    return f"learned-{stem.replace('_', '-')}"


def twins(name: str) -> list[str]:
    """The learned twins shipped for the written model `name` ("written-induction" -> ["learned-induction",
    "learned-induction#seed1", ...]: every seed that reached the held-out accuracy to ship); [] for any other."""
    key = name.strip() if isinstance(name, str) else ""
    if not key.startswith("written-") or twin_name(key.removeprefix("written-")) not in _BY_NAME:
        return []
    return seeds(twin_name(key.removeprefix("written-")))


def _tiny_record():
    """tiny's training record (the loss log and probe scores `make train`/`make probe` wrote), read from its folder
    without building the model: it is the same for tiny, tiny-untrained and every saved step."""
    from mha_viz.models.tiny.adapter import training_record

    return training_record()


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
    # Trained here from other seeds too (assets/tiny/seeds/seedN, loaded as "tiny#seedN"): what `seeds` lists.
    seeded: bool = False
    # The name of its untrained twin (the same stack at its initialisation), where one ships: `untrained_name`. The
    # untrained model names itself, for its saved steps (loaded as the family's).
    untrained: str | None = None
    # Its training record read from disk alone (`Model.training_evidence` without loading any weights); None: the
    # model is loaded and asked.
    record: Callable[[], object] | None = None


SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("minilm", "all-MiniLM-L6-v2 — encoder, 6 layers x 12 heads", _minilm),
    ModelSpec("smollm2", "SmolLM2-135M-Instruct — causal LM, 30 layers x 9 heads", _smollm2,
              load_note="Loading SmolLM2 (the first start on a server converts its GGUF to float32, about 20-30 s)"),
    ModelSpec("tiny", "tiny — in-repo stack, trained here", _tiny, steps=_tiny_steps, family="tiny",
              record=_tiny_record, seeded=True, untrained="tiny-untrained"),
    ModelSpec("tiny-untrained", "tiny-untrained — same stack at its seeded initialisation", _tiny_untrained,
              steps=_tiny_steps, family="tiny", record=_tiny_record, seeded=True, untrained="tiny-untrained"),
    # Written, not learned: RASP programs compiled by Tracr (assets/compiled/programs/, `make compile`).
    ModelSpec("written-three-heads", "written: three heads side by side (previous, seen before, first) — compiled "
              "RASP", _written("three_heads")),
    ModelSpec("written-induction", "written: induction circuit (previous-token head, induction head) — compiled "
              "RASP", _written("induction")),
    ModelSpec("written-histogram", "written: histogram (Tracr's make_hist) — compiled RASP", _written("histogram")),
    # Learned, on the same task: the in-repo stack trained on what a written model computes (`make train-twins`).
    ModelSpec("learned-induction", "learned: induction, the in-repo stack trained on written-induction's outputs",
              _twin("induction")),
    ModelSpec("learned-three-heads", "learned: three heads, the in-repo stack trained on written-three-heads' "
              "outputs", _twin("three_heads")),
)
_BY_NAME = {spec.name: spec for spec in SPECS}
BUILTIN = {spec.name: spec.title for spec in SPECS}  # name -> title, in the picker's order (the first is the default)

_STEP = re.compile(r"^([a-z][a-z0-9-]*)@(\d{1,9})$")
# Another training seed of the tiny recipe ("tiny#seed1"), optionally at a saved step ("tiny#seed1@800").
_SEED = re.compile(r"^tiny#seed([1-9]\d{0,3})(?:@(\d{1,9}))?$")
# Another training seed of a learned twin ("learned-induction#seed1").
_TWIN_SEED = re.compile(r"^(learned-[a-z][a-z-]*)#seed([1-9]\d{0,3})$")


def _twin_stem(name: str) -> str | None:
    """"learned-three-heads" (or one of its seeds) -> "three_heads"; None for a name that is no twin."""
    match = _TWIN_SEED.match(name)
    base = match.group(1) if match else name
    return base.removeprefix("learned-").replace("-", "_") if base in _BY_NAME and base.startswith("learned-") \
        else None


def _seed_folder(seed: int):
    from mha_viz.models.tiny.train import seed_folder

    return seed_folder(seed)


def seeds(name: str) -> list[str]:
    """The names `load_model` accepts for the same training recipe under every seed shipped, `name`'s own first
    (["tiny", "tiny#seed1", "tiny#seed2", "tiny#seed3"]); [name] for a model trained once, [] for a name that is
    not a model."""
    if not isinstance(name, str) or not name.strip():
        return []
    key = name.strip()
    own = spec(key)
    if (own is not None and own.seeded) or _SEED.match(key):
        from mha_viz.models.tiny.train import SEEDS_DIR, TINY_ASSETS

        found = sorted(int(p.name.removeprefix("seed")) for p in (TINY_ASSETS / SEEDS_DIR).glob("seed*")
                       if p.name.removeprefix("seed").isdigit() and (p / "model.safetensors").exists())
        return ["tiny"] + [f"tiny#seed{s}" for s in found]
    stem = _twin_stem(key)
    if stem is not None:
        from mha_viz.models.twin_records import TWIN_ASSETS
        from mha_viz.models.twins.adapter import is_twin_folder

        found = sorted(int(p.name.removeprefix("seed")) for p in (TWIN_ASSETS / stem).glob("seed*")
                       if p.name.removeprefix("seed").isdigit() and is_twin_folder(p))
        return [twin_name(stem) + (f"#seed{s}" if s else "") for s in found]
    return [key]


def untrained_name(name: str) -> str | None:
    """The name of `name`'s untrained twin (the same architecture at the initialisation its training started
    from), or None where none ships: only the tiny model and its seeds keep their initialisation."""
    key = name.strip() if isinstance(name, str) else ""
    own, seed = spec(key), _SEED.match(key)
    step = step_of(key)
    if step == 0 or (seed and seed.group(2) == "0"):
        return None  # already the initialisation
    if own is not None and own.untrained not in (None, key):  # a saved step of it has one; the model itself is it
        return own.untrained
    if seed:
        return f"tiny#seed{seed.group(1)}@0"
    return None


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
    if found is not None and found.steps is not None:
        return found.steps()
    seed = _SEED.match(name.strip()) if isinstance(name, str) else None
    if seed:
        from mha_viz.models.tiny.adapter import checkpoint_steps

        return checkpoint_steps(_seed_folder(int(seed.group(1))))
    return []


def training_record(name: str):
    """Model `name`'s training record (what `Model.training_evidence` returns) read from disk alone, where its spec
    can (the tiny family: the notes in every page's sidebar show it, and loaded tiny on a page about MiniLM to do
    so); None where only the loaded model can say."""
    found = spec(name)
    return found.record() if found is not None and found.record is not None else None


def is_shipped(name: str) -> bool:
    """True for a model that ships with the app (a built-in name, or `tiny@N` at a saved step): loading it reads
    nothing from outside the install, so a link may open it without asking the visitor first."""
    if not isinstance(name, str):
        return False
    name = name.strip()
    if name in _BY_NAME:
        return True
    step = step_of(name)
    if step is not None:
        return step in checkpoints(name)
    if _TWIN_SEED.match(name):
        return _twin_stem(name) is not None and name in seeds(name)
    seed = _SEED.match(name)
    if not seed or name.split("@")[0] not in seeds("tiny"):
        return False
    return seed.group(2) is None or int(seed.group(2)) in checkpoints(name)


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
    seed = _SEED.match(key)
    if seed:
        return _load_seed(int(seed.group(1)), None if seed.group(2) is None else int(seed.group(2)))
    twin_seed = _TWIN_SEED.match(key)
    if twin_seed and _twin_stem(key) is not None:
        return _load_twin(_twin_stem(key), int(twin_seed.group(2)))
    from mha_viz.models.compiled.config import is_compiled_folder
    from mha_viz.models.twins.adapter import is_twin_folder

    if is_compiled_folder(key):  # a compiled program's folder (`mha-viz compile`, `save_compiled`): no jax needed
        from mha_viz.models.compiled.adapter import load_compiled
        from mha_viz.models.hf.policy import _check_custom_allowed

        _check_custom_allowed()
        return load_compiled(key)
    if is_twin_folder(key):  # a learned twin's folder (`mha-viz train-twin`)
        from mha_viz.models.hf.policy import _check_custom_allowed
        from mha_viz.models.twins.adapter import load_twin

        _check_custom_allowed()
        return load_twin(key)
    from mha_viz.models.hf import load_custom

    return load_custom(key)


def _load_seed(seed: int, step: int | None) -> Model:
    """The tiny recipe trained from `seed` (see `mha_viz.models.tiny.train.seed_recipe`), at `step` if given."""
    import dataclasses

    from mha_viz.models.tiny.adapter import TinyModel, load_tiny

    folder = _seed_folder(seed)
    if not (folder / "model.safetensors").exists():
        shipped = ", ".join(seeds("tiny")) or "none"
        raise ModelLoadError(f"tiny has no training seed {seed}; shipped: {shipped}. Train it with "
                             f"`python -m mha_viz.models.tiny.train --seed {seed}`")
    base = load_tiny(folder=folder, step=step)
    name = f"tiny#seed{seed}" + ("" if step is None else f"@{step}")
    title = f"tiny, training seed {seed}" + ("" if step is None else f", at step {step}")
    # A new adapter around the loaded network with its own name, so caches keyed on the name keep seeds apart.
    return TinyModel(base.lm, base.vocab, dataclasses.replace(base.info, name=name, title=title), folder)


def untrained_twin(model: Model) -> Model | None:
    """The same architecture at its seeded initialisation, when one ships (the tiny model and its seeds: step 0 of
    the same run); None for every other model, whose initialisation is not shipped."""
    name = untrained_name(model.name)
    return None if name is None else load_model(name)


def census_control(model: Model, control: Model | str | None = "auto",
                   load: Callable[[str], Model] = load_model) -> Model | str | None:
    """What a census of `model` compares with, "auto" resolved: the untrained twin where one ships (loaded by
    `load`, e.g. the app's budgeted cache), else "destroyed" (inputs with the relation destroyed). A Model,
    "destroyed" or None comes back as given. The analysis layer never loads a model, so its callers resolve this."""
    if not (isinstance(control, str) and control == "auto"):
        return control
    name = untrained_name(model.name)
    return "destroyed" if name is None else load(name)
