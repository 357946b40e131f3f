"""mha-viz: see, compare and switch off the attention heads of transformers."""
from .analysis import census_run as _census_run
from .analysis.census_run import CensusConfig, HeadCensus
from .analysis.circuits import Circuits, circuits
from .contract import AttentionRun, HeadInside, InputError, Model, ModelInfo, ModelLoadError, UnavailableError
from .models import BUILTIN, checkpoints, load_model, seeds
from .models.examples import census_texts as _census_texts
from .models.registry import census_control as _census_control
from .notebook import show, show_census, show_circuits  # notebook pictures; anywidget only when show() is called


def head_census(model: Model, texts=None, seed: int = 0, config: CensusConfig | None = None,
                control: Model | str | None = "auto", progress=None) -> HeadCensus:
    """Measure every head of `model` on inputs made for each question (`mha_viz.analysis.census_run.head_census`,
    whose docstring says what each argument means), with control="auto" resolved here: the untrained twin where one
    ships (the tiny model and its seeds), else "destroyed" (inputs with the relation destroyed); and texts=None
    resolved here too: the model's example sentences, the shipped ones for a model without its own."""
    texts = _census_texts(model) if texts is None else texts
    return _census_run.head_census(model, texts=texts, seed=seed, config=config,
                                   control=_census_control(model, control), progress=progress)


__all__ = ["AttentionRun", "BUILTIN", "CensusConfig", "Circuits", "HeadCensus", "HeadInside", "InputError", "Model",
           "ModelInfo", "ModelLoadError", "UnavailableError", "checkpoints", "circuits", "head_census", "load_model",
           "seeds", "show", "show_census", "show_circuits"]
