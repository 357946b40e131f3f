"""Models behind the contract: the registry (`load_model`), our own stack (`tiny/`) and transformers (`hf/`)."""
from mha_viz.models.registry import BUILTIN, load_model

__all__ = ["BUILTIN", "load_model"]
