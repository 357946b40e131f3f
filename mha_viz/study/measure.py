"""One checkpoint measured: loaded, then the census (`mha_viz.head_census`: every registered score per head, its
bootstrap interval, its control, the heads it names) and, where the model gives its weights per head, the circuits'
composition scores and OV copying score (`mha_viz.analysis.circuits`, Elhage et al. 2021).

`measure(checkpoint, config)` is what one Ray task runs (`mha_viz.study.runner`); it never raises for a checkpoint
that does not load or measure: the result carries the one-line reason, so the study goes on.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from mha_viz.analysis.census_run import CensusConfig, census_inputs
from mha_viz.contract import Model, UnavailableError
from mha_viz.study.find import Checkpoint, is_tiny_folder

COPYING = "OV copying"  # the circuits' per-head score, kept beside the census's (no interval, no control)
CONTROL = "destroyed"  # one control for every checkpoint of every run: inputs with the relation destroyed
ERROR_CHARS = 300


@dataclass
class Measured:
    """What one task sends back: columns of the heads table and the composition scores, or the reason it failed."""
    step: int
    run: str
    seconds: float = 0.0
    error: str = ""
    params: int = 0  # the model's parameters
    tokens: int = 0  # the tokens the census's inputs hold (the cost model's second factor)
    heads: dict[str, list] = field(default_factory=dict)  # layer, head, score, value, low, high, control, named
    composition: dict[str, np.ndarray] = field(default_factory=dict)  # mode -> (L, H, L, H) float32, NaN unless l1<l2
    model: str = ""  # the loaded model's own name
    worker: int = 0  # the process that measured it (the benchmark counts the workers used)


def one_line(err: BaseException) -> str:
    """An exception as one line: its type and the first line of its message, at most ERROR_CHARS."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    line = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return line if len(line) <= ERROR_CHARS else line[: ERROR_CHARS - 1] + "…"


def load_checkpoint(checkpoint: Checkpoint) -> Model:
    """The checkpoint as a Model: tiny's step files and tiny-stack folders through `load_tiny`, every other model
    folder through `load_model` (transformers, compiled, learned twins)."""
    from mha_viz.models import load_model
    from mha_viz.models.tiny.adapter import load_tiny

    path = Path(checkpoint.path)
    if checkpoint.layout == "steps":
        return load_tiny(folder=path.parent.parent, step=checkpoint.step)
    if is_tiny_folder(path):
        return load_tiny(folder=path)
    return load_model(str(path))


def parameters(model: Model) -> int:
    """The parameters of the networks a model holds (each counted once)."""
    seen, total = set(), 0
    for value in vars(model).values():
        if isinstance(value, torch.nn.Module):
            for p in value.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    total += p.numel()
    return total


def matmul_parameters(model: Model) -> int:
    """The parameters of the networks' linear layers: the weights every token is multiplied by (embeddings, which
    are looked up, and norms left out). The cost model's first factor (docs/scale.md)."""
    seen, total = set(), 0
    for value in vars(model).values():
        if isinstance(value, torch.nn.Module):
            for m in value.modules():
                if isinstance(m, torch.nn.Linear) and id(m.weight) not in seen:
                    seen.add(id(m.weight))
                    total += m.weight.numel()
    return total


def census_tokens(model: Model, config: CensusConfig, seed: int = 0) -> int:
    """The tokens the census runs through the model: every generated input (one token per word, as the census asks)
    and its destroyed-relation control, the natural texts by their words, and for a causal LM the in-context check's
    repeated inputs once per batch row (all heads on, then each set of heads off under each meaning of "off"). The
    cost model's second factor (docs/scale.md)."""
    from mha_viz.contract.ablation import Ablation
    from mha_viz.models.examples import census_texts

    sets = census_inputs(model, seed, config, census_texts(model))
    generated = sum(len(item.words) for key in ("random", "repeated", "templates", "unrepeated", "shuffled")
                    for item in sets[key])
    tokens = generated + sum(len(t.split()) for t in sets["texts"])
    if model.causal and sets["repeated"]:
        loss = sets["repeated"][: config.n_loss]
        rows = 1 + len(Ablation.kinds()) * (2 + config.n_other_sets)  # top k, previous-token heads, other sets
        tokens += rows * sum(len(item.words) for item in loss)
    return tokens


def measure(checkpoint: Checkpoint, config: dict | None = None, threads: int = 0) -> Measured:
    """Load `checkpoint` and measure it (see the module docstring). `config`: a CensusConfig's fields (None: the
    census's own size for the model); `threads`: torch's threads in this process (0: as Ray set them)."""
    if threads:
        torch.set_num_threads(threads)
    out = Measured(step=checkpoint.step, run=checkpoint.run, worker=os.getpid())
    start = time.perf_counter()
    try:
        measure_model(load_checkpoint(checkpoint), config, out)
    except Exception as err:  # noqa: BLE001 - any failure of one checkpoint is recorded, and the study goes on
        out.error = one_line(err)
        out.heads, out.composition = {}, {}
    out.seconds = time.perf_counter() - start
    return out


def measure_model(model: Model, config: dict | None, out: Measured) -> Measured:
    """A loaded model's census and circuits into `out` (what `measure` does once the checkpoint is loaded)."""
    from mha_viz import head_census
    from mha_viz.analysis.circuits import circuits

    cfg = CensusConfig(**_tuples(config)) if config else CensusConfig.for_model(model)
    census = head_census(model, config=cfg, control=CONTROL)
    out.model, out.params, out.tokens = model.name, parameters(model), census_tokens(model, cfg)
    out.heads = _head_columns(census)
    try:
        c = circuits(model)
        out.composition = {mode: s.numpy().astype(np.float32) for mode, s in c.composition.items()}
        if c.copying is not None:
            _add_rows(out.heads, COPYING, c.copying, None, None, None, [])
    except UnavailableError:
        pass  # a model without weights per head: the census alone
    return out


def _tuples(config: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in config.items()}


def config_fields(config: CensusConfig | None) -> dict | None:
    """A CensusConfig as plain fields (what a task is sent and the study file keeps); None stays None."""
    return None if config is None else {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()}


def _num(x) -> float | None:
    v = float(x)
    return None if math.isnan(v) else v


def _add_rows(cols: dict, score: str, value: torch.Tensor, low, high, control, named: list) -> None:
    """One row per head of `score`; value, low, high, control are (L, H) tensors (or None: no such column)."""
    L, H = value.shape
    named_set = {lh for lh, _ in named}
    for layer in range(L):
        for head in range(H):
            for key, v in (("layer", layer), ("head", head), ("score", score), ("value", _num(value[layer, head])),
                           ("low", None if low is None else _num(low[layer, head])),
                           ("high", None if high is None else _num(high[layer, head])),
                           ("control", None if control is None else _num(control[layer, head])),
                           ("named", (layer, head) in named_set)):
                cols.setdefault(key, []).append(v)


def _head_columns(census) -> dict[str, list]:
    cols: dict[str, list] = {}
    for score in census.names:
        _add_rows(cols, score, census.scores[score], census.low[score], census.high[score],
                  census.control.get(score), census.named(score))
    return cols
