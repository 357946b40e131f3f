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
import math
import re
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

import torch

from mha_viz.contract import ModelLoadError
from mha_viz.measures import REGISTRY
from mha_viz.names import head_name

FORMAT = "mha-viz compiled model 1"
CONFIG_FILE = "compiled.json"
WEIGHTS_FILE = "weights.safetensors"
PROGRAM_FILE = "program.py"

# Bounds on what a folder may claim, checked before anything is allocated or iterated in proportion to a claim, so
# that a damaged folder is refused in milliseconds and in about its own size of memory (tests/models/compiled/
# test_folder_damage.py). Each is far beyond what Tracr writes:
MAX_CONFIG_BYTES = 16 * 2 ** 20  # compiled.json is kilobytes (three_heads: 7 kB, its program's source included)
MAX_DEPTH = 16  # the format nests 3 deep (heads, a head, its fields); json.loads recurses once per level
MAX_DIGITS = 18  # every whole number of the format fits int64; Python would spend quadratic time on 10^5 digits
# A tensor is stored sparse (12 bytes per nonzero entry), so its dense float32 copy is larger than the file: a
# one-hot (D, D) block is D/3 times larger, an all-zero half-layer (Tracr pads every layer) infinitely. The tensors
# together may be DENSE_PER_BYTE times the weights file, or DENSE_FLOOR_BYTES for a small file. Measured: 1.7 to
# 31 times for the shipped folders, 5 to 172 for five of Tracr's library programs (shuffle_dyck: 172, its MLPs
# 3092 wide), so 4096 leaves a margin of 20 over the widest seen.
DENSE_PER_BYTE = 4096
DENSE_FLOOR_BYTES = 64 * 2 ** 20


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
    # Each field against the others: the shapes of the weights follow from these (`expected_shapes`).
    for key in ("vocab", "residual_labels"):
        seen = set()
        for item in out[key]:
            if item in seen:
                raise bad(key, f"lists {item!r} twice; each item must be distinct")
            seen.add(item)
    spaced = next((item for item in out["vocab"] if any(ch.isspace() for ch in item)), None)
    if spaced is not None:  # the page splits what is typed at whitespace (`models.items`)
        raise bad("vocab", f"has {spaced!r}, which holds a space: items are typed separated by spaces, so it could "
                           f"never be typed; give the program a vocabulary without spaces and {fix}")
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
    save_file(_sparse(tensors), str(folder / WEIGHTS_FILE))
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
    no other (`expected_shapes`), each position once, each written head on a head with query and key weights. What
    a file claims is bounded before it is allocated or iterated (`read_config`, `_check_layers`, `_check_size`), so
    a refusal takes milliseconds and about the files' size of memory. Any fault is one ModelLoadError naming the
    file, the field or tensor, and the fix. Reads only: a failed load leaves the folder and every cache as they
    were."""
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
    shapes = _stored_shapes(stored, str(w_path), fix)
    _check_layers(config, shapes, str(cfg_path), fix)
    _check_shapes(config, shapes, str(w_path), fix)
    _check_size(shapes, w_path, fix)
    tensors = _dense(stored, shapes, str(w_path), fix)
    _check_written(config, tensors, str(cfg_path), fix)
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


def expected_shapes(config: CompiledConfig) -> dict[str, tuple[tuple[int, ...], str]]:
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


def _check_layers(config: CompiledConfig, shapes: dict[str, tuple[int, ...]], where: str, fix: str) -> None:
    """n_layers against the layers stored, before `expected_shapes` lists n_layers' tensors (1,000,000 layers: 35 s
    and 3 GB, for a file of 8 kB). Fewer layers than stored is `_check_shapes`' "not one compiled.json implies"."""
    present = {int(m.group(1)) for name in shapes if (m := re.fullmatch(r"layers\.(\d{1,9})\..*", name))}
    stored = max(present) + 1 if present else 0
    if config.n_layers > stored:
        raise ModelLoadError(f"{where}: field 'n_layers' is {config.n_layers}, but {WEIGHTS_FILE} stores "
                             f"{stored} layer(s) (layers.0 to layers.{stored - 1}): the two files were not "
                             f"written together; {fix}")


def _check_shapes(config: CompiledConfig, shapes: dict[str, tuple[int, ...]], where: str, fix: str) -> None:
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


def _check_size(shapes: dict[str, tuple[int, ...]], path: Path, fix: str) -> None:
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


def _check_written(config: CompiledConfig, tensors: dict[str, torch.Tensor], where: str, fix: str) -> None:
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


def _stored_shapes(stored: dict[str, torch.Tensor], where: str, fix: str) -> dict[str, tuple[int, ...]]:
    """Each tensor `_sparse` wrote -> its shape, read without making it dense; a tensor whose stored parts are
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
            raise ModelLoadError(f"{where}: tensor '{name}' has a malformed shape {_show(shape.tolist())} "
                                 f"({shape.dtype}); {fix}")
        out[name] = tuple(int(n) for n in shape.tolist())
    return out


def _dense(stored: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]], where: str = WEIGHTS_FILE,
           fix: str = "") -> dict[str, torch.Tensor]:
    """The tensors `_sparse` wrote, dense again, each of its checked shape (`_stored_shapes`, then checked against
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
