"""Batched head runs for encoder-decoder models (hf/seq2seq.py): `run_batch_keep` over every kind of head at once.

One transformers forward carries B rows of the same source and the same decoder input; each row switches off its own
heads by a forward pre-hook on each output projection that masks that row's slice of the projection's input (a head's
output, as everywhere in mha-viz). The rows' layout is the model's own: every output projection in
`Seq2SeqModel._modules()` order, M = L_enc + 2 * L_dec of them (the encoder's self-attention layers, the decoder's
self-attention layers numbered as `ablate` numbers them, then the decoder's cross-attention layers), so row b's
keep[b, m, h] = 0 switches off head h of projection m. A row equals `run` with the same heads in `ablate` and
`ablate_cross` (zero ablation), or in `patch` and `patch_cross` when `replace` holds the second source's outputs:
`run` itself is one row of the same hook (`one_row`, `masks`).
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import torch

from mha_viz.contract import EncodedText, InputError
from mha_viz.models.hf import seq2seq_patch


def keep_layers(model) -> int:
    """M: how many output projections a row of `run_batch_keep` sets heads of (encoder, decoder self, cross)."""
    return len(model._modules())


def run_batch_keep(model, text, keep: torch.Tensor, replace: Sequence[torch.Tensor | None] | None = None,
                   positions: list[int] | None = None, target: str | None = None, source: str | None = None,
                   ablation: str = "zero", reference=None) -> tuple[torch.Tensor, torch.Tensor]:
    """One forward of B rows of `text` (the source) reading `target` (as `run`: None is the source's greedy
    continuation). keep: (B, M, H), 1 on, 0 off, over every output projection in `_modules()` order (see the module
    docstring). A head off outputs 0, or, with `replace`, its value there: one entry per projection, each None (zero)
    or (B or 1, H, P or 1, dh), P the source's length for the encoder's projections and the target's for the
    decoder's (`head_outputs_all(second_source, target)`, each with a leading 1, patches every row from it).
    source: a second source text instead of `replace`: a head off takes its output on it, read on this run's
    decoder input (as `run`'s patch and patch_cross; encoder heads need one token count).
    ablation, reference: instead of `replace`, what "off" means, as `run` takes them ("zero", "mean" or "resample"
    over `reference` source texts, None: the model's example sentences).
    Returns (output (B, T, D): the decoder's last hidden state, logits (B, T, V), or (B, len(positions), V) at
    those target positions)."""
    src = model._source_ids(text.text if isinstance(text, EncodedText) else text)
    tgt = model.greedy_target(src) if target is None else model._target_ids(target)
    n_mod, H = keep_layers(model), model.n_heads
    keep = torch.as_tensor(keep, dtype=torch.float32)
    if keep.ndim != 3 or tuple(keep.shape[1:]) != (n_mod, H) or keep.shape[0] < 1:
        raise InputError(f"keep must be (B, {n_mod}, {H}): one row per run, over every output projection (the "
                         f"encoder's {model.n_enc} self-attention layers, the decoder's {model.n_dec}, then its "
                         f"{model.n_dec} cross-attention layers) and head; got {tuple(keep.shape)}.")
    B = keep.shape[0]
    if source is not None:
        replace = _second_source(model, keep, src, tgt, source)
    elif replace is None and str(ablation) != "zero":
        text_of = text.text if isinstance(text, EncodedText) else text
        replace = [None if v is None else (v[None, :, None] if v.ndim == 2 else v[None])  # (1, H, P or 1, dh)
                   for v in model._replacements(str(ablation), reference, text_of, len(tgt), len(src))]
    values = _replacements(model, replace, B, len(src), len(tgt))
    if positions is not None:
        bad = [p for p in positions if not -len(tgt) <= int(p) < len(tgt)]
        if bad:
            raise InputError(f"positions {bad[:5]} are outside the target's {len(tgt)} positions.")
    with torch.no_grad(), masks(model, keep, values):
        out = model._model(input_ids=torch.tensor([src] * B, device=model._device),
                           decoder_input_ids=torch.tensor([tgt] * B, device=model._device),
                           output_hidden_states=True, use_cache=False)
    output = out.decoder_hidden_states[-1].float().cpu()  # (B, T, D)
    logits = out.logits.float().cpu()  # (B, T, V)
    if positions is not None:
        logits = logits[:, [int(p) for p in positions]]  # (B, P, V)
    return output, logits


def _second_source(model, keep: torch.Tensor, src: list[int], tgt: list[int], source: str) -> list[torch.Tensor]:
    """Every head's output on the second source `source` reading `tgt` (seq2seq_patch.recorded), per projection
    (1, H, P, dh); an InputError, as `run` gives it, where an encoder head is off and the sources differ in length."""
    second = model._source_ids(source)
    off = (keep[:, :model.n_enc] < 1).nonzero().tolist()  # [row, layer, head] of encoder heads off
    seq2seq_patch.check_lined_up(src, second, {(layer, head) for _, layer, head in off})
    H, dh, lined_up = model.n_heads, model.dh, len(second) == len(src)
    return [x[0].float().view(x.shape[1], H, dh).transpose(0, 1)[None]  # (1, H, P, dh)
            if lined_up or index >= model.n_enc else None  # no encoder head is off (checked above)
            for index, x in enumerate(seq2seq_patch.recorded(model, second, tgt))]


def _replacements(model, replace, B: int, n_source: int, n_target: int) -> list[torch.Tensor | None]:
    """`replace` checked: per projection None or (B or 1, H, P or 1, dh) as float32."""
    n_mod = keep_layers(model)
    if replace is None:
        return [None] * n_mod
    replace = list(replace)
    if len(replace) != n_mod:
        raise InputError(f"replace must hold one entry per output projection ({n_mod}: encoder, decoder self, "
                         f"cross, as `head_outputs_all` gives them); got {len(replace)}.")
    out = []
    for index, value in enumerate(replace):
        if value is None:
            out.append(None)
            continue
        value = torch.as_tensor(value, dtype=torch.float32)
        P = n_source if index < model.n_enc else n_target
        if value.ndim != 4 or value.shape[0] not in (1, B) or value.shape[1] != model.n_heads \
                or value.shape[2] not in (1, P) or value.shape[3] != model.dh:
            raise InputError(f"replace[{index}] must be (1 or {B}, {model.n_heads}, 1 or {P}, {model.dh}); got "
                             f"{tuple(value.shape)}. A patch from a second source needs the same token count for "
                             "encoder heads; decoder and cross-attention heads read the same target.")
        out.append(value)
    return out


def one_row(model, replace: dict, n_source: int, n_target: int) -> tuple[torch.Tensor, list]:
    """`run`'s edits, {(projection index, head): None (zero) or its output (P, dh) or (dh,)}, as one row of
    `masks`: keep (1, M, H) and per projection None or (1, H, P, dh)."""
    keep = torch.ones(1, keep_layers(model), model.n_heads)  # (1, M, H)
    values: list = [None] * keep.shape[1]
    for (index, head), value in replace.items():
        keep[0, index, head] = 0.0
        if value is not None:
            if values[index] is None:
                P = n_source if index < model.n_enc else n_target
                values[index] = torch.zeros(1, model.n_heads, P, model.dh)  # (1, H, P, dh): zero where not given
            values[index][0, head] = value.float().cpu()  # (P, dh) <- (P, dh) or (dh,)
    return keep, values


@contextlib.contextmanager
def masks(model, keep: torch.Tensor, values: list, record: list | None = None):
    """A forward pre-hook on every projection with a head off in some row: x[b, :, head h] = keep * x + (1 - keep) *
    value (0 where no value), exactly x where kept and exactly the value where not. `record`: a list that receives
    each projection's input before the edit (B, P, H * dh)."""
    H, dh = model.n_heads, model.dh
    handles = []
    for index, module in enumerate(model._modules()):
        k = keep[:, index]  # (B, H)
        if bool((k == 1).all()) and record is None:
            continue

        def hook(mod, args, k=k, value=values[index], index=index):
            x = args[0]  # (B, P, H * dh)
            if record is not None:
                record[index] = x.detach()
            if bool((k == 1).all()):
                return None
            B, P = x.shape[:2]
            heads = x.view(B, P, H, dh)  # (B, P, H, dh)
            on = k.to(x.dtype).to(x.device)[:, None, :, None]  # (B, 1, H, 1)
            edited = heads * on
            if value is not None:
                edited = edited + (1 - on) * value.to(x.dtype).to(x.device).permute(0, 2, 1, 3)  # (B|1, P|1, H, dh)
            return (edited.reshape(B, P, H * dh), *args[1:])

        handles.append(module.register_forward_pre_hook(hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
