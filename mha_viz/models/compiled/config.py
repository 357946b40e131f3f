"""A compiled model on disk: safetensors weights and a JSON config that says everything a program wrote.

A model compiled from a RASP program by Tracr (Lindner et al. 2023) is saved as a folder of two files:
    weights.safetensors   each tensor stored sparse (its shape, the flat positions of its nonzero entries and their
                          values: Tracr's weights are almost all zeros), read back dense as
                          token_embed (V, D), pos_embed (P, D), unembed (D, O), and per layer i
                          layers.i.attn.{query,key,value,linear}.{w,b} and layers.i.mlp.{linear_1,linear_2}.{w,b}
                          (an empty half-layer is all zeros: Tracr leaves it so), in Tracr's own layout: w is
                          (in, out), heads side by side in the columns of query/key/value, (H * key_size, D) rows
                          of linear
    compiled.json         `CompiledConfig`: the vocabulary and its encoding, BOS, the sequence limit, causal or not,
                          the output's decoding, the residual stream's labels, and for every head the RASP
                          expression that wrote it (`WrittenHead`)
Reading and writing needs torch and safetensors only; jax and tracr are needed only to compile (`tracr_bridge`).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from mha_viz.contract import ModelLoadError

FORMAT = "mha-viz compiled model 1"
CONFIG_FILE = "compiled.json"
WEIGHTS_FILE = "weights.safetensors"
PROGRAM_FILE = "program.py"


@dataclass(frozen=True)
class WrittenHead:
    """What a program wrote into one head: the Select that chose its keys and the Aggregate (or SelectorWidth) that
    read through it. `pattern` names the role by the registered measure that reads it ("previous", "duplicate",
    "induction", "offset"), or "" where no measure does; `selects` says in words which keys a query selects."""
    layer: int
    head: int
    expr: str  # the Aggregate's (or SelectorWidth's) label in the program
    kind: str  # "Aggregate" or "SelectorWidth"
    keys: str  # the SOp whose values the keys are compared on
    queries: str  # the SOp whose values the queries are compared on
    predicate: str  # "==", "<", ..., or the source of a custom predicate
    reads: str  # the SOp the head moves (Aggregate), "" for SelectorWidth
    text: str  # the expression as RASP writes it
    selects: str
    pattern: str = ""
    source_line: str = ""  # the program file's line that names it, where the program was given as a file


@dataclass(frozen=True)
class CompiledConfig:
    name: str
    vocab: tuple[str, ...]  # the program's input values, as text, in the encoding's order
    encoding: dict[str, int]  # token -> id, BOS and PAD included
    bos: str
    pad: str
    max_seq_len: int  # tokens after BOS
    causal: bool
    n_layers: int
    n_heads: int
    key_size: int
    mlp_hidden: int
    residual_labels: tuple[str, ...]
    output_label: str
    categorical: bool
    decoding: tuple  # output id -> value (categorical); () for a numerical output
    heads: tuple[WrittenHead, ...] = ()
    program: str = ""  # the program's source, where it was compiled from a file
    format: str = FORMAT
    extra: dict = field(default_factory=dict)

    @property
    def d_model(self) -> int:
        return len(self.residual_labels)

    def written(self, layer: int, head: int) -> WrittenHead | None:
        for w in self.heads:
            if (w.layer, w.head) == (layer, head):
                return w
        return None

    def to_json(self) -> dict:
        out = asdict(self)
        out["heads"] = [asdict(h) for h in self.heads]
        return out

    @staticmethod
    def from_json(data: dict, where: str) -> "CompiledConfig":
        if data.get("format") != FORMAT:
            raise ModelLoadError(f"{where} is not a compiled model of this version (format {data.get('format')!r}, "
                                 f"expected {FORMAT!r}); compile it again with `mha-viz compile`")
        try:
            heads = tuple(WrittenHead(**h) for h in data["heads"])
            fields = {k: v for k, v in data.items() if k != "heads"}
            for key in ("vocab", "residual_labels", "decoding"):
                fields[key] = tuple(fields[key])
            return CompiledConfig(heads=heads, **fields)
        except (KeyError, TypeError) as err:
            raise ModelLoadError(f"{where} is missing or has a malformed field ({err}); compile the program again "
                                 "with `mha-viz compile PROGRAM.py --out FOLDER`") from err


def is_compiled_folder(folder) -> bool:
    """Whether `folder` holds a compiled model; False for anything that is not a folder path (an overlong hub id)."""
    try:
        return (Path(folder) / CONFIG_FILE).is_file()
    except (OSError, ValueError):  # a name too long, or with a NUL, for a path on this system
        return False


def save(folder, config: CompiledConfig, tensors: dict[str, torch.Tensor]) -> Path:
    """Write `tensors` and `config` into `folder` (created); returns the folder."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(_sparse(tensors), str(folder / WEIGHTS_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=1, ensure_ascii=False, sort_keys=True)
                                      + "\n")
    if config.program:
        (folder / PROGRAM_FILE).write_text(config.program)
    return folder


def load(folder) -> tuple[CompiledConfig, dict[str, torch.Tensor]]:
    """Read a folder written by `save`, with an error that says what is missing or broken and how to fix it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg_path, w_path = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    for path in (cfg_path, w_path):
        if not path.is_file():
            raise ModelLoadError(f"{folder} has no {path.name}: a compiled model folder holds {CONFIG_FILE} and "
                                 f"{WEIGHTS_FILE}; write one with `mha-viz compile PROGRAM.py --out {folder}`")
    try:
        data = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"{cfg_path} is not valid JSON ({err}); compile the program again") from err
    config = CompiledConfig.from_json(data, str(cfg_path))
    try:
        tensors = _dense(load_file(str(w_path)))
    except (SafetensorError, OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelLoadError(f"{w_path} could not be read ({err}); compile the program again") from err
    return config, tensors


def _sparse(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
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


def _dense(stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors `_sparse` wrote, dense again."""
    out = {}
    for key in stored:
        if not key.endswith("/shape"):
            continue
        name = key[: -len("/shape")]
        shape = [int(n) for n in stored[key].tolist()]
        flat = torch.zeros(int(torch.tensor(shape).prod()) if shape else 1)  # (N,)
        flat[stored[f"{name}/index"]] = stored[f"{name}/value"].float()
        out[name] = flat.view(shape)
    return out
