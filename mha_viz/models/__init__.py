"""Models behind the contract: the registry (`load_model`, `checkpoints`), our own stack (`tiny/`) and transformers
(`hf/`)."""
from mha_viz.models.hf.policy import CustomPreview, preview_custom
from mha_viz.models.registry import BUILTIN, checkpoints, is_shipped, load_model, seeds

__all__ = ["BUILTIN", "CustomPreview", "checkpoints", "is_shipped", "load_model", "preview_custom", "seeds"]
