"""mha-viz: see, compare and switch off the attention heads of transformers."""
from .analysis.census_run import CensusConfig, HeadCensus, head_census
from .contract import AttentionRun, HeadInside, InputError, Model, ModelInfo, ModelLoadError, UnavailableError
from .models import BUILTIN, checkpoints, load_model, seeds

__all__ = ["AttentionRun", "BUILTIN", "CensusConfig", "HeadCensus", "HeadInside", "InputError", "Model", "ModelInfo",
           "ModelLoadError", "UnavailableError", "checkpoints", "head_census", "load_model", "seeds"]
