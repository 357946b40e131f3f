"""Where a model runs and in what number format: MHA_VIZ_DEVICE and MHA_VIZ_DTYPE (mha_viz/settings.py) applied to
every model, the in-repo stacks (tiny, BERT, compiled) and transformers models alike. One code path on the CPU and
on a GPU: a forward moves its token ids to the model's device; what the engine hands back is float32 on the CPU.

The attention core (scores, softmax, weights @ v) is computed in float32 whatever the weights are stored in
(models/attention.attention, hf/ablation.py), so the weights and head outputs shown, and every score read from
them, are float32; the projections, MLPs and LM head run in the weights' dtype, so logits, and the metrics read
from them (head importance, patching), carry its rounding (bfloat16 moved tiny's importance map by 4.5% of its
largest value, tests/models/test_device_placement.py).
"""
from __future__ import annotations

import torch
from torch import nn

from mha_viz.settings import torch_device, torch_dtype


def place(module: nn.Module, float32: bool = False) -> nn.Module:
    """`module` moved to MHA_VIZ_DEVICE and its floating-point weights cast to MHA_VIZ_DTYPE (float32=True keeps
    them float32: a compiled program's weights are exact values that bfloat16 would round). Boolean and integer
    buffers (causal masks) keep their type. In place, as nn.Module.to is; returned for chaining."""
    device = torch_device()
    dtype = torch.float32 if float32 else torch_dtype(device)
    return module.to(device=device, dtype=dtype)


def module_device(module: nn.Module) -> torch.device:
    """The device of a module's first parameter (the CPU for one without parameters)."""
    first = next(module.parameters(), None)
    return torch.device("cpu") if first is None else first.device
