"""A compiled model's weights as a folder stores them, and what they are checked against before they are used.

weights.safetensors holds each tensor sparse: its shape, the flat positions of its nonzero entries and their values
(`sparse`). Reading them back (`dense`) makes nothing in proportion to what the file claims before the claim is
checked: the layers stored against n_layers (`check_layers`), each stored shape against the shape compiled.json
implies (`check_shapes`, `expected_shapes`), and all of them together against the file's size (`check_size`). After,
each head the config says a program wrote must have query and key weights (`check_written`). Each fault is one
ModelLoadError naming the file, the tensor or field, and `fix`. `config` is always the folder's `CompiledConfig`
(config.py, which imports this module, so it is not imported here).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from mha_viz.contract import ModelLoadError
from mha_viz.names import head_name

CONFIG_FILE = "compiled.json"
WEIGHTS_FILE = "weights.safetensors"
# A tensor is stored sparse (12 bytes per nonzero entry), so its dense float32 copy is larger than the file: a
# one-hot (D, D) block is D/3 times larger, an all-zero half-layer (Tracr pads every layer) infinitely. The tensors
# together may be DENSE_PER_BYTE times the weights file, or DENSE_FLOOR_BYTES for a small file. Measured: 1.7 to
# 31 times for the shipped folders, 5 to 172 for five of Tracr's library programs (shuffle_dyck: 172, its MLPs
# 3092 wide), so 4096 leaves a margin of 20 over the widest seen.
DENSE_PER_BYTE = 4096
DENSE_FLOOR_BYTES = 64 * 2 ** 20


def expected_shapes(config) -> dict[str, tuple[tuple[int, ...], str]]:
    """Every tensor a folder with `config` stores, with its shape and, in words, the fields of compiled.json that
    imply the shape. Tracr initialises every half-layer of every layer and zeroes the ones a program leaves empty,
    so each one is stored; a tensor beyond these (a layer past n_layers) means the two files disagree."""
    V, P, D = len(config.encoding), config.max_seq_len + 1, config.d_model
    O, Hk, M = max(1, len(config.decoding)), config.n_heads * config.key_size, config.mlp_hidden
    why_d = f"D = len(residual_labels) = {D}"
    why_hk = f"n_heads x key_size = {config.n_heads} x {config.key_size}, {why_d}"
    why_m = f"mlp_hidden = {M}, {why_d}"
    out = {"token_embed": ((V, D), f"len(encoding) = {V}, {why_d}"),
           "pos_embed": ((P, D), f"max_seq_len + 1 = {P}, {why_d}"),
           "unembed": ((D, O), f"{why_d}, len(decoding) = {len(config.decoding)} (1 for a numerical output)")}
    for i in range(config.n_layers):
        for part in ("query", "key", "value"):
            out[f"layers.{i}.attn.{part}.w"] = ((D, Hk), why_hk)
            out[f"layers.{i}.attn.{part}.b"] = ((Hk,), why_hk)
        out[f"layers.{i}.attn.linear.w"] = ((Hk, D), why_hk)
        out[f"layers.{i}.attn.linear.b"] = ((D,), why_d)
        out[f"layers.{i}.mlp.linear_1.w"] = ((D, M), why_m)
        out[f"layers.{i}.mlp.linear_1.b"] = ((M,), why_m)
        out[f"layers.{i}.mlp.linear_2.w"] = ((M, D), why_m)
        out[f"layers.{i}.mlp.linear_2.b"] = ((D,), why_d)
    return out


def check_layers(config, shapes: dict[str, tuple[int, ...]], where: str, fix: str) -> None:
    """n_layers against the layers stored, before `expected_shapes` lists n_layers' tensors (1,000,000 layers: 35 s
    and 3 GB, for a file of 8 kB). Fewer layers than stored is `check_shapes`' "not one compiled.json implies"."""
    present = {int(m.group(1)) for name in shapes if (m := re.fullmatch(r"layers\.(\d{1,9})\..*", name))}
    stored = max(present) + 1 if present else 0
    if config.n_layers > stored:
        raise ModelLoadError(f"{where}: field 'n_layers' is {config.n_layers}, but {WEIGHTS_FILE} stores "
                             f"{stored} layer(s) (layers.0 to layers.{stored - 1}): the two files were not "
                             f"written together; {fix}")


def check_shapes(config, shapes: dict[str, tuple[int, ...]], where: str, fix: str) -> None:
    """Every stored shape against the shape compiled.json implies, before any tensor is made dense."""
    expected = expected_shapes(config)
    for name, (shape, why) in expected.items():
        if name not in shapes:
            raise ModelLoadError(f"{where}: tensor '{name}' is missing; {CONFIG_FILE} implies it, of shape "
                                 f"{shape} ({why}); {fix}")
        if shapes[name] != shape:
            raise ModelLoadError(f"{where}: tensor '{name}' has shape {shapes[name]}, but {CONFIG_FILE} implies "
                                 f"{shape} ({why}); {fix}")
    extra = sorted(set(shapes) - set(expected))
    if extra:
        raise ModelLoadError(f"{where}: tensor '{extra[0]}' is not one {CONFIG_FILE} implies (n_layers = "
                             f"{config.n_layers}; {len(extra)} such tensor(s)): the two files were not written "
                             f"together; {fix}")


def check_size(shapes: dict[str, tuple[int, ...]], path: Path, fix: str) -> None:
    """The dense tensors together against the weights file's size (DENSE_PER_BYTE): shapes the two files agree on
    can still be damaged together (max_seq_len 10^11 and a position table to match)."""
    limit = max(DENSE_FLOOR_BYTES, DENSE_PER_BYTE * path.stat().st_size)
    sizes = {name: 4 * math.prod(shape) for name, shape in shapes.items()}  # float32 bytes, in Python's ints
    if sum(sizes.values()) > limit:
        name = max(sizes, key=sizes.get)
        raise ModelLoadError(f"{path}: tensor '{name}' has shape {shapes[name]}, {sizes[name]:,} bytes dense, and "
                             f"all together {sum(sizes.values()):,}: more than a file of {path.stat().st_size:,} "
                             f"bytes can hold ({DENSE_PER_BYTE} times it); the sizes in {CONFIG_FILE} (max_seq_len, "
                             f"mlp_hidden, n_heads, key_size) were damaged with it; {fix}")


def check_written(config, tensors: dict[str, torch.Tensor], where: str, fix: str) -> None:
    """Each written head on a head that has query and key weights: one whose query or key columns are all zero
    scores every key the same, so its program line would be shown on a head that attends evenly."""
    k = config.key_size
    for i, w in enumerate(config.heads):
        cols = slice(w.head * k, (w.head + 1) * k)
        for part in ("query", "key"):
            weight = tensors[f"layers.{w.layer}.attn.{part}.w"][:, cols]  # (D, k)
            bias = tensors[f"layers.{w.layer}.attn.{part}.b"][cols]  # (k,)
            if not (bool(weight.any()) or bool(bias.any())):
                raise ModelLoadError(f"{where}: field 'heads[{i}]' puts {w.expr} on {head_name((w.layer, w.head))}, "
                                     f"whose {part} weights in {WEIGHTS_FILE} are all zero: no Select was compiled "
                                     f"there, so the two files were not written together; {fix}")


def sparse(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each tensor as its shape, the flat positions of its nonzero entries and their values: Tracr's weights are
    almost all zeros (the three-heads program: 505 of 151,384), so a dense file would be 300 times larger."""
    out = {}
    for name, t in tensors.items():
        flat = t.detach().float().contiguous().view(-1)  # (N,)
        index = flat.nonzero().flatten()  # (nnz,)
        out[f"{name}/shape"] = torch.tensor(list(t.shape), dtype=torch.int64)
        out[f"{name}/index"] = index.to(torch.int64)
        out[f"{name}/value"] = flat[index]  # (nnz,)
    return out


def stored_shapes(stored: dict[str, torch.Tensor], where: str, fix: str) -> dict[str, tuple[int, ...]]:
    """Each tensor `sparse` wrote -> its shape, read without making it dense; a tensor whose stored parts are
    missing, or whose shape is not a short list of sizes, is a ModelLoadError naming it."""
    names = {}
    for key in stored:
        name, _, part = key.rpartition("/")
        if part not in ("shape", "index", "value") or not name:
            raise ModelLoadError(f"{where}: entry '{key}' is none of a tensor's shape, index or value; {fix}")
        names.setdefault(name, set()).add(part)
    out = {}
    for name, parts in names.items():
        lacking = [p for p in ("shape", "index", "value") if p not in parts]
        if lacking:
            raise ModelLoadError(f"{where}: tensor '{name}' is incomplete: its {lacking[0]} ('{name}/{lacking[0]}') "
                                 f"is not stored; {fix}")
        shape = stored[f"{name}/shape"]
        if shape.dtype != torch.int64 or shape.dim() != 1 or shape.numel() > 4 or bool((shape < 0).any()):
            raise ModelLoadError(f"{where}: tensor '{name}' has a malformed shape {shape.tolist()} "
                                 f"({shape.dtype}); {fix}")
        out[name] = tuple(int(n) for n in shape.tolist())
    return out


def dense(stored: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]], where: str = WEIGHTS_FILE,
           fix: str = "") -> dict[str, torch.Tensor]:
    """The tensors `sparse` wrote, dense again, each of its checked shape (`stored_shapes`, then checked against
    the config and the file's size); positions outside the shape, stored twice, or values that are not finite or not
    one per position are a ModelLoadError naming the tensor."""
    out = {}
    for name, shape in shapes.items():
        def bad(problem: str) -> ModelLoadError:
            return ModelLoadError(f"{where}: tensor '{name}' {problem}; {fix}")

        index, value = stored[f"{name}/index"], stored[f"{name}/value"]
        size = math.prod(shape)
        if index.dtype != torch.int64 or index.dim() != 1 or (index.numel() and (
                int(index.min()) < 0 or int(index.max()) >= size)):
            raise bad(f"stores entries outside its shape {shape}")
        ordered = index.sort().values  # (nnz,)
        twice = (ordered[1:] == ordered[:-1]).nonzero()  # (n, 1)
        if twice.numel():  # the scatter below would keep one of the values, which one unspecified
            raise bad(f"stores position {int(ordered[int(twice[0])])} twice; each position is stored once")
        if not value.is_floating_point() or value.shape != index.shape:
            raise bad(f"stores {tuple(value.shape)} {value.dtype} values for {index.numel()} positions")
        if not bool(torch.isfinite(value).all()):
            raise bad("has values that are not finite numbers (NaN or infinity)")
        flat = torch.zeros(size)  # (N,)
        flat[index] = value.float()
        out[name] = flat.view(shape)
    return out
