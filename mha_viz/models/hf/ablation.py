"""Head ablation for transformers models, as a registered attention function.

transformers 5.x dropped `head_mask` (it is silently ignored), so we register our own attention function,
"mha_viz". It calls the model's own eager attention (so the numbers are exactly transformers'), then hands each
head's context, before the output projection, to the HeadEdit of this call (models/interventions.py: keep, zero or
replace it, record it). The edit travels in a ContextVar that a run sets for the duration of one forward: every
thread (every Streamlit session) has its own context, so nothing per-session is ever stored on the shared model.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
from typing import Callable, Iterator

import torch

from mha_viz.contract import ModelLoadError

ATTN_IMPL = "mha_viz"

# While loading, records the attention modules in call order, which is their layer order.
_RECORDER: contextvars.ContextVar[list | None] = contextvars.ContextVar("mha_viz_recorder", default=None)
# Opening a head (`HFModel.inside`): (id of the one attention module to read, dict it fills), for one forward.
_INSIDE: contextvars.ContextVar[tuple[int, dict] | None] = contextvars.ContextVar("mha_viz_inside", default=None)


def _eager_for(module: torch.nn.Module) -> Callable:
    fn = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if fn is None:
        raise ModelLoadError(
            f"{type(module).__name__} has no eager attention in transformers, so its attention weights cannot be "
            "read or ablated. Pick a model whose attention supports attn_implementation='eager'."
        )
    return fn


def _masked_eager_attention(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention, each head's output then kept, zeroed or replaced by this call's HeadEdit."""
    out, weights = _eager_for(module)(module, query, key, value, attention_mask, **kwargs)  # (B, T, H, dh), (B, H, Q, K)
    _capture_inside(module, query, key, value, attention_mask, weights, kwargs)
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.append((module, value))  # value (B, H_kv, K, dh), for the norm view
    out = _apply_edit(module, out)  # (B, T, H, dh)
    return out, weights


def _capture_inside(module, query, key, value, attention_mask, weights, kwargs) -> None:
    """Keep what this module attended with, when a forward opening a head asked for this module. query
    (B, H, Q, dh) and key (B, H_kv, K, dh) are as they enter the dot product (rotary already applied by the
    model); the mask is the additive (or boolean) one eager attention adds; `scaling` is what eager multiplies by."""
    state = _INSIDE.get()
    if state is None or state[0] != id(module):
        return
    state[1].update(query=query, key=key, value=value, mask=attention_mask, weights=weights,
                    scaling=kwargs.get("scaling", getattr(module, "scaling", None)))


@contextlib.contextmanager
def inside(module: torch.nn.Module) -> Iterator[dict]:
    """For one forward in this context: a dict that `module`'s attention call fills (see `_capture_inside`)."""
    found: dict = {}
    token = _INSIDE.set((id(module), found))
    try:
        yield found
    finally:
        _INSIDE.reset(token)


def register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(ATTN_IMPL, _masked_eager_attention)
    # Without its own mask entry an unknown implementation gets no causal mask at all: use eager's.
    AttentionMaskInterface.register(ATTN_IMPL, eager_mask)


# -- interventions: keep or replace each head's output, record outputs and their gradients ------------------------
# (layer index of each attention module by id, a HeadEdit (models/interventions.py)) for the forward running in
# this context. It lives for one call and is never stored on the shared model.
_EDIT: contextvars.ContextVar[tuple[dict[int, int], Callable] | None] = contextvars.ContextVar(
    "mha_viz_edit", default=None
)
# The final norm's (input, output) of the forward running in this context, when asked for (direct effects).
_FINAL_NORM: contextvars.ContextVar[list | None] = contextvars.ContextVar("mha_viz_final_norm", default=None)


def _apply_edit(module, out: torch.Tensor) -> torch.Tensor:
    """out (B, T, H, dh), transformers' layout -> the same after the HeadEdit of this context, if any."""
    state = _EDIT.get()
    if state is None:
        return out
    layer_of, edit = state
    return edit(layer_of[id(module)], out.transpose(1, 2)).transpose(1, 2)  # (B, H, T, dh) -> (B, T, H, dh)


@contextlib.contextmanager
def edited(layer_of: dict[int, int], edit: Callable | None) -> Iterator[None]:
    """Apply `edit(layer, z (B, H, T, dh)) -> z` to every attention layer's head outputs for this context."""
    token = _EDIT.set(None if edit is None else (layer_of, edit))
    try:
        yield
    finally:
        _EDIT.reset(token)


def _record_final_norm(module, args, output) -> None:
    record = _FINAL_NORM.get()
    if record is not None:
        record.append((args[0], output))  # (B, T, D) residual stream in, (B, T, D) normalised out


def watch_final_norm(norm: torch.nn.Module) -> None:
    """Let `final_norm_io()` see this module's input and output. The hook writes only into the calling context's
    list, so it holds no state of any session; it is added once, when the model loads."""
    norm.register_forward_hook(_record_final_norm)


@contextlib.contextmanager
def final_norm_io() -> Iterator[list]:
    seen: list = []
    token = _FINAL_NORM.set(seen)
    try:
        yield seen
    finally:
        _FINAL_NORM.reset(token)
