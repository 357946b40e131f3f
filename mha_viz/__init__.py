"""mha-viz: see, compare and switch off the attention heads of transformers."""
from .contract import AttentionRun, HeadInside, InputError, Model, ModelInfo, ModelLoadError, UnavailableError
from .models import BUILTIN, checkpoints, load_model
from .notebook import show  # the notebook widget; imports anywidget only when called

__all__ = ["AttentionRun", "BUILTIN", "HeadInside", "InputError", "Model", "ModelInfo", "ModelLoadError",
           "UnavailableError", "checkpoints", "load_model", "show"]
