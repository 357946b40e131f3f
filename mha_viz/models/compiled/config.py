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
This module reads and checks compiled.json; `weights` the tensors, and what they are checked against.
Reading and writing needs torch and safetensors only; jax and tracr are needed only to compile (`tracr_bridge`).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import torch

from mha_viz.contract import ModelLoadError
from mha_viz.measures import REGISTRY
from mha_viz.models.compiled import weights
from mha_viz.models.compiled.weights import CONFIG_FILE, WEIGHTS_FILE
from mha_viz.names import head_name

FORMAT = "mha-viz compiled model 1"
PROGRAM_FILE = "program.py"

# Bounds on what a folder may claim, checked before anything is allocated or iterated in proportion to a claim, so
# that a damaged folder is refused in milliseconds and in about its own size of memory (tests/models/compiled/
# test_folder_damage.py). Each is far beyond what Tracr writes:
MAX_CONFIG_BYTES = 16 * 2 ** 20  # compiled.json is kilobytes (three_heads: 7 kB, its program's source included)
MAX_DEPTH = 16  # the format nests 3 deep (heads, a head, its fields); json.loads recurses once per level
# A count fits 19 digits, a decoded output value (a program's arithmetic) may be longer; Python refuses more than
# 4300 digits naming no field, and converts them in quadratic time
MAX_DIGITS = 64


@dataclass(frozen=True)
class WrittenHead:
    """What a program wrote into one head: the Select that chose its keys and the Aggregate (or SelectorWidth) that
    read through it. `pattern` names the role by the registered measure that describes its selection
    (`tracr_bridge.name_role`: "previous", "offset", "first", "duplicate", "induction", ...), or "" where none does;
    `selects` says in words which keys a query selects."""
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
    def from_json(data, where: str, fix: str = "compile the program again with `mha-viz compile PROGRAM.py --out "
                                                 "FOLDER`") -> "CompiledConfig":
        """The config compiled.json holds, every field checked for its type and range, and the fields checked
        against each other (the encoding numbers vocab, BOS and PAD; every written head is in the model); any fault
        is a one-line ModelLoadError naming `where`, the field and `fix`. A field with a default may be absent."""
        return CompiledConfig(**_checked_fields(data, where, fix))


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # JSON's true is not a count


def _is_text(v) -> bool:
    return isinstance(v, str) and v != ""


def _is_texts(v) -> bool:
    return isinstance(v, list) and len(v) > 0 and all(_is_text(t) for t in v)


def _is_value(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


# Each field of compiled.json: what it must be, in words, and the test of it. Tracr gives at least one layer, one
# head, a key size and an MLP size of 1 even to a program that uses none (its `assemble`), so each count is >= 1.
_COUNT = ("a whole number >= 1", lambda v: _is_int(v) and v >= 1)
_TEXT = ("non-empty text", _is_text)
_FLAG = ("true or false", lambda v: isinstance(v, bool))
_TEXTS = ("a non-empty list of distinct non-empty texts", _is_texts)
FIELDS: dict[str, tuple[str, object]] = {
    "name": _TEXT,
    "vocab": _TEXTS,
    "encoding": ("an object of token -> id (whole numbers)",
                 lambda v: isinstance(v, dict) and all(_is_int(i) for i in v.values())),
    "bos": _TEXT,
    "pad": _TEXT,
    "max_seq_len": _COUNT,
    "causal": _FLAG,
    "n_layers": _COUNT,
    "n_heads": _COUNT,
    "key_size": _COUNT,
    "mlp_hidden": _COUNT,
    "residual_labels": _TEXTS,
    "output_label": _TEXT,
    "categorical": _FLAG,
    "decoding": ("a list of output values (text, numbers, true/false or null)",
                 lambda v: isinstance(v, list) and all(_is_value(x) for x in v)),
    "heads": ("a list of objects, one per written head", lambda v: isinstance(v, list)),
    "program": ("text (the program's source, or empty)", lambda v: isinstance(v, str)),
    "format": ("text", lambda v: isinstance(v, str)),
    "extra": ("an object", lambda v: isinstance(v, dict)),
}
_WHERE = ("a whole number >= 0", lambda v: _is_int(v) and v >= 0)
_STR = ("text", lambda v: isinstance(v, str))
HEAD_FIELDS: dict[str, tuple[str, object]] = {
    "layer": _WHERE, "head": _WHERE, "expr": _TEXT,
    "kind": ("'Aggregate' or 'SelectorWidth'", lambda v: v in ("Aggregate", "SelectorWidth")),
    "keys": _STR, "queries": _STR, "predicate": _STR, "reads": _STR, "text": _STR, "selects": _STR,
    # `pattern` is a registered measure's name (mha_viz.measures, below models), or "" where none describes the head
    "pattern": ("a registered measure's name, or empty", lambda v: isinstance(v, str) and (v == "" or v in REGISTRY)),
    "source_line": _STR,
}


def _show(value) -> str:
    """A field's value as the message quotes it: its JSON-ish repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _optional(cls) -> set[str]:
    return {f.name for f in fields(cls) if f.default is not MISSING or f.default_factory is not MISSING}


def _object_fields(data, spec: dict, cls, where: str, fix: str, prefix: str = "") -> dict:
    """`data`'s fields, each present (or one `cls` has a default for), known and of its type; else ModelLoadError."""
    def bad(key: str, problem: str) -> ModelLoadError:
        return ModelLoadError(f"{where}: field '{prefix}{key}' {problem}; {fix}")

    unknown = sorted(set(data) - set(spec), key=str)
    if unknown:
        raise bad(unknown[0], f"is not a field of this format (its fields: {', '.join(spec)})")
    for key, (kind, ok) in spec.items():
        if key not in data:
            if key in _optional(cls):
                continue
            raise bad(key, f"is missing (it must be {kind})")
        if not ok(data[key]):
            raise bad(key, f"must be {kind}, not {_show(data[key])}")
    return dict(data)


def _checked_fields(data, where: str, fix: str) -> dict:
    def bad(key: str, problem: str) -> ModelLoadError:
        return ModelLoadError(f"{where}: field '{key}' {problem}; {fix}")

    if not isinstance(data, dict):
        raise ModelLoadError(f"{where} must hold one JSON object of fields, not {type(data).__name__}; {fix}")
    if data.get("format") != FORMAT:
        raise bad("format", f"is {_show(data.get('format'))}, not {FORMAT!r}: not a compiled model of this version")
    out = _object_fields(data, FIELDS, CompiledConfig, where, fix)
    # Each field against the others: the shapes of the weights follow from these (`weights.expected_shapes`).
    for key in ("vocab", "residual_labels"):
        seen = set()
        for item in out[key]:
            if item in seen:
                raise bad(key, f"lists {item!r} twice; each item must be distinct")
            seen.add(item)
    spaced = next((item for item in out["vocab"] if any(ch.isspace() for ch in item)), None)
    if spaced is not None:  # the page splits what is typed at whitespace (`models.items`)
        raise bad("vocab", f"has {spaced!r}, which holds a space, so it could never be typed (items are typed "
                           "separated by spaces): give the program items without spaces")
    vocab, bos, pad, encoding = out["vocab"], out["bos"], out["pad"], out["encoding"]
    if bos in vocab:
        raise bad("bos", f"is {bos!r}, which is also a vocab item; BOS must be a token of its own")
    if pad in vocab or pad == bos:
        raise bad("pad", f"is {pad!r}, which is also {'bos' if pad == bos else 'a vocab item'}; PAD must be a token "
                         "of its own")
    tokens = [*vocab, bos, pad]
    lacking = [t for t in tokens if t not in encoding]
    if lacking:
        raise bad("encoding", f"has no id for {lacking[0]!r}; it numbers every vocab item, bos and pad")
    others = [t for t in encoding if t not in tokens]
    if others:
        raise bad("encoding", f"numbers {others[0]!r}, which is not in vocab, nor bos or pad")
    if sorted(encoding.values()) != list(range(len(encoding))):
        raise bad("encoding", f"must number its {len(encoding)} tokens 0 to {len(encoding) - 1}, each once, not "
                              f"{_show(sorted(encoding.values()))}")
    if out["categorical"] and not out["decoding"]:
        raise bad("decoding", "is empty, but categorical is true: a categorical output lists its values")
    if not out["categorical"] and out["decoding"]:
        raise bad("decoding", f"lists {len(out['decoding'])} values, but categorical is false: a numerical output "
                              "decodes none")
    heads, placed = [], set()
    for i, h in enumerate(out.get("heads", [])):
        if not isinstance(h, dict):
            raise bad(f"heads[{i}]", f"must be an object with the fields {', '.join(HEAD_FIELDS)}, not {_show(h)}")
        h = _object_fields(h, HEAD_FIELDS, WrittenHead, where, fix, prefix=f"heads[{i}].")
        if h["layer"] >= out["n_layers"]:
            raise bad(f"heads[{i}].layer", f"is {h['layer']}, but n_layers is {out['n_layers']}")
        if h["head"] >= out["n_heads"]:
            raise bad(f"heads[{i}].head", f"is {h['head']}, but n_heads is {out['n_heads']}")
        if (h["layer"], h["head"]) in placed:
            raise bad(f"heads[{i}]", f"writes {head_name((h['layer'], h['head']))} a second time")
        placed.add((h["layer"], h["head"]))
        heads.append(WrittenHead(**h))
    out["heads"] = tuple(heads)
    for key in ("vocab", "residual_labels", "decoding"):
        out[key] = tuple(out[key])
    return out


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
    save_file(weights.sparse(tensors), str(folder / WEIGHTS_FILE))
    (folder / CONFIG_FILE).write_text(json.dumps(config.to_json(), indent=1, ensure_ascii=False, sort_keys=True)
                                      + "\n")
    if config.program:
        (folder / PROGRAM_FILE).write_text(config.program)
    return folder


class _Huge:
    """A JSON whole number of more than MAX_DIGITS digits, kept as its digit count (never converted: that is
    quadratic in its length, and Python refuses more than 4300 digits with a message naming no field)."""

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"a {self.digits}-digit number"


def _whole(text: str):
    digits = len(text.lstrip("-"))
    return int(text) if digits <= MAX_DIGITS else _Huge(digits)


def _too_deep(text: str) -> str | None:
    """Where JSON `text` nests lists and objects more than MAX_DEPTH deep, before json.loads recurses into it: the
    top-level field it happens in ("" for the document itself), or None. Strings are skipped whole, so a bracket
    inside one does not count; in valid JSON the last string at depth 1 before a bracket is that value's key."""
    depth, key = 0, ""
    for m in re.finditer(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return key
        elif token in "]}":
            depth -= 1
        elif depth == 1:
            key = token[1:-1]
    return None


def _unreadable(value, where: str = "") -> tuple[str, str] | None:
    """The first value in a parsed config (depth bounded by `_too_deep`) that no field of the format may hold, as
    (its field, what it holds): a whole number of more than MAX_DIGITS digits, or NaN or infinity, which JSON does
    not have (Python's json reads and writes them as literals)."""
    if isinstance(value, _Huge):
        return where, f"holds {value!r}; no field of this format needs more than {MAX_DIGITS} digits"
    if isinstance(value, float) and not math.isfinite(value):
        return where, f"holds {'NaN' if math.isnan(value) else 'an infinity'}, which is not a finite number"
    if isinstance(value, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for inner, v in items:
        found = _unreadable(v, inner)
        if found:
            return found
    return None


def read_config(path: Path, fix: str):
    """compiled.json parsed, bounded before it is parsed: its size (MAX_CONFIG_BYTES), its depth (MAX_DEPTH) and
    each number's (MAX_DIGITS, finite); a fault is a one-line ModelLoadError naming the file, the field and `fix`."""
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ModelLoadError(f"{path} is {size:,} bytes, more than the {MAX_CONFIG_BYTES:,} any compiled model's "
                             f"config needs; {fix}")
    try:
        text = path.read_text(encoding="utf-8")
        deep = _too_deep(text)
        if deep is not None:
            what = f"field '{deep}'" if deep else "its JSON"
            raise ModelLoadError(f"{path}: {what} is nested more than {MAX_DEPTH} deep (lists and objects inside "
                                 f"each other); no field of this format nests so deep; {fix}")
        data = json.loads(text, parse_int=_whole)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelLoadError(f"{path} is not valid JSON ({_line(err)}); {fix}") from err
    found = _unreadable(data)
    if found:
        raise ModelLoadError(f"{path}: field '{found[0]}' {found[1]}; {fix}")
    return data


def load(folder) -> tuple[CompiledConfig, dict[str, torch.Tensor]]:
    """Read a folder written by `save`, whole or not at all: every field of compiled.json is checked for its type
    and range (`CompiledConfig.from_json`), and every tensor the config implies must be stored with its shape, and
    no other (`weights.expected_shapes`), each position once, each written head on a head with query and key
    weights. What a file claims is bounded before it is allocated or iterated (`read_config`, `weights.check_layers`,
    `weights.check_size`), so a refusal takes milliseconds and about the files' size of memory. Any fault is one
    ModelLoadError naming the file, the field or tensor, and the fix. Reads only: a failed load leaves the folder and
    every cache as they were."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg_path, w_path = folder / CONFIG_FILE, folder / WEIGHTS_FILE
    fix = recompile_hint(folder)
    for path in (cfg_path, w_path):
        if not path.is_file():
            raise ModelLoadError(f"{folder} has no {path.name}: a compiled model folder holds {CONFIG_FILE} and "
                                 f"{WEIGHTS_FILE}; {fix}")
    config = CompiledConfig.from_json(read_config(cfg_path, fix), str(cfg_path), fix)
    try:
        stored = load_file(str(w_path))  # memory: the file's size
    except (SafetensorError, OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelLoadError(f"{w_path} could not be read ({_line(err)}); {fix}") from err
    # Every claim is checked against what is stored before anything is built from it: the layers present before
    # n_layers' tensors are listed, each shape before it is allocated, all of them against the file's size.
    shapes = weights.stored_shapes(stored, str(w_path), fix)
    weights.check_layers(config, shapes, str(cfg_path), fix)
    weights.check_shapes(config, shapes, str(w_path), fix)
    weights.check_size(shapes, w_path, fix)
    tensors = weights.dense(stored, shapes, str(w_path), fix)
    weights.check_written(config, tensors, str(cfg_path), fix)
    return config, tensors


def recompile_hint(folder: Path) -> str:
    """How to write `folder` again: from the program.py it keeps, where it keeps one."""
    program = folder / PROGRAM_FILE
    if program.is_file():
        return f"compile the program again with `mha-viz compile {program} --out {folder}`"
    return f"compile the program again with `mha-viz compile PROGRAM.py --out {folder}`"


def _line(err: Exception) -> str:
    """An error's text on one line, short: the ModelLoadError that quotes it is one line."""
    return " ".join(str(err).split())[:200]
