"""From Tracr to a compiled model folder: the one module that imports tracr, haiku and jax (requirements-compile.txt).

`compile_program` runs Tracr's compiler step by step (Lindner et al. 2023: RASP -> graph -> craft blocks -> weights)
so that it keeps which RASP `Select` became which head; `from_assembled` takes an `AssembledTransformerModel`
someone compiled already (recompiling the program, when given, only to name the heads). Both give a
`CompiledConfig` and the weights as torch tensors in Tracr's layout (`config.py`), for `models.compiled.adapter`,
which runs them with torch alone.

A head's role is read from the program, not from the weights: its selector is evaluated by RASP itself on random
inputs, and the role is named only where the selection is, on every input, exactly one of the census's patterns
(the key one position back, another fixed offset, the earlier occurrences of the query's token, the positions after
them), each the name of the registered measure that reads it (`mha_viz.measures`).
"""
from __future__ import annotations

import inspect
import random
import re
import runpy
from pathlib import Path

import numpy as np
import torch

from mha_viz.contract import InputError, ModelLoadError
from mha_viz.models.compiled.config import CompiledConfig, WrittenHead

BOS, PAD = "BOS", "compiler_pad"
N_SAMPLES = 40  # random inputs a selector is evaluated on to name its pattern


def _tracr():
    try:
        from tracr.compiler import (  # noqa: F401
            assemble,
            basis_inference,
            craft_graph_to_model,
            craft_model_to_transformer,
            expr_to_craft_graph,
            nodes,
            rasp_to_graph,
            validating,
        )
        from tracr.craft import bases, transformers  # noqa: F401
        from tracr.rasp import rasp  # noqa: F401
    except ImportError as err:
        raise ModelLoadError("compiling a RASP program needs Tracr: pip install -r requirements-compile.txt "
                             f"(tracr-pypi and jax); a compiled folder loads without it ({err})") from err
    import tracr.compiler as tc
    from tracr.craft import bases, transformers
    from tracr.rasp import rasp
    return tc, bases, transformers, rasp


def compile_program(program, vocab, max_seq_len: int, causal: bool, name: str, source: str = ""
                    ) -> tuple[CompiledConfig, dict[str, torch.Tensor]]:
    """Compile `program` (a RASP SOp) for inputs from `vocab` of at most `max_seq_len` items, BOS first. Raises an
    InputError that names the unsupported expressions where Tracr cannot compile it."""
    tc, bases, _, rasp = _tracr()
    graph, sink, craft = _craft(program, vocab, max_seq_len)
    try:
        assembled = tc.craft_model_to_transformer.craft_model_to_transformer(
            craft_model=craft, graph=graph, sink=sink, max_seq_len=max_seq_len, causal=causal,
            compiler_bos=BOS, compiler_pad=PAD)
    except (NotImplementedError, ValueError, AssertionError) as err:
        raise InputError(f"Tracr could not compile {name}: {err}") from err
    heads = _written_heads(graph, craft, program, vocab, max_seq_len, causal, source)
    return _convert(assembled, name, program.label, heads, source)


def from_assembled(assembled, name: str, program=None, source: str = "") -> tuple[CompiledConfig, dict]:
    """An AssembledTransformerModel (Tracr's `compile_rasp_to_model` result) as a config and torch weights. With
    `program` (the SOp it was compiled from) every head is named from the program; without, no head is."""
    enc = assembled.input_encoder
    if enc is None or not enc.bos_token:
        raise InputError("the model has no input encoder with a BOS token: compile it with compiler_bos set")
    vocab = {v for v in enc.encoding_map if v not in (enc.bos_token, enc.pad_token)}
    max_seq_len = int(np.asarray(assembled.params["pos_embed"]["embeddings"]).shape[0]) - 1
    heads: tuple[WrittenHead, ...] = ()
    label = program.label if program is not None else ""
    if program is not None:
        graph, _, craft = _craft(program, vocab, max_seq_len)
        heads = _written_heads(graph, craft, program, vocab, max_seq_len, bool(assembled.model_config.causal),
                               source)
    return _convert(assembled, name, label, heads, source)


def _craft(program, vocab, max_seq_len: int):
    """Tracr's compiler up to the craft model, keeping the graph (which expression made which block)."""
    tc, bases, _, rasp = _tracr()
    if not isinstance(program, rasp.SOp):
        raise InputError(f"program must be a RASP SOp (e.g. tracr.compiler.lib.make_length()); got "
                         f"{type(program).__name__}")
    if BOS in vocab or PAD in vocab:
        raise InputError(f"the vocabulary may not hold {BOS!r} or {PAD!r}: the compiler adds them")
    bad = tc.validating.static_validate(program)
    if bad:
        raise InputError("Tracr cannot compile these RASP expressions: "
                         + "; ".join(f"{b.expr.label}: {b.reason}" for b in bad))
    try:
        extracted = tc.rasp_to_graph.extract_rasp_graph(program)
        graph, sources, sink = extracted.graph, extracted.sources, extracted.sink
        tc.basis_inference.infer_bases(graph, sink, set(vocab), max_seq_len)
        tc.expr_to_craft_graph.add_craft_components_to_rasp_graph(
            graph, bos_dir=bases.BasisDirection(rasp.tokens.label, BOS), mlp_exactness=100)
        craft = tc.craft_graph_to_model.craft_graph_to_model(graph, sources)
    except (NotImplementedError, ValueError, AssertionError, KeyError, TypeError) as err:
        raise InputError(f"Tracr could not compile the program: {type(err).__name__}: {err}") from err
    return graph, sink, craft


def _heads_of(block, transformers) -> list:
    if isinstance(block, transformers.AttentionHead):
        return [block]
    if isinstance(block, transformers.MultiAttentionHead):
        return list(block.heads())
    return [h for b in getattr(block, "blocks", ()) for h in _heads_of(b, transformers)]


def _written_heads(graph, craft, program, vocab, max_seq_len: int, causal: bool, source: str
                   ) -> tuple[WrittenHead, ...]:
    tc, _, transformers, rasp = _tracr()
    nodes = tc.nodes
    made_by = {}  # id(craft head) -> the expression whose block holds it
    for _, node in graph.nodes(data=True):
        block = node.get(nodes.MODEL_BLOCK)
        if block is not None:
            for head in _heads_of(block, transformers):
                made_by[id(head)] = node[nodes.EXPR]
    _, module_names = tc.assemble._get_model_config_and_module_names(craft)
    samples = _samples(sorted(vocab, key=str), max_seq_len)
    out = []
    for module_name, block in zip(module_names, craft.blocks):
        if isinstance(block, transformers.MLP):
            continue
        layer = int(module_name.split("_")[1].split("/")[0])
        for h, head in enumerate(block.as_multi().heads()):
            expr = made_by.get(id(head))
            if expr is None:
                continue
            out.append(_describe(expr, layer, h, samples, causal, source, rasp))
    return tuple(out)


def _samples(vocab: list, max_seq_len: int) -> list[list]:
    """Random inputs of every length from 2 to max_seq_len, with repeats (small vocabularies repeat anyway)."""
    rng = random.Random(0)
    return [[rng.choice(vocab) for _ in range(rng.randint(min(2, max_seq_len), max_seq_len))]
            for _ in range(N_SAMPLES)]


def _predicate(pred) -> str:
    if hasattr(pred, "value") and isinstance(pred.value, str):
        return pred.value
    try:
        text = " ".join(inspect.getsource(pred).split())
    except (OSError, TypeError):
        return getattr(pred, "__name__", "a custom predicate")
    if "lambda" not in text:
        return getattr(pred, "__name__", "a custom predicate")
    text = text[text.index("lambda"):]
    depth, body = 0, text.index(":") + 1
    for i in range(body, len(text)):  # the lambda ends at the first ',' or ')' outside brackets after its colon
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return text[:i].strip()
            depth -= 1
        elif ch == "," and depth == 0:
            return text[:i].strip()
    return text.strip()


PATTERNS = {  # the census's name for a written selection, and the words for it
    "previous": "the key one position back",
    "duplicate": "the earlier positions holding the query's token",
    "induction": "the positions right after each earlier occurrence of the query's token",
}


def _selection(selector, tokens: list, rasp) -> list[list[bool]]:
    """What the selector selects on one input, [query][key], by RASP's own values of its keys and queries. A None
    value (a shifted SOp's first position) selects nothing, as the compiled head leaves it to BOS."""
    keys, queries = rasp.evaluate(selector.keys, tokens), rasp.evaluate(selector.queries, tokens)

    def hit(k, q) -> bool:
        if k is None or q is None:
            return False
        try:
            return bool(selector.predicate(k, q))
        except (TypeError, ValueError):  # a custom predicate that cannot compare these values selects nothing
            return False

    return [[hit(k, q) for k in keys] for q in queries]


def _pattern(selector, samples, causal: bool, rasp) -> tuple[str, str]:
    """The census pattern a selector is on every sampled input, and its words; ("", words) where none fits."""
    fits = {"previous": True, "duplicate": True, "induction": True}
    offsets: set[int] | None = None
    for tokens in samples:
        sel = _selection(selector, tokens, rasp)  # sel[q][k]
        n = len(tokens)
        for q in range(n):
            keys = {k for k in range(n) if sel[q][k] and (k <= q or not causal)}
            want = {
                "previous": {q - 1} if q >= 1 else set(),
                "duplicate": {k for k in range(q) if tokens[k] == tokens[q]},
                "induction": {k + 1 for k in range(q) if tokens[k] == tokens[q] and (k + 1 <= q or not causal)},
            }
            for name in fits:
                fits[name] = fits[name] and keys == want[name]
            if len(keys) == 1:
                d = q - next(iter(keys))
                offsets = {d} if offsets is None else offsets & {d}
            elif keys:
                offsets = set()
    for name, ok in fits.items():
        if ok:
            return name, PATTERNS[name]
    if offsets and len(offsets) == 1:
        d = next(iter(offsets))
        return "offset", f"the key {abs(d)} position{'s' if abs(d) != 1 else ''} {'back' if d > 0 else 'ahead'}"
    return "", "keys no census measure describes"


def _describe(expr, layer: int, head: int, samples, causal: bool, source: str, rasp) -> WrittenHead:
    sel = expr.selector
    kind = type(expr).__name__
    pred = _predicate(sel.predicate)
    reads = expr.sop.label if kind == "Aggregate" else ""
    text = (f"{expr.label} = {kind}(Select({sel.keys.label}, {sel.queries.label}, {pred})"
            + (f", {reads})" if reads else ")"))
    pattern, words = _pattern(sel, samples, causal, rasp)
    names = {re.sub(r"_\d+$", "", label) for label in (expr.label, sel.label)}  # RASP adds "_<id>" to a name
    line = next((ln.strip() for ln in source.splitlines()
                 if any(f'named("{n}")' in ln or f"named('{n}')" in ln for n in names)), "")
    return WrittenHead(layer, head, expr.label, kind, sel.keys.label, sel.queries.label, pred, reads, text,
                       f"each query selects {words}", pattern, line)


def _convert(assembled, name: str, output_label: str, heads, source: str
             ) -> tuple[CompiledConfig, dict[str, torch.Tensor]]:
    """The assembled model's weights in torch (Tracr's layout) and its config."""
    import haiku as hk
    import jax.numpy as jnp

    params = {k: {p: torch.tensor(np.asarray(v), dtype=torch.float32) for p, v in d.items()}
              for k, d in assembled.params.items()}
    cfg = assembled.model_config
    d_model = len(assembled.residual_labels)

    # Tracr's unembedding is a closure, not a parameter: read its matrix off by unembedding the identity.
    def unembed(x):
        return assembled.get_compiled_model().unembed(x, use_unembed_argmax=False)

    fn = hk.without_apply_rng(hk.transform(unembed))
    eye = jnp.eye(d_model)
    matrix = torch.tensor(np.asarray(fn.apply(fn.init(None, eye), eye)), dtype=torch.float32)
    if matrix.dim() == 1:
        matrix = matrix[:, None]  # (D, 1): a numerical output
    tensors = {"token_embed": params["token_embed"]["embeddings"], "pos_embed": params["pos_embed"]["embeddings"],
               "unembed": matrix}
    for layer in range(cfg.num_layers):
        for half, parts in (("attn", ("query", "key", "value", "linear")), ("mlp", ("linear_1", "linear_2"))):
            for part in parts:
                found = params.get(f"transformer/layer_{layer}/{half}/{part}")
                if found is None:  # a layer Tracr did not fill keeps zeros
                    continue
                for p, t in found.items():
                    tensors[f"layers.{layer}.{half}.{part}.{p}"] = t
    enc, out_enc = assembled.input_encoder, assembled.output_encoder
    categorical = out_enc is not None and hasattr(out_enc, "encoding_map")
    decoding = tuple(sorted(out_enc.encoding_map, key=out_enc.encoding_map.get)) if categorical else ()
    vocab = tuple(str(v) for v in sorted(enc.encoding_map, key=enc.encoding_map.get)
                  if v not in (enc.bos_token, enc.pad_token))
    config = CompiledConfig(
        name=name, vocab=vocab, encoding={str(k): int(v) for k, v in enc.encoding_map.items()},
        bos=str(enc.bos_token), pad=str(enc.pad_token), max_seq_len=int(tensors["pos_embed"].shape[0]) - 1,
        causal=bool(cfg.causal), n_layers=int(cfg.num_layers), n_heads=int(cfg.num_heads),
        key_size=int(cfg.key_size), mlp_hidden=int(cfg.mlp_hidden_size),
        residual_labels=tuple(assembled.residual_labels), output_label=output_label, categorical=categorical,
        decoding=tuple(_plain(v) for v in decoding), heads=tuple(heads), program=source)
    return config, tensors


def _plain(v):
    """An output value as JSON holds it (numpy scalars and None as themselves, anything else as text)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, np.generic):
        return v.item()
    return str(v)


def load_program_file(path) -> dict:
    """Run a program file and return what it defines: `program` (an SOp), `vocab`, `max_seq_len`, `causal` (default
    True) and `name` (default the file's stem), with the file's text as `source`."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path} is not a file: pass a Python file that defines program, vocab and max_seq_len")
    source = path.read_text()
    try:  # the file the user asked to compile, run as `python PROGRAM.py` would run it (never text from the page)
        scope = runpy.run_path(str(path), run_name="mha_viz_program")
    except Exception as err:  # noqa: BLE001  (their program: report whatever it raised)
        raise InputError(f"{path} raised {type(err).__name__}: {err}") from err
    missing = [k for k in ("program", "vocab", "max_seq_len") if k not in scope]
    if missing:
        raise InputError(f"{path} must define {', '.join(missing)} (and may define causal and name)")
    return {"program": scope["program"], "vocab": set(scope["vocab"]), "max_seq_len": int(scope["max_seq_len"]),
            "causal": bool(scope.get("causal", True)), "name": str(scope.get("name", path.stem)), "source": source}


def compile_file(path, out) -> Path:
    """`mha-viz compile PROGRAM.py --out FOLDER`: compile the file's program and save the folder."""
    from mha_viz.models.compiled.config import save

    spec = load_program_file(path)
    config, tensors = compile_program(spec["program"], spec["vocab"], spec["max_seq_len"], spec["causal"],
                                      spec["name"], spec["source"])
    return save(out, config, tensors)
