"""The per-head slicing now lives in `mha_viz.heads` (under both models/ and analysis/); kept here for the engine's
import until models/interventions.py reads it from there."""
from mha_viz.heads import out_proj_per_head, repeat_kv, split_heads

__all__ = ["out_proj_per_head", "repeat_kv", "split_heads"]
