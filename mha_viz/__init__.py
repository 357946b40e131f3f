"""mha-viz: see, compare and switch off the attention heads of transformers."""
from .analysis.circuits import Circuits, circuits
from .contract import AttentionRun, HeadInside, InputError, Model, ModelInfo, ModelLoadError, UnavailableError
from .models import BUILTIN, checkpoints, load_model

__all__ = ["AttentionRun", "BUILTIN", "Circuits", "HeadInside", "InputError", "Model", "ModelInfo", "ModelLoadError",
           "UnavailableError", "checkpoints", "circuits", "load_model"]
