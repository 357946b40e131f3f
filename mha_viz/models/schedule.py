"""How one forward call is scheduled: which layers it runs, for which rows and positions. None of it changes a
number: a call that resumes, grows or runs a tail gives what the full forward would (the engine's tests compare
each against the plain run).

    start, prefix   layers 0..start-1 are exactly as in the unedited run, whose block output at start-1 is `prefix`
                    (batch 1): an adapter that can skip (`can_resume`) feeds it to layer `start`; one that cannot
                    runs every layer
    rows, bases     a growing batch (adapters whose `grows` is True): the forward is called with one row of ids and
                    `rows[l]` rows enter layer l (non-decreasing from `start` on). Rows that join at layer l are the
                    unedited run up to there: copies of its input to layer l (`bases[l - 1]`, the unedited run's
                    block outputs; at `start`, the one row the forward brings). Row b's edits apply from the layer
                    it joins, so a row that first edits layer l costs the layers from l on, and every layer runs as
                    one batch of all rows begun
    past            a tail (adapters whose `tails` is True): the ids are positions offset.. of the text only, and
                    `past` holds every layer's keys and values (1, H_kv, offset, dh) of positions 0..offset-1 from
                    the unedited run
    logits_at       only those positions' logits are read
    stop_after      nothing after this layer's head outputs is needed: the forward ends there (`Stopped`)

Also here: the budgets of padded and growing batches, the per-model caches of values derived from texts, and the
recent runs' layers that incremental runs resume from (`EarlierRuns`: a run takes over the layers below the first
one whose edit differs from a kept run of the same tokens, as `start, prefix`).
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

# How big one padded forward of `run_many` (and of the head means) may get. Rows x padded length: matrix products
# of a few hundred rows already run at nearly full speed on this CPU (benchmarks/RESULTS.md, the census); more only
# holds more activations. Attention weights B x L x H x T x T: 2^25 float32 = 128 MB, what bounds memory.
BATCH_TOKENS = 1024
BATCH_ATTENTION = 1 << 25
# Rows x tokens of one growing batch of `run_batch_keep` (the importance and patching maps): larger budgets were
# measured no faster on one thread, and one forward per first-edited layer slower (benchmarks/RESULTS.md).
WAVE_TOKENS = 1024
# On a CUDA device (MHA_VIZ_DEVICE) the attention budget is a share of the memory free there (`cuda_budget`): a
# GPU's memory, not the CPU's, holds a batch's attention. Its rows x tokens budgets are larger, as a GPU needs
# bigger matrix products to be busy; a guess, not measured (no CUDA machine has run benchmarks/device_check.py yet).
CUDA_BATCH_TOKENS = 8192
CUDA_MEMORY_SHARE = 0.25  # of the free memory, for one batch's attention: eager attention holds ~4 arrays of it


@dataclass(frozen=True)
class Budget:
    """How big one batch of the engine may get on a device: rows x padded tokens of a padded batch (`run_many`),
    attention weights B x L x H x T x T it may hold (float32, what bounds memory), and rows x tokens of a growing
    batch (`run_batch_keep`)."""

    tokens: int
    attention: int
    wave_tokens: int


CPU_BUDGET = Budget(BATCH_TOKENS, BATCH_ATTENTION, WAVE_TOKENS)


def cuda_budget(free: int, reserved: int, allocated: int) -> Budget:
    """The budget on a CUDA device from its memory reading in bytes: `free` as torch.cuda.mem_get_info gives it,
    plus what torch's caching allocator has reserved but not handed out (`reserved - allocated`, free to this
    process although the driver counts it as used). A quarter of that for a batch's attention, at 4 bytes a
    float32 weight, and never less than one 128-token head's worth."""
    available = max(free, 0) + max(reserved - allocated, 0)  # bytes this process may still use
    attention = max(int(available * CUDA_MEMORY_SHARE) // 4, 128 * 128)
    return Budget(CUDA_BATCH_TOKENS, attention, CUDA_BATCH_TOKENS)


def budget(device: torch.device | str | None) -> Budget:
    """The batch budget on `device`: `CPU_BUDGET` on the CPU (unchanged), else `cuda_budget` of its reading now."""
    device = torch.device("cpu") if device is None else torch.device(device)
    if device.type != "cuda":
        return CPU_BUDGET
    free, _total = torch.cuda.mem_get_info(device)
    return cuda_budget(free, torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device))


class Stopped(Exception):
    """Raised through a forward by `HeadEdit.__call__` once the layer the call needs has run (`stop_after`)."""


class Schedule:
    """Which layers, rows and positions one call runs (see the module docstring); a part of `HeadEdit`.
    `batch`: the rows the call's keep mask has (None without one), which a growing batch ends at."""

    def __init__(self, start: int = 0, prefix=None, logits_at: list[int] | None = None,
                 stop_after: int | None = None, rows: Sequence[int] | None = None, bases: Sequence | None = None,
                 past: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None, batch: int | None = None):
        if start and prefix is None:
            raise ValueError("start > 0 needs the prefix: the unedited run's block output at layer start - 1")
        if rows is not None and (batch is None or rows[-1] != batch or bases is None
                                 or any(a > b for a, b in zip(rows, rows[1:]))):
            raise ValueError("rows must be non-decreasing up to keep's batch size, with the unedited run's bases")
        self.start, self.prefix, self.logits_at, self.stop_after = start, prefix, logits_at, stop_after
        self.rows, self.bases = (None if rows is None else list(rows)), bases
        self.past = None if past is None else list(past)
        self.offset = 0 if past is None else int(past[0][0].shape[-2])  # positions 0..offset-1 come from `past`

    def stop(self, layer: int) -> None:
        """Ends the forward (raises `Stopped`) once `layer`'s head outputs are all the call needs."""
        if self.stop_after is not None and layer >= self.stop_after:
            raise Stopped

    def grown(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) entering `layer` -> the batch that enters it: with `rows`, the rows that join here appended
        (copies of the unedited run's input to this layer); otherwise x itself."""
        if self.rows is None or layer < self.start:
            return x
        want = self.rows[layer]
        if want == x.shape[0]:
            return x
        base = x[:1] if layer == self.start else _first(self.bases[layer - 1])  # (1, T, D): as if unedited
        return torch.cat([x, base.to(x.dtype).expand(want - x.shape[0], *x.shape[1:])])  # (rows[layer], T, D)

    def skips(self, layer: int) -> bool:
        """Whether block `layer` is left out of this forward (it is as in the unedited run)."""
        return layer < self.start

    def resumed(self, batch: int):
        """The block output to continue from at layer `start`, repeated over the batch (a tensor (B, T, D), or the
        tuple a transformers block returns, its first item repeated)."""
        return _repeat_batch(self.prefix, batch)


def _first(out) -> torch.Tensor:
    """A block's output as its tensor (B, T, D): the block's own return value may be a tuple led by it."""
    return out if isinstance(out, torch.Tensor) else out[0]


def tail(out, start: int):
    """A block's output (a tensor (B, T, D) or a tuple led by one) cut to positions start.."""
    if isinstance(out, torch.Tensor):
        return out[:, start:]  # (B, T - start, D)
    return (out[0][:, start:], *out[1:])


def _repeat_batch(out, batch: int):
    if isinstance(out, torch.Tensor):
        return out.expand(batch, *out.shape[1:]) if out.shape[0] != batch else out  # (B, ...)
    if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        return (_repeat_batch(out[0], batch), *out[1:])
    return out


def padded(encs: list) -> tuple[torch.Tensor, list[int]]:
    """Token ids of several texts (`Encoded`) right-padded with id 0, which no text position sees ->
    (ids (B, T), lengths)."""
    lengths = [len(e.ids) for e in encs]
    ids = torch.zeros(len(encs), max(lengths), dtype=torch.long)  # (B, T)
    for row, enc in enumerate(encs):
        ids[row, : lengths[row]] = torch.tensor(enc.ids)
    return ids, lengths


class PerModelCache:
    """Values derived from a model's weights and some texts (head means per reference set, the unedited run's
    block outputs per text): bounded, locked, and held beside the model (weakly), not on it, so the shared model
    object carries no state and two sessions asking at once compute each value once."""

    def __init__(self, per_model: int = 8):
        self._lock = threading.Lock()
        self._per_model = per_model
        self._by_model: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, model, texts: tuple, compute: Callable[[], object]):
        with self._lock:
            table = self._by_model.setdefault(model, {})
            if texts in table:
                return table[texts]
            value = compute()  # under the lock: one computation per reference set, even with sessions racing
            if len(table) >= self._per_model:
                table.pop(next(iter(table)))
            table[texts] = value
            return value


# -- incremental runs: a later run of the same text takes over the layers an earlier one computed the same way ------
# The share of the run memory budget (MHA_VIZ_RUN_CACHE_MB) that the layers kept for incremental runs may hold, over
# every model: 512 MB of the default 2048, room for one SmolLM2 run of 512 tokens (318 MB, see `EarlierRuns`) and
# the upper layers of a few toggles made from it.
EARLIER_SHARE = 0.25
EARLIER_PER_MODEL = 4  # runs kept per model: the last few texts or head sets the sessions asked for


@dataclass(frozen=True, eq=False)  # compared by identity: runs share the objects of the layers they took over
class KeptLayer:
    """One layer of a run, as a later run of the same text may take it over: what was done to its heads (`step`,
    see `layer_steps`), its block's output (what the next layer starts from) and its attention weights."""

    step: tuple  # (keep (H,), replacement (n_off, T or 1, dh or 1)): compared with `same_step`
    state: object  # the block's output (1, T, D) on the model's device, or the tuple the block returned
    pattern: torch.Tensor  # (H, Q, K) float32 on the CPU
    nbytes: int


def layer_steps(keep: torch.Tensor | None, replace: torch.Tensor | None, n_layers: int, n_heads: int) -> list:
    """What an edit (keep (1, L, H) or None, replace (1, L, H, T or 1, dh) or None) does in each layer, beyond the
    layer's input: [(keep (H,), the replaced heads' values (n_off, T or 1, dh or 1))] per layer. Two requests whose
    steps agree in every layer below l compute the same layers below l, whatever asked for them (zero, mean or
    resample ablation, the reference texts, a patching source): a step holds the values themselves. Zero ablation's
    values are zeros (n_off, 1, 1), the same as a replacement tensor's rows that no head fills."""
    steps = []
    for layer in range(n_layers):
        row = torch.ones(n_heads) if keep is None else keep[0, layer].detach().float().cpu()  # (H,)
        off = (row < 1).nonzero().flatten()  # (n_off,)
        values = torch.zeros(len(off), 1, 1)  # (n_off, 1, 1): zero, unless replaced
        if replace is not None and len(off):
            values = replace[0, layer, off].detach().float().cpu()  # (n_off, T or 1, dh)
        steps.append((row, values))
    return steps


def same_step(a: tuple, b: tuple) -> bool:
    """Whether two layers' steps (`layer_steps`) do the same to the layer: the same keep row and, for the heads it
    replaces, equal values (one vector for every position equals the same vector repeated per position)."""
    (keep_a, values_a), (keep_b, values_b) = a, b
    if not torch.equal(keep_a, keep_b):
        return False
    try:
        va, vb = torch.broadcast_tensors(values_a, values_b)  # (n_off, T, dh) both
    except RuntimeError:  # a different width or number of positions: not the same replacement
        return False
    return torch.equal(va, vb)


def _bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(_bytes(v) for v in value)
    return 0


class EarlierRuns:
    """The layers of a few recent runs per model, for incremental runs: a run of the same token ids whose edits agree
    with a kept run's in layers 0..l-1 takes those layers' block outputs and attention weights over and computes
    layers l.. only (`resume`). Switching a head off in the last layer then costs one layer, not the whole model.

    Kept beside the model (weakly), not on it: the model is shared by every session, and each run finds what any
    session left. Each kept run is its token ids and one `KeptLayer` per layer; a run resumed from another shares
    that run's lower `KeptLayer` objects, so it costs only the layers it computed. Bounded: at most
    `EARLIER_PER_MODEL` runs per model, and at most `EARLIER_SHARE` of the run memory budget over every model
    (`budget_bytes`, counted once per shared layer; least recently used first out). A run bigger than that alone
    is not kept.

    Size, SmolLM2 (30 layers, d_model 576, 9 heads) at 512 tokens, float32: the block outputs 30 x 512 x 576 x 4 B
    = 35.4 MB, the attention weights 30 x 9 x 512 x 512 x 4 B = 283.1 MB; 318.5 MB for a run kept whole (plus the
    values of patched heads, at most 35.4 MB with every head patched). A toggle resumed at layer l adds
    (30 - l) / 30 of that. At 128 tokens: 8.8 + 17.7 = 26.5 MB."""

    def __init__(self, per_model: int = EARLIER_PER_MODEL, budget_bytes: Callable[[], int] | None = None):
        self._lock = threading.Lock()
        self._per_model = per_model
        self._budget = budget_bytes or _earlier_budget
        self._runs: "OrderedDict[int, tuple]" = OrderedDict()  # serial -> (weakref to model, ids, layers)
        self._serial = 0

    def resume(self, model, ids: tuple, steps: list) -> list[KeptLayer]:
        """The kept layers 0..l-1 a run of `ids` with these `steps` can take over, for the largest such l (the
        run of `ids` that agrees longest; [] when none does). The run found becomes the most recently used."""
        with self._lock:
            best, found = [], None
            for serial, (ref, kept_ids, layers) in self._runs.items():
                if ref() is not model or kept_ids != ids:
                    continue
                n = 0
                while n < len(layers) and n < len(steps) and same_step(layers[n].step, steps[n]):
                    n += 1
                if n > len(best):
                    best, found = layers[:n], serial
            if found is not None:
                self._runs.move_to_end(found)
            return list(best)

    def keep(self, model, ids: tuple, layers: list[KeptLayer]) -> None:
        """Keep a run's layers (those taken over from an earlier run among them), dropping least recently used
        runs until this model has at most `per_model` and every model's layers fit the budget."""
        room = self._budget()
        with self._lock:
            for serial in [s for s, (ref, kept_ids, kept) in self._runs.items()
                           if ref() is None or (ref() is model and kept_ids == ids and
                                                all(a is b for a, b in zip(kept, layers)))]:
                del self._runs[serial]  # a model that is gone, or the same run kept before (now again, newest)
            self._serial += 1
            self._runs[self._serial] = (weakref.ref(model), ids, tuple(layers))
            while self._runs:
                mine = [s for s, (ref, _, _) in self._runs.items() if ref() is model]
                if len(mine) > self._per_model:
                    del self._runs[mine[0]]
                elif self._held() > room:
                    self._runs.popitem(last=False)
                else:
                    break

    def _held(self) -> int:
        seen: dict[int, int] = {}
        for _, _, layers in self._runs.values():
            for layer in layers:
                seen[id(layer)] = layer.nbytes
        return sum(seen.values())

    def held_bytes(self) -> int:
        """The bytes every kept layer holds (a layer shared by several runs counted once)."""
        with self._lock:
            return self._held()

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()


def kept_layer(step: tuple, state, weights: torch.Tensor) -> KeptLayer:
    """A layer of the run just made: its step, its block's output as returned, weights (1, H, Q, K) as attention
    computed them (any dtype, any device) -> one `KeptLayer`, its weights float32 on the CPU (H, Q, K)."""
    pattern = weights[0].detach().float().cpu()  # (H, Q, K)
    return KeptLayer(step=step, state=state, pattern=pattern,
                     nbytes=_bytes(state) + _bytes(pattern) + _bytes(step))


def _earlier_budget() -> int:
    from mha_viz.settings import settings  # read once the first run is kept, not at import

    return int(settings().run_cache_mb * 2**20 * EARLIER_SHARE)
