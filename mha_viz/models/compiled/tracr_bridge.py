"""From Tracr to a compiled model folder: the one module that imports tracr, haiku and jax (requirements-compile.txt).

`compile_program` runs Tracr's compiler step by step (Lindner et al. 2023: RASP -> graph -> craft blocks -> weights)
so that it keeps which RASP `Select` became which head; `from_assembled` takes an `AssembledTransformerModel`
someone compiled already (recompiling the program, when given, only to name the heads). Both give a
`CompiledConfig` and the weights as torch tensors in Tracr's layout (`config.py`), for `models.compiled.adapter`,
which runs them with torch alone.

A head's role is read from the program, not from the weights: its selector is evaluated by RASP itself on random
inputs, each selection turned into the attention the compiled head gives it (BOS at position 0, read where nothing
is selected), and every registered measure the census names heads by (`mha_viz.measures`) reads that attention with
its own definition. The head's role is the measure that the selection fills (`name_role`): the previous token, a
fixed offset (with its distance), the earlier occurrences of the query's token, the positions after them, the first
token (BOS), ... or none.
"""
from __future__ import annotations

import inspect
import math
import random
import re
import runpy
from pathlib import Path

import numpy as np
import torch

from mha_viz import measures
from mha_viz.contract import InputError, ModelLoadError
from mha_viz.models.compiled.config import CompiledConfig, WrittenHead

BOS, PAD = "BOS", "compiler_pad"
N_SAMPLES = 40  # random inputs a selector is evaluated on to name its pattern
# The pooled share at which a registered measure describes what a program wrote into a head (the ground truth the
# census's names are checked against): most of the head's attention, as a program's selection puts it.
WRITTEN_AT = 0.9


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
    label = program.label if program is not None else ""  # without: read off the model (`_output_label`)
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
    inputs = samples(vocab, max_seq_len)
    out = []
    for module_name, block in zip(module_names, craft.blocks):
        if isinstance(block, transformers.MLP):
            continue
        layer = int(module_name.split("_")[1].split("/")[0])
        for h, head in enumerate(block.as_multi().heads()):
            expr = made_by.get(id(head))
            if expr is None:
                continue
            out.append(_describe(expr, layer, h, inputs, causal, source, rasp))
    return tuple(out)


def samples(vocab, max_seq_len: int) -> dict[str, list[list]]:
    """The inputs a selector is read on, per census input set (`Measure.census`), of every length from 2 to
    max_seq_len. "random": items drawn with replacement. "repeated" (duplicate, induction): the same, but never one
    item twice in a row, so that items recur at every distance: repeats at one distance only (the census's "m items
    said twice") would make the induction target a fixed offset, m - 1 back; and after a doubled item Tracr's
    induction selector also selects the query itself, a key the registry's induction leaves out. The same
    vocabulary gives the same inputs."""
    vocab = sorted(vocab, key=str)
    rng = random.Random(0)
    lengths = [rng.randint(min(2, max_seq_len), max_seq_len) for _ in range(2 * N_SAMPLES)]
    out = {"random": [[rng.choice(vocab) for _ in range(n)] for n in lengths[:N_SAMPLES]], "repeated": []}
    for n in lengths[N_SAMPLES:]:
        items = [rng.choice(vocab)]
        while len(items) < n:
            items.append(rng.choice([v for v in vocab if v != items[-1]] or vocab))
        out["repeated"].append(items)
    return out


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


def selection_attention(selection, causal: bool, with_bos: bool = False) -> torch.Tensor:
    """A selection [query][key] over the items of one input, as the compiled head attends -> (1, 1, T, T), T = items
    + 1 with BOS at position 0 (as `CompiledModel` runs it). Each query spreads its attention evenly over the keys it
    selects (in a causal model only those at or before it); a query that selects none reads BOS, Tracr's default;
    BOS reads itself. `with_bos`: BOS is one more selected key of every query, as Tracr compiles a SelectorWidth."""
    n = len(selection)
    sel = torch.zeros(n + 1, n + 1)  # (Q, K) over BOS and the items
    if n:
        sel[1:, 1:] = torch.tensor([[float(bool(v)) for v in row] for row in selection])  # (Q-1, K-1)
    if causal:
        sel = sel.tril()
    sel[:, 0] = 1.0 if with_bos else (sel.sum(-1) == 0).float()  # (Q,): nothing selected reads BOS
    return (sel / sel.sum(-1, keepdim=True))[None, None]  # (1, 1, T, T)


def sample_positions(items: list, causal: bool) -> measures.Positions:
    """One sampled input's positions for the registry's measures: BOS at 0, the one added position (as
    `CompiledModel.encoding` marks it); a repeat is the same vocabulary item."""
    ids = {v: i for i, v in enumerate(dict.fromkeys(items))}
    return measures.Positions.of(len(items) + 1, causal, (BOS, *map(str, items)), [-1] + [ids[v] for v in items],
                                 added=(0,))


def role_measures() -> tuple[str, ...]:
    """The registered measures a written head's role may be named by: every one the census reads that is a share of
    attention, high end notable, needing nothing but the tokens (the scores `analysis.written` names heads by)."""
    return tuple(name for name in measures.ONE_INPUT
                 if measures.get(name).census and measures.get(name).is_share
                 and not measures.get(name).lower_is_notable)


def _offset_pooled(read: list[tuple[torch.Tensor, measures.Positions]], causal: bool
                   ) -> tuple[float, float, int]:
    """The registry's fixed offset over all of `read` at once: each offset's share pooled over the inputs by the
    queries that have that key (an input too short for a head's offset says nothing about it, rather than 0), the
    best offset as `measures.best_offsets` takes it (nearest first) -> (share, uniform's share there, offset)."""
    tables = [(measures.offset_table(att, pos)[:, 0, 0],  # (D,)
               measures.offset_table(measures.uniform_pattern(pos.t, causal)[None, None], pos)[:, 0, 0], pos.t)
              for att, pos in read]  # (D,) each: the head's and uniform attention's share at every offset
    found = []
    for i, d in enumerate(measures.offsets(causal)):
        total = base = weight = 0.0
        for head, uniform, t in tables:
            n = max(0, t - 1 - abs(d))  # queries whose key d away exists and is not position 0
            if n:
                total, base, weight = total + float(head[i]) * n, base + float(uniform[i]) * n, weight + n
        if weight:
            found.append((total / weight, -i, base / weight, d))
    if not found:
        return float("nan"), float("nan"), 0
    share, _, base, d = max(found)
    return share, base, d


def name_role(select, inputs: dict[str, list[list]], causal: bool, with_bos: bool = False) -> tuple[str, str]:
    """The registered measure that describes a head, and what the head selects in words; ("", words) where none
    does. `select(items)` -> [query][key] bools: what the head's selector selects on one input; `inputs`: the
    generated inputs per census input set (`samples`).

    Each candidate (`role_measures`) reads, with its own definition, the attention the compiled head gives each
    selection (`selection_attention`) on its own census input set (`samples`), pooled by the queries each input
    averages over (`Measure.support`). It describes the head where the pooled share reaches `WRITTEN_AT`: 1.0 where
    the selection is exactly the measure's keys. Of several, the one furthest above its uniform baseline (a
    previous-token selection fills nearby's window as well, and a BOS-only one the special tokens; equal ones go to
    the earlier registered); a fixed offset of 1 back is the previous token, as the census names it."""
    order = list(measures.REGISTRY)
    read = {kind: [(selection_attention(select(items), causal, with_bos), sample_positions(items, causal))
                   for items in items_of] for kind, items_of in inputs.items()}
    found = []  # (excess over uniform, -registry index, name, share, offset)
    for name in role_measures():
        m = measures.get(name)
        on = read.get(m.census[0]) or read["random"]  # "texts": a program has no natural text; random items
        offset = 0
        if name == "offset":
            share, base, offset = _offset_pooled(on, causal)
        else:
            total = base = weight = 0.0
            for att, pos in on:
                n, value = m.support(pos), float(m(att, pos)[0, 0])
                if n and not math.isnan(value):
                    total, base, weight = total + value * n, base + m.baseline(pos) * n, weight + n
            share, base = (total / weight, base / weight) if weight else (float("nan"), float("nan"))
        if share >= WRITTEN_AT:  # NaN: not measurable on these inputs
            found.append((round(share - base, 9), -order.index(name), name, share, offset))
    if not found:
        return "", "keys no census measure describes"
    _, _, name, share, offset = max(found)
    if name == "offset" and offset == -1 and "previous" in role_measures():
        name, offset = "previous", 0  # a head whose fixed offset is 1 back is the previous-token head
    if name == "offset":
        words = (f"the key {abs(offset)} position{'s' if abs(offset) != 1 else ''} "
                 f"{measures.offset_words(offset).split()[-1]}")
    else:
        words = measures.get(name).target + (f" ({BOS} here)" if name in ("first", "special") else "")
    if share < 1.0 - 1e-6:
        words += f" ({share:.0%} of its attention on them, on generated inputs)"
    return name, words


def _describe(expr, layer: int, head: int, inputs, causal: bool, source: str, rasp) -> WrittenHead:
    sel = expr.selector
    kind = type(expr).__name__
    pred = _predicate(sel.predicate)
    reads = expr.sop.label if kind == "Aggregate" else ""
    text = (f"{expr.label} = {kind}(Select({sel.keys.label}, {sel.queries.label}, {pred})"
            + (f", {reads})" if reads else ")"))
    pattern, words = name_role(lambda items: _selection(sel, items, rasp), inputs, causal,
                               with_bos=kind == "SelectorWidth")
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
    spaced = next((v for v in vocab if any(ch.isspace() for ch in v)), None)
    if spaced is not None:  # the page splits what is typed at whitespace; a saved folder would be refused
        raise InputError(f"the vocabulary item {spaced!r} holds a space: items are typed separated by spaces, so it "
                         "could never be typed; compile the program for a vocabulary without spaces")
    config = CompiledConfig(
        name=name, vocab=vocab, encoding={str(k): int(v) for k, v in enc.encoding_map.items()},
        bos=str(enc.bos_token), pad=str(enc.pad_token), max_seq_len=int(tensors["pos_embed"].shape[0]) - 1,
        causal=bool(cfg.causal), n_layers=int(cfg.num_layers), n_heads=int(cfg.num_heads),
        key_size=int(cfg.key_size), mlp_hidden=int(cfg.mlp_hidden_size),
        residual_labels=tuple(assembled.residual_labels),
        output_label=output_label or _output_label(assembled.residual_labels, matrix), categorical=categorical,
        decoding=tuple(_plain(v) for v in decoding), heads=tuple(heads), program=source)
    return config, tensors


def _output_label(residual_labels, unembed: torch.Tensor) -> str:
    """The output's label where no program gave it: the name of the residual directions the unembedding (D, O) reads.
    Tracr labels a direction "name:value" (or "name", numerical) and names the output's directions after the
    program's output SOp, so this is that SOp's label; "output" where the rows read name more than one."""
    read = unembed.abs().sum(-1) > 0  # (D,): the directions the output is read from
    names = {str(label).split(":", 1)[0] for label, on in zip(residual_labels, read.tolist()) if on}
    return names.pop() if len(names) == 1 else "output"


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
