"""mha-viz: see, compare and switch off the attention heads of transformers."""
from .contract import AttentionRun, InputError, Model, ModelInfo, ModelLoadError
from .models import BUILTIN, load_model

__all__ = ["AttentionRun", "BUILTIN", "InputError", "Model", "ModelInfo", "ModelLoadError", "load_model"]
