"""mha-viz: see, compare and switch off the attention heads of transformers."""
from .analysis.census_run import CensusConfig, HeadCensus, head_census
from .analysis.circuits import Circuits, circuits
from .contract import AttentionRun, HeadInside, InputError, Model, ModelInfo, ModelLoadError, UnavailableError
from .models import BUILTIN, checkpoints, load_model, seeds
from .notebook import show, show_census, show_circuits  # notebook pictures; anywidget only when show() is called

__all__ = ["AttentionRun", "BUILTIN", "CensusConfig", "Circuits", "HeadCensus", "HeadInside", "InputError", "Model",
           "ModelInfo", "ModelLoadError", "UnavailableError", "checkpoints", "circuits", "head_census", "load_model",
           "seeds", "show", "show_census", "show_circuits"]
