"""Models behind the contract: the registry (`load_model`, `checkpoints`), our own stack (`tiny/`) and transformers
(`hf/`)."""
from mha_viz.models.hf.policy import CustomPreview, preview_custom
from mha_viz.models.registry import (
           BUILTIN,
           SPECS,
           ModelSpec,
           checkpoints,
           is_shipped,
           load_model,
           seeds,
           spec,
           step_of,
           training_record,
)

__all__ = ["BUILTIN", "SPECS", "CustomPreview", "ModelSpec", "checkpoints", "is_shipped", "load_model",
           "preview_custom", "seeds", "spec", "step_of", "training_record"]
