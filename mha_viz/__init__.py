"""mha-viz: see, compare and switch off the attention heads of transformers."""
from .analysis import census_run as _census_run
from .analysis.census_run import CensusConfig, HeadCensus
from .analysis.circuits import Circuits, circuits
from .contract import AttentionRun, HeadInside, InputError, Model, ModelInfo, ModelLoadError, UnavailableError
from .models import BUILTIN, checkpoints, load_model, seeds
from .models.examples import census_texts as _census_texts
from .models.registry import census_control as _census_control

_NOTEBOOK = ("show", "show_census", "show_circuits", "show_twins")  # mha_viz.notebook's, imported when first read


def __getattr__(name: str):
    """`mha_viz.show` and the other notebook functions, imported on first use: the Streamlit page imports this
    package too (every `mha_viz.app` module does), and must not load the notebook's."""
    if name in _NOTEBOOK:
        from . import notebook

        return getattr(notebook, name)
    if name == "study":  # mha_viz.study(run_dirs, out): a callable module; ray and duckdb only when a study runs
        import importlib

        return importlib.import_module(f"{__name__}.study")
    raise AttributeError(f"module 'mha_viz' has no attribute {name!r}")


def head_census(model: Model, texts=None, seed: int = 0, config: CensusConfig | None = None,
                control: Model | str | None = "auto", progress=None) -> HeadCensus:
    """Measure every head of `model` on inputs made for each question (`mha_viz.analysis.census_run.head_census`,
    whose docstring says what each argument means), with control="auto" resolved here: the untrained twin where one
    ships (the tiny model and its seeds), else "destroyed" (inputs with the relation destroyed); and texts=None
    resolved here too: the model's example sentences, the shipped ones for a model without its own."""
    texts = _census_texts(model) if texts is None else texts
    return _census_run.head_census(model, texts=texts, seed=seed, config=config,
                                   control=_census_control(model, control), progress=progress)


def compare_twins(written: Model | str, learned: Model | str, n_texts: int = 200, seed: int = 0,
                  ablation: str = "zero"):
    """A written model beside a learned twin of it (`mha_viz.analysis.twins.compare_twins`, whose docstring says
    what each entry measures): held-out accuracy of each against the program, for each written head the learned
    head(s) attending most like it (mean Jensen-Shannon over queries and inputs) with their census names, what
    switching each off breaks, and whether the twin's top composition pair is the written path. Models or names
    ("written-induction", "learned-induction#seed1"); `n_texts` held-out inputs (never trained on), seeded.
    `.rows()` is the table, `.sentences()` the words."""
    from .analysis.twins import check_twins
    from .analysis.twins import compare_twins as _compare
    from .models.twin_records import held_out_texts

    written = load_model(written) if isinstance(written, str) else written
    learned = load_model(learned) if isinstance(learned, str) else learned
    texts = held_out_texts(written, n_texts, seed)
    check_twins(written, learned, texts[0])  # before the censuses are made
    return _compare(written, learned, texts, head_census(written), head_census(learned), ablation)


def from_tracr(assembled_model, name: str, program=None) -> Model:
    """A model Tracr compiled (`tracr.compiler.compiling.compile_rasp_to_model(..., compiler_bos=...)`) as a model
    of this package, run in torch. With `program`, the RASP SOp it was compiled from, every head says which Select
    wrote it. Needs tracr and jax here only (requirements-compile.txt); `save_compiled` writes a folder that loads
    without them."""
    from .models.compiled.adapter import CompiledModel
    from .models.compiled.tracr_bridge import from_assembled

    config, tensors = from_assembled(assembled_model, name, program)
    return CompiledModel(config, tensors, name=name)


def save_compiled(model: Model, folder) -> str:
    """Write a compiled model (`from_tracr`, or `load_model` of a compiled folder) as safetensors + compiled.json
    into `folder`; `load_model(folder)` reads it back with torch alone. Returns the folder."""
    from .models.compiled import config as _compiled

    if not hasattr(model, "tensors") or not isinstance(getattr(model, "config", None), _compiled.CompiledConfig):
        raise InputError(f"{model.name} was not compiled from a RASP program; save_compiled writes compiled models "
                         "only (from_tracr, or a compiled folder)")
    return str(_compiled.save(folder, model.config, model.tensors))


__all__ = ["AttentionRun", "BUILTIN", "CensusConfig", "Circuits", "HeadCensus", "HeadInside", "InputError", "Model",
           "ModelInfo", "ModelLoadError", "UnavailableError", "checkpoints", "circuits", "compare_twins",
           "head_census", "load_model", "from_tracr", "save_compiled", "seeds", "show", "show_census", "show_circuits",
           "show_twins"]
