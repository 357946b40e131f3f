"""The intervention engine: everything a model does with its heads, written once on top of an adapter's forward.

A head's *output* is its slice of the output projection's input: the context vector `weights @ v`, before W_O
mixes the heads. Every intervention mha-viz offers is a choice per head between keeping that output and
replacing it:

    zero ablation   replace with 0
    mean ablation   replace with the head's mean output over reference texts (one vector, every position)
    patching        replace with the head's output in a run on another text (one vector per position)

An adapter (tiny/, bert/, hf/) derives from `EditableModel` and implements only what is specific to its model:

    encoding(text) -> Encoded                      tokens, ids, what was cut, special and unknown positions
    forward(ids (B, T), edit, attentions, lengths) -> Forward   one forward pass with `edit` applied at every
                                                   layer; `lengths`: rows right-padded to T (see `pads`)
    output_projection(layer) -> (weight (D, H*dh), bias (D,) or None) or None
    final_parts() -> FinalParts or None              the final norm and LM head, for direct effects
    decode, token_id, head_weights, embeddings, examples, ...

`HeadEdit` is built for one forward call and handed to the adapter's forward as an argument (the in-repo stacks)
or through a ContextVar (transformers, see hf/ablation.py); it is never stored on a model, which every session
shares. It is applied at the head-combine step of every layer, so every later layer is recomputed from the
edited outputs, and it records what the call asks for: head outputs (for means, patching sources and direct
effects), a zero "delta" leaf per layer whose gradient is d(metric)/d(head output) (attribution patching), one
layer's queries, keys, values and weights (opening a head), every layer's values (the norm view), the residual
stream entering each layer, and the final norm's input and output.

Axis letters as in mha_viz.contract; dh = one head's width, H_kv = key/value heads (grouped-query attention).
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch

from mha_viz.contract import (
    Ablation,
    AttentionRun,
    Head,
    HeadInside,
    InputError,
    Lexicon,
    Metric,
    Model,
    R,
    Readout,
    UnavailableError,
    _index,
    check_ablate,
    check_text,
    head_keep_mask,
)
from mha_viz.models.heads import out_proj_per_head, repeat_kv


@dataclass(frozen=True)
class Attended:
    """What one layer's attention computed with, for one forward (batch row 0 is the one shown).

    q (B, H, Q, dh) and k (B, H_kv, K, dh) as they enter the dot product (after rotary embeddings where the model
    uses them), v (B, H_kv, K, dh), weights (B, H, Q, K), allowed (Q, K) bool or None (where a query may look),
    scale: what q . k^T is multiplied by; query_scale (Q,) or None: a further factor per query
    (length-scaled attention, `mha_viz.models.attention.length_scale`)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    weights: torch.Tensor
    allowed: torch.Tensor | None
    scale: float
    query_scale: torch.Tensor | None = None


class HeadEdit:
    """keep (B, L, H): 1 keeps a head's output, 0 replaces it with `replace` (B or 1, L, H, T or 1, dh), or with
    0 when `replace` is None. What the call records:

        capture  every layer's (edited) outputs, in `outputs`       grad     a zero leaf per layer, in `deltas`
        inspect  the layers whose q, k, v, weights are kept, in `seen` (layer -> Attended)
        values   every layer's values, in `values`                 inputs   the residual entering each layer
        final    the final norm's (input, output), in `final_io`   states   each block's output, in `states`

        past     (with `tails`) run positions offset.. only, on the unedited run's keys and values before them

    and what it asks the forward to skip: `start` > 0 says layers 0..start-1 are exactly as in the unedited run,
    whose block output at start-1 is `prefix` (batch 1; an adapter that can skip feeds it to layer `start`, one
    that cannot runs every layer: the numbers are the same); `logits_at` (positions) says only those positions'
    logits are read.

    A growing batch (`rows`, for adapters whose `grows` is True): the forward is called with one row of ids, and
    `rows[l]` rows enter layer l (non-decreasing from `start` on). Rows that join at layer l are the unedited run
    up to there: copies of its input to layer l (`bases[l - 1]`, the unedited run's block outputs; at `start`,
    the one row the forward brings). Row b's edits (keep[b], replace[b]) apply from the layer it joins, so a row
    that first edits layer l costs the layers from l on, and every layer runs as one batch of all rows begun.

    Not frozen: the records fill up during the one call this object is made for.
    """

    def __init__(self, keep: torch.Tensor | None = None, replace: torch.Tensor | None = None,
                 capture: bool = False, grad: bool = False, inspect: Iterable[int] = (), values: bool = False,
                 inputs: bool = False, final: bool = False, states: bool = False, start: int = 0,
                 prefix=None, logits_at: list[int] | None = None, stop_after: int | None = None,
                 rows: Sequence[int] | None = None, bases: Sequence | None = None,
                 past: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None):
        if replace is not None and keep is None:
            raise ValueError("replace needs a keep mask saying which heads take it (0 = replace)")
        if keep is not None and keep.ndim != 3:
            raise ValueError(f"keep must be (B, L, H); got {tuple(keep.shape)}")
        if replace is not None and (replace.ndim != 5 or replace.shape[1:3] != keep.shape[1:3]):
            raise ValueError(f"replace must be (B or 1, L, H, T or 1, dh) matching keep {tuple(keep.shape)}; "
                             f"got {tuple(replace.shape)}")
        self.keep, self.replace, self.capture, self.grad = keep, replace, capture, grad
        self.inspect, self.want_values, self.want_inputs, self.want_final = frozenset(inspect), values, inputs, final
        self.want_states, self.start, self.prefix, self.logits_at = states, start, prefix, logits_at
        self.stop_after = stop_after  # nothing after this layer's head outputs is needed: `__call__` ends the forward
        if start and prefix is None:
            raise ValueError("start > 0 needs the prefix: the unedited run's block output at layer start - 1")
        if rows is not None and (keep is None or rows[-1] != keep.shape[0] or bases is None
                                 or any(a > b for a, b in zip(rows, rows[1:]))):
            raise ValueError("rows must be non-decreasing up to keep's batch size, with the unedited run's bases")
        self.rows, self.bases = (None if rows is None else list(rows)), bases
        # A tail (adapters whose `tails` is True): the ids are positions offset.. of the text only, and `past` holds
        # every layer's keys and values (1, H_kv, offset, dh) of positions 0..offset-1 from the unedited run.
        self.past = None if past is None else list(past)
        self.offset = 0 if past is None else int(past[0][0].shape[-2])
        self.states: dict[int, object] = {}  # layer -> that block's output, as the block returned it
        self.outputs: list[torch.Tensor] = []  # per layer (B, H, T, dh)
        self.deltas: list[torch.Tensor] = []  # per layer (B, H, T, dh), leaves with requires_grad
        self.seen: dict[int, Attended] = {}
        self.values: dict[int, torch.Tensor] = {}  # layer -> (B, H_kv, K, dh)
        self.inputs: dict[int, torch.Tensor] = {}  # layer -> (B, T, D)
        self.final_io: tuple[torch.Tensor, torch.Tensor] | None = None  # (B, T, D) in, (B, T, D) out
        self.final_out: torch.Tensor | None = None  # (B, T, D) the final norm's output

    @classmethod
    def keeping(cls, head_keep: torch.Tensor) -> "HeadEdit":
        """The edit that only switches heads off: head_keep (B, L, H), 1 = on, 0 = output set to 0."""
        return cls(keep=head_keep)

    def __call__(self, layer: int, z: torch.Tensor) -> torch.Tensor:
        """z (B, H, T, dh): one layer's head outputs -> the outputs the output projection should see."""
        if self.keep is not None:
            b = z.shape[0]  # all of keep's rows, or those begun by this layer of a growing batch
            keep = self.keep[:b, layer].to(device=z.device, dtype=z.dtype)[:, :, None, None]  # (B, H, 1, 1)
            z = z * keep  # (B, H, T, dh)
            if self.replace is not None:
                replace = self.replace[:b, layer].to(device=z.device, dtype=z.dtype)  # (B or 1, H, T or 1, dh)
                if self.offset and replace.shape[2] > 1:
                    replace = replace[:, :, self.offset:]  # (B or 1, H, T - offset, dh): the tail's positions
                z = z + (1.0 - keep) * replace  # (B, H, T, dh)
        if self.grad:
            delta = torch.zeros_like(z, requires_grad=True)  # (B, H, T, dh)
            self.deltas.append(delta)
            z = z + delta  # (B, H, T, dh): same values, and now a gradient with respect to this layer's outputs
        if self.capture:
            self.outputs.append(z)
        if self.stop_after is not None and layer >= self.stop_after:
            raise Stopped  # this layer's head outputs were all the call needed: skip its output projection onwards
        return z

    def wants(self, layer: int) -> bool:
        """Whether `attended` keeps anything of this layer (so an adapter can skip converting a mask)."""
        return layer in self.inspect or self.want_values

    def attended(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, weights: torch.Tensor,
                 allowed: torch.Tensor | Callable[[], torch.Tensor | None] | None, scale: float,
                 query_scale: torch.Tensor | None = None) -> None:
        """Called by every layer's attention with what it computed (see `Attended`); keeps what was asked.
        `allowed` may be a function, called only when this layer is inspected."""
        if self.want_values:
            self.values[layer] = v
        if layer in self.inspect:
            if callable(allowed):
                allowed = allowed()
            self.seen[layer] = Attended(q=q, k=k, v=v, weights=weights, allowed=allowed, scale=float(scale),
                                        query_scale=query_scale)

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

    def entering(self, layer: int, x: torch.Tensor) -> None:
        """x (B, T, D): the residual stream entering `layer` (the block's input)."""
        if self.want_inputs:
            self.inputs[layer] = x

    def skips(self, layer: int) -> bool:
        """Whether block `layer` is left out of this forward (it is as in the unedited run)."""
        return layer < self.start

    def resumed(self, batch: int):
        """The block output to continue from at layer `start`, repeated over the batch (a tensor (B, T, D), or the
        tuple a transformers block returns, its first item repeated)."""
        return _repeat_batch(self.prefix, batch)

    def block_done(self, layer: int, out) -> None:
        """A block's output (B, T, D), or the block's own return value, for a later run to resume from."""
        if self.want_states:
            self.states[layer] = out

    def finished(self, residual: torch.Tensor, normed: torch.Tensor) -> None:
        """The final norm's input (B, T, D) and output (B, T, D), for direct effects; the output is kept in
        `final_out` in any case (an adapter may read its final hidden states there)."""
        self.final_out = normed
        if self.want_final:
            self.final_io = (residual, normed)

    def stacked(self) -> torch.Tensor:
        """The captured outputs of batch row 0 -> (L, H, T, dh), float32 on the CPU."""
        return torch.stack([z[0] for z in self.outputs]).detach().float().cpu()  # (L, H, T, dh)


# How big one padded forward of `run_many` (and of the head means) may get. Rows x padded length: matrix products
# of a few hundred rows already run at nearly full speed on this CPU (benchmarks/RESULTS.md, the census); more only
# holds more activations. Attention weights B x L x H x T x T: 2^25 float32 = 128 MB, what bounds memory.
BATCH_TOKENS = 1024
BATCH_ATTENTION = 1 << 25
# Rows x tokens of one growing batch of `run_batch_keep` (the importance and patching maps). Measured, one thread,
# CPU s of head importance by this budget: SmolLM2 at 18 tokens 10.0 (1024), 10.4 (2048), 11.2 (4096), 12.0 (8192),
# 15.8 one forward per first-edited layer; MiniLM at 118 tokens 2.01, 2.02, 2.07, 2.33 and 2.27 (RESULTS.md).
WAVE_TOKENS = 1024


def _padded(encs: list[Encoded]) -> tuple[torch.Tensor, list[int]]:
    """Token ids of several texts right-padded (with id 0, which no text position sees) -> (ids (B, T), lengths)."""
    lengths = [len(e.ids) for e in encs]
    ids = torch.zeros(len(encs), max(lengths), dtype=torch.long)  # (B, T)
    for row, enc in enumerate(encs):
        ids[row, : lengths[row]] = torch.tensor(enc.ids)
    return ids, lengths


class Stopped(Exception):
    """Raised through a forward by `HeadEdit.block_done` once the block the call needs has run."""


def _first(out) -> torch.Tensor:
    """A block's output as its tensor (B, T, D): the block's own return value may be a tuple led by it."""
    return out if isinstance(out, torch.Tensor) else out[0]


def _tail(out, start: int):
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


@dataclass(frozen=True)
class Encoded:
    """One text as the model's tokenizer makes it (after truncation to `max_tokens`)."""

    ids: list[int]
    labels: list[str]  # one display label per position
    dropped: int  # tokens cut off the end
    special: tuple[int, ...]  # positions of tokens the tokenizer added ([CLS], [SEP], <bos>, ...)
    unknown: tuple[int, ...]  # positions of words mapped to the unknown token


@dataclass(frozen=True)
class Forward:
    hidden: torch.Tensor  # (B, T, D) final hidden states (after the final norm where the model has one)
    logits: torch.Tensor | None  # (B, T, V)
    attentions: torch.Tensor | None  # (B, L, H, Q, K), when asked for


@dataclass(frozen=True)
class FinalParts:
    """The final norm (its gain, bias and whether it centres: LayerNorm yes, RMSNorm no) and the LM head."""

    gain: torch.Tensor  # (D,)
    bias: torch.Tensor | None  # (D,)
    centered: bool
    unembed: torch.Tensor  # (V, D)
    unembed_bias: torch.Tensor | None  # (V,)


class _PerModelCache:
    """Values derived from a model's weights and some texts (head means per reference set, the unedited run's
    block outputs per text): bounded, locked, and held beside the model (weakly), not on it, so the shared model
    object carries no state and two sessions asking at once compute each value once."""

    def __init__(self, per_model: int = 8):
        self._lock = threading.Lock()
        self._per_model = per_model
        self._by_model: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self, model, texts: tuple[str, ...], compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        with self._lock:
            table = self._by_model.setdefault(model, {})
            if texts in table:
                return table[texts]
            value = compute()  # under the lock: one computation per reference set, even with sessions racing
            if len(table) >= self._per_model:
                table.pop(next(iter(table)))
            table[texts] = value
            return value


_MEANS = _PerModelCache()
_STATES = _PerModelCache(per_model=4)  # a few texts' block outputs: L x T x D floats each (8 MB for SmolLM2 at 120)
_OUTPUTS = _PerModelCache(per_model=4)  # a few texts' head outputs: L x H x T x dh floats each (8 MB likewise)
_PAST = _PerModelCache(per_model=4)  # a few prefixes' keys and values per layer (3 MB for SmolLM2 at 120)


class EditableModel(Model):
    """The engine: `run`, `run_batch_keep`, `inside_layer`, `norm_inputs`, `head_outputs`, `head_gradients`,
    `head_means` and `readout`, each written once on the adapter's `encoding` and `forward`. Subclasses are
    read-only after construction, so one instance serves every session."""

    # -- what an adapter implements --------------------------------------------------------------------------
    def encoding(self, text: str) -> Encoded:
        """Valid, non-empty `text` as tokens (see `Encoded`)."""
        raise NotImplementedError

    def forward(self, ids: torch.Tensor, edit: HeadEdit, attentions: bool = False,
                lengths: Sequence[int] | None = None) -> Forward:
        """ids (B, T) -> one forward pass with `edit` applied at every layer's head-combine step (see `HeadEdit`
        for what the adapter must report to it). Gradients follow torch's mode: the engine sets it.

        lengths (B,): row b holds a text of lengths[b] tokens followed by padding (only asked of adapters whose
        `pads` is True). No position of a text may see its padding, and positions keep their numbers, so a
        row's first lengths[b] positions come out as that text run alone (to float tolerance); what the padded
        positions hold is undefined."""
        raise NotImplementedError

    def key_values(self, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """ids (1, P) -> every layer's keys and values (1, H_kv, P, dh) in the unedited run, as its attention
        keeps them (after rotary embeddings): what a tail (`edit.past`) continues from. Only where `tails`."""
        raise NotImplementedError

    def output_projection(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """The linear map combining layer `layer`'s heads: (weight (D, H * dh) as nn.Linear stores it, bias (D,)
        or None), float32 on the CPU; None when it cannot be identified."""
        return None

    def final_parts(self) -> FinalParts | None:
        """The final norm and LM head (see `FinalParts`); None for encoders or when they cannot be identified."""
        return None

    # Whether `forward` honours `edit.start` (resumes from the unedited run's state instead of recomputing the
    # layers before it) and records `edit.states`. An adapter that does not still gives the same numbers.
    can_resume: bool = False
    # Whether `forward` honours `edit.rows` (a growing batch: rows join at the layer they first edit, see HeadEdit).
    # Without it `run_batch_keep` runs one forward per first-edited layer: the same numbers, in smaller batches.
    grows: bool = False
    # Whether `forward` honours `edit.past` (runs the tail of a text on the unedited run's keys and values before
    # it) and `key_values` gives them: causal models only, where no position sees a later one. Without it
    # `run_batch_keep` recomputes every position: the same numbers.
    tails: bool = False
    # Whether `forward` takes right-padded rows of different texts (`lengths`). Without it `run_many` runs one text
    # per forward: the same numbers, slower.
    pads: bool = False

    # -- built once ----------------------------------------------------------------------------------------
    def _ids(self, text: str) -> tuple[Encoded, torch.Tensor]:
        enc = self.encoding(check_text(text))
        return enc, torch.tensor([enc.ids])  # (1, T)

    def token_count(self, text: str) -> int:
        return len(self.encoding(check_text(text)).ids)

    def _heads(self, heads: Iterable[Head], what: str) -> frozenset[Head]:
        return check_ablate(heads, self.n_layers, self.n_heads, what)

    def _intervention(self, n_tokens: int, ablate: frozenset[Head], ablation: Ablation,
                      reference: Iterable[str] | None, patch: frozenset[Head] = frozenset(),
                      source: str | None = None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """(keep (1, L, H) or None when every head is on, replace (1, L, H, T or 1, dh) or None): what the heads
        in `ablate` and `patch` output instead of their own output."""
        if not ablate and not patch:
            return None, None
        keep = head_keep_mask(ablate | patch, self.n_layers, self.n_heads)[None]  # (1, L, H)
        means = ablation.outputs(self, reference) if ablate else None  # (L, H, dh) or None for zero
        src = None
        if patch:  # `_edit_for` has checked that a source was given
            source = check_text(source)
            n_source = self.token_count(source)
            if n_source != n_tokens:
                raise InputError(
                    f"the source text has {n_source} tokens and the text has {n_tokens}: patching takes each "
                    "head's output position by position, so both need the same number of tokens. Change the "
                    "source so it lines up (e.g. swap one name for another of the same length in tokens)."
                )
            src = self.head_outputs(source)  # (L, H, T, dh)
        if means is None and src is None:
            return keep, None  # zero: keep 0 is enough
        d_head = (src if src is not None else means).shape[-1]
        replace = torch.zeros(1, self.n_layers, self.n_heads, n_tokens if patch else 1, d_head)  # (1, L, H, T|1, dh)
        if means is not None:
            for layer, head in ablate:
                replace[0, layer, head] = means[layer, head]  # (dh,), the same at every position
        for layer, head in patch:
            replace[0, layer, head] = src[layer, head]  # (T, dh)
        return keep, replace

    def _edit_for(self, text: str, ablate: Iterable[Head], ablation, reference, patch: Iterable[Head] = (),
                  source: str | None = None, **record) -> tuple[Encoded, torch.Tensor, HeadEdit,
                                                                 frozenset[Head], frozenset[Head], Ablation]:
        """Validate one intervention request and build its HeadEdit (with what `record` asks to be recorded)."""
        text = check_text(text)
        ablate, patch = self._heads(ablate, "ablate"), self._heads(patch, "patch")
        ablation = Ablation.of(ablation)
        if ablate & patch:
            both = ", ".join(f"({l}, {h})" for l, h in sorted(ablate & patch)[:5])
            raise InputError(f"heads {both} are both ablated and patched; a head's output is one or the other")
        if patch and source is None:
            raise InputError("patch needs source=<another text>: the patched heads' outputs come from a run on it")
        enc, ids = self._ids(text)
        keep, replace = self._intervention(len(enc.ids), ablate, ablation, reference, patch, source)
        return enc, ids, HeadEdit(keep, replace, **record), ablate, patch, ablation

    def run(self, text: str, ablate: Iterable[Head] = (), ablation: str = "zero",
            reference: Iterable[str] | None = None, patch: Iterable[Head] = (),
            source: str | None = None) -> AttentionRun:
        enc, ids, edit, ablate, patch, ablation = self._edit_for(text, ablate, ablation, reference, patch, source)
        with torch.no_grad():
            out = self.forward(ids, edit, attentions=True)
        return AttentionRun(
            tokens=enc.labels,
            attentions=out.attentions[0].float().cpu().contiguous(),  # (L, H, Q, K)
            ablated=ablate,
            output=out.hidden[0].float().cpu(),  # (T, D)
            logits=None if out.logits is None else out.logits[0].float().cpu(),  # (T, V)
            token_ids=list(enc.ids),
            truncated=enc.dropped,
            unknown=enc.unknown,
            special=enc.special,
            ablation=ablation,
            patched=patch,
        )

    def run_batch_keep(self, text: str, keep: torch.Tensor, replace: torch.Tensor | None = None,
                       positions: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """See `Model.run_batch_keep`. Two savings that change no number: each row's layers before the first one it
        edits are taken from the unedited run of this text (kept per text), not recomputed (rows that first edit
        the same layer share a forward resumed there; a row that edits nothing is the unedited run's end); and with
        `positions`, only those positions' logits are computed -> logits (B, P, V)."""
        text = check_text(text)
        if not isinstance(keep, torch.Tensor) or keep.ndim != 3 or tuple(keep.shape[1:]) != (self.n_layers,
                                                                                                self.n_heads):
            got = tuple(keep.shape) if isinstance(keep, torch.Tensor) else type(keep).__name__
            raise InputError(f"keep must be (B, {self.n_layers}, {self.n_heads}) with 1 = keep, 0 = switch off; "
                             f"got {got}")
        enc, ids = self._ids(text)
        n = len(enc.ids)
        at = None if positions is None else [_index(p % n if isinstance(p, int) and -n <= p < 0 else p, n,
                                                    "position") for p in positions]
        B, keep = keep.shape[0], keep.float()
        if B == 0:
            raise InputError("keep has no rows: give at least one (L, H) mask")
        edits = (keep < 1).any(dim=2)  # (B, L): the layers each row edits
        first = torch.where(edits.any(1), edits.float().argmax(1), torch.tensor(self.n_layers))  # (B,)
        starts = first.tolist() if self.can_resume else [0] * B
        hidden, logits = [None] * B, [None] * B
        same = self._same_until(enc, ids, keep, replace, at)  # positions 0..same-1 are as in the unedited run
        base_out = prefix_hidden = None
        if same:
            base_out = self._unedited_end(enc, ids, at)
            prefix_hidden = base_out.hidden[0, :same].float().cpu()  # (same, D): every row's first positions
            if same == n:  # no row changes anything (e.g. patched from an identical text): all are the unedited run
                starts = [self.n_layers] * B
        for start, rows, grow in self._waves(starts, n - same, n):
            pick = torch.tensor(rows)
            rep = replace[pick] if replace is not None and replace.shape[0] == B else replace
            if start == self.n_layers and same:
                out = base_out  # the unedited run's end, computed once
            else:
                out = self._wave(enc, ids, keep[pick], rep, start, [starts[b] for b in rows] if grow else None,
                                 at, same)
            for j, b in enumerate(rows):
                j = 0 if out is base_out else j  # one row, shared by every row that edits nothing
                row_hidden = out.hidden[j].float().cpu()  # (T, D), or (T - same, D): the tail
                row_logits = None if out.logits is None else out.logits[j].float().cpu()  # (T or P, V), or the tail
                if same and start < self.n_layers:
                    row_hidden = torch.cat([prefix_hidden, row_hidden])  # (T, D)
                    if at is None and row_logits is not None:
                        row_logits = torch.cat([base_out.logits[0, :same].float().cpu(), row_logits])  # (T, V)
                hidden[b], logits[b] = row_hidden, row_logits
        return torch.stack(hidden), None if logits[0] is None else torch.stack(logits)  # (B, T, D), (B, T|P, V)

    def _wave(self, enc: Encoded, ids: torch.Tensor, keep: torch.Tensor, replace: torch.Tensor | None, start: int,
              joins: list[int] | None, at: list[int] | None, same: int) -> Forward:
        """One forward of `run_batch_keep`: rows `keep` (B, L, H) resumed at `start`; growing (each row joining at
        its layer in `joins`) or not (joins None); with same > 0 only positions same.. run, on the unedited run's
        keys and values before them (the rows' edits change nothing there, and no position sees a later one)."""
        states = self._states(enc, ids) if start or joins is not None else None
        past = None
        if same:
            past = self._past(enc, ids, same)
            states = [_tail(state, same) for state in states] if states is not None else None
            ids = ids[:, same:]  # (1, T - same)
            at = None if at is None else [p - same for p in at]
        prefix = states[start - 1] if start else None
        if joins is not None:  # one row of ids in; rows join at the layer they first edit (HeadEdit.rows)
            joined = [sum(s <= layer for s in joins) for layer in range(self.n_layers)]
            edit = HeadEdit(keep, replace, start=start, prefix=prefix, logits_at=at, rows=joined, bases=states,
                            past=past)
        else:
            edit = HeadEdit(keep, replace, start=start, prefix=prefix, logits_at=at, past=past)
            ids = ids.expand(keep.shape[0], -1)  # (B, T)
        with torch.no_grad():
            return self.forward(ids, edit)

    def _unedited_end(self, enc: Encoded, ids: torch.Tensor, at: list[int] | None) -> Forward:
        """The unedited run's final hidden states (1, T, D) and logits (at `at`), from its kept last block output."""
        states = self._states(enc, ids)
        edit = HeadEdit(torch.ones(1, self.n_layers, self.n_heads), start=self.n_layers, prefix=states[-1],
                        logits_at=at)
        with torch.no_grad():
            return self.forward(ids, edit)

    def _same_until(self, enc: Encoded, ids: torch.Tensor, keep: torch.Tensor, replace: torch.Tensor | None,
                    at: list[int] | None) -> int:
        """The first position where some row's edit changes a head output (what its replaced heads output there
        differs from their own output in the unedited run): 0 unless the adapter `tails`, the edits replace outputs
        position by position (patching) and agree with the unedited run at the start (a source text that differs
        from this one only from some token on). Capped at the first position whose logits are read."""
        if not self.tails or replace is None or replace.shape[3] == 1:
            return 0
        n = ids.shape[1]
        own = _OUTPUTS.get(self, tuple(enc.ids), lambda: self._captured(ids))  # (L, H, T, dh), kept per text
        tol = 1e-6 * (float(own.abs().max()) + 1.0)
        changed = torch.zeros(n, dtype=torch.bool)  # (T,)
        rows = range(replace.shape[0]) if replace.shape[0] == keep.shape[0] else [None]
        for r in rows:
            off = (keep < 1).any(0) if r is None else keep[r] < 1  # (L, H): the heads this row replaces
            if not off.any():
                continue
            rep = replace[0 if r is None else r][off].float().cpu()  # (n_off, T, dh)
            changed |= ((rep - own[off]).abs() > tol).any(dim=-1).any(dim=0)  # (T,)
        same = int(changed.float().argmax()) if changed.any() else n
        if at is not None:
            same = min(same, *at)
        return same

    def _past(self, enc: Encoded, ids: torch.Tensor, same: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The unedited run's keys and values of positions 0..same-1, per layer (kept for a few prefixes)."""
        return _PAST.get(self, tuple(enc.ids[:same]), lambda: self.key_values(ids[:, :same]))

    def single_head_work(self, text: str, source: str | None = None) -> float:
        """See `Model.single_head_work`: a head of layer l recomputes layers l.. (where the adapter resumes), and
        with a source on a model that `tails`, only the positions from the first token where the two texts differ
        (the last position is always read). Growing batches make each unit cheaper on short texts; not counted."""
        L, H = self.n_layers, self.n_heads
        layers = (L + 1) / 2 if self.can_resume else L  # the mean number of layers a head's row runs
        share = self.recomputed_positions(text, source) / self.token_count(text)
        return H * layers * share

    def recomputed_positions(self, text: str, source: str | None = None) -> int:
        """See `Model.recomputed_positions`: with a source on a model that `tails`, the positions from the first
        token where the two texts differ (the last one at least: it is read)."""
        a = self.encoding(check_text(text)).ids
        if source is None or not self.tails:
            return len(a)
        b = self.encoding(check_text(source)).ids
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        return len(a) - min(same, len(a) - 1)

    def wave_rows(self, n_tokens: int, n_keys: int | None = None) -> int:
        """How many rows of `run_batch_keep` recomputing `n_tokens` positions (a tail of a text of `n_keys`) one
        growing batch takes (see `_waves`): what callers chunk a long map by, so each chunk is one batch and
        progress is reported per batch."""
        n_keys = n_tokens if n_keys is None else n_keys
        per_row = max(self.n_heads * n_tokens * n_keys, 1)  # one layer's attention weights, per row
        # Eager attention holds about four arrays of that size at once (scores, masked, softmax, dropout's copy).
        return max(1, min(WAVE_TOKENS // max(n_tokens, 1), BATCH_ATTENTION // (per_row * 4)))

    def _waves(self, starts: list[int], n_tokens: int, n_keys: int) -> list[tuple[int, list[int], bool]]:
        """The forwards `run_batch_keep` makes: (first layer run, the rows in it, whether they grow). Where the
        adapter grows a batch, rows sorted by the layer they first edit go `wave_rows` at a time, each row joining
        at its own first edited layer, so a layer runs as one batch of every row begun (few, big matrix products)
        and no row recomputes a layer the unedited run already has. Otherwise one forward per first-edited layer.
        Rows that edit nothing (start = L) are the unedited run's end, in a forward of their own."""
        n_layers = self.n_layers
        if not (self.grows and self.can_resume):
            return [(s, [b for b in range(len(starts)) if starts[b] == s], False) for s in sorted(set(starts))]
        order = sorted((b for b in range(len(starts)) if starts[b] < n_layers), key=lambda b: (starts[b], b))
        size = self.wave_rows(n_tokens, n_keys)
        waves = [(starts[order[i]], order[i:i + size], True) for i in range(0, len(order), size)]
        rest = [b for b in range(len(starts)) if starts[b] >= n_layers]
        return waves + ([(n_layers, rest, False)] if rest else [])

    def run_many(self, texts: Sequence[str], reduce: Callable[[int, AttentionRun], R], logits: bool = False,
                 progress: Callable[[int], None] | None = None) -> list[R]:
        """See `Model.run_many`. Texts of similar length share a forward, right-padded (`_batches`), with the
        padding masked out by the adapter; each text's run is its rows cut back to its own tokens, handed to
        `reduce`, and dropped. logits=False leaves the LM head out of the forward (no logits at any position)."""
        if not self.pads:
            return super().run_many(texts, reduce, logits, progress)
        texts = [check_text(t) for t in (texts if not isinstance(texts, str) else [texts])]
        encs = [self.encoding(t) for t in texts]
        out: list = [None] * len(texts)
        zero, done = Ablation.of("zero"), 0
        for group in self._batches([len(e.ids) for e in encs]):
            ids, lengths = _padded([encs[i] for i in group])  # (B, T)
            with torch.no_grad():
                fwd = self.forward(ids, HeadEdit(logits_at=None if logits else []), attentions=True,
                                   lengths=lengths)
            for row, i in enumerate(group):
                enc, t = encs[i], lengths[row]
                run = AttentionRun(
                    tokens=enc.labels,
                    attentions=fwd.attentions[row, :, :, :t, :t].float().cpu().clone(),  # (L, H, Q, K), its own copy
                    ablated=frozenset(), output=fwd.hidden[row, :t].float().cpu().clone(),  # (T, D)
                    logits=fwd.logits[row, :t].float().cpu().clone() if logits and fwd.logits is not None else None,
                    token_ids=list(enc.ids), truncated=enc.dropped, unknown=enc.unknown, special=enc.special,
                    ablation=zero)
                out[i] = reduce(i, run)
            del fwd  # this batch's attention goes before the next is computed
            done += len(group)
            if progress is not None:
                progress(done)
        return out

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """The indices of texts of these token counts, grouped for padded forwards: sorted by length (the shortest
        first, so little is padding), each group within `BATCH_TOKENS` rows x padded length and `BATCH_ATTENTION`
        attention weights (B x L x H x T x T); a text over either budget on its own goes alone."""
        per_row = self.n_layers * self.n_heads
        groups: list[list[int]] = []
        for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
            t = lengths[i]  # the longest of its group so far: sorted
            n = len(groups[-1]) + 1 if groups else 0
            if groups and n * t <= BATCH_TOKENS and n * per_row * t * t <= BATCH_ATTENTION:
                groups[-1].append(i)
            else:
                groups.append([i])
        return groups

    def _states(self, enc: Encoded, ids: torch.Tensor) -> list:
        """The unedited run's block outputs on these ids, one per layer (kept for a few texts per model)."""
        def compute():
            edit = HeadEdit(states=True)
            with torch.no_grad():
                self.forward(ids, edit)
            return [edit.states[layer] for layer in range(self.n_layers)]

        return _STATES.get(self, tuple(enc.ids), compute)

    def head_outputs(self, text: str) -> torch.Tensor:
        return self._captured(self._ids(text)[1])  # (L, H, T, dh)

    def _captured(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (1, T) -> every head's output in the unedited run (L, H, T, dh), from one forward."""
        edit = HeadEdit(capture=True)
        with torch.no_grad():
            self.forward(ids, edit)
        return edit.stacked()  # (L, H, T, dh)

    def head_means(self, reference: Iterable[str] | None = None) -> torch.Tensor:
        """Each head's output averaged over the `reference` texts (None: `examples()`), each run with all heads on
        -> (L, H, dh): what mean ablation sets a switched-off head to.

        Which positions: every token but the special ones the tokenizer adds ([CLS], [SEP], <bos>, ...; all of a
        text's positions if it has nothing else). A model's first position is an attention sink whose head outputs
        are outliers (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks"), so including it
        would pull every mean toward it. How texts are weighted: each text's mean first, then the mean of those,
        so a long text counts as much as a short one. Wang et al. 2022 ("Interpretability in the Wild", IOI) mean-
        ablate with a head's mean over a templated distribution of sentences, position by position (the texts are
        aligned); ours is one vector for every position, over sentences of any length, since the page's texts
        are not aligned to the reference texts."""
        if reference is None:
            texts = tuple(text for _, text, _ in self.examples())
            if not texts:
                raise InputError(f"{self.name} has no example sentences to average head outputs over; pass "
                                 "reference=[some texts] for mean ablation")
        else:
            if isinstance(reference, str):
                raise InputError("reference must be a list of texts, not one text: wrap it as [text]")
            texts = tuple(check_text(t) for t in reference)
            if not texts:
                raise InputError("reference is empty: give at least one text to average head outputs over")
        return _MEANS.get(self, texts, lambda: self._mean_outputs(texts))

    def _mean_outputs(self, texts: tuple[str, ...]) -> torch.Tensor:
        encs = [self.encoding(text) for text in texts]
        per_text: list = [None] * len(texts)
        # One padded forward per group of texts where the adapter pads, else one per text; each stops at the last
        # layer's head outputs (nothing after them is needed).
        groups = self._batches([len(e.ids) for e in encs]) if self.pads else [[i] for i in range(len(encs))]
        for group in groups:
            ids, lengths = _padded([encs[i] for i in group])  # (B, T)
            edit = HeadEdit(capture=True, stop_after=self.n_layers - 1)
            with torch.no_grad():
                try:
                    self.forward(ids, edit, **({"lengths": lengths} if self.pads else {}))
                except Stopped:
                    pass
            z = torch.stack(edit.outputs, dim=1).float().cpu()  # (B, L, H, T, dh)
            for row, i in enumerate(group):
                n, special = lengths[row], set(encs[i].special)
                ordinary = [p for p in range(n) if p not in special] or list(range(n))
                per_text[i] = z[row][:, :, ordinary].mean(dim=2)  # (L, H, dh)
        return torch.stack(per_text).mean(dim=0)  # (L, H, dh)

    def head_gradients(self, text: str, metric: Metric, ablate: Iterable[Head] = (), ablation: str = "zero",
                       reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs, d metric / d outputs), both (L, H, T, dh), in the run with `ablate` switched off (their
        outputs are what replaced them). torch.autograd.grad, not backward(): nothing is accumulated in the shared
        model's parameters."""
        _, ids, edit, _, _, _ = self._edit_for(text, ablate, ablation, reference, capture=True, grad=True)
        with torch.enable_grad():
            out = self.forward(ids, edit)
            logits = None if out.logits is None else out.logits[0].float()
            grads = torch.autograd.grad(metric(out.hidden[0].float(), logits), edit.deltas)  # per layer (1,H,T,dh)
        return edit.stacked(), torch.stack([g[0] for g in grads]).float().cpu()  # (L, H, T, dh) twice

    def _w_o(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        proj = self.output_projection(layer)
        if proj is None:
            return None
        weight, bias = proj
        return out_proj_per_head(weight, self.n_heads), bias  # (H, dh, D), (D,) or None

    def inside_layer(self, text: str, layer: int, ablate: Iterable[Head] = (), ablation: str = "zero",
                     reference: Iterable[str] | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up (see `HeadInside`) from one forward with `ablate` applied as `run`
        applies it. q, k, v, the mask and the weights are what the layer's attention computed with (reported to
        the edit by the adapter); the scores are recomputed from them and checked against those weights."""
        layer = _index(layer, self.n_layers, "layer")
        proj = self._w_o(layer)
        if proj is None:
            raise UnavailableError(
                f"{self.info.title}: the linear map that combines the heads of layer {layer} was not found (looked "
                "for o_proj, out_proj, dense, c_proj and a BERT-style output.dense), so a head's contribution "
                "cannot be computed for this architecture."
            )
        enc, ids, edit, ablate, _, _ = self._edit_for(text, ablate, ablation, reference, capture=True,
                                                      inspect={layer}, inputs=True, stop_after=layer)
        with torch.no_grad():
            try:
                self.forward(ids, edit)
            except Stopped:  # the layers after this one change nothing it shows
                pass
        seen = edit.seen.get(layer)
        if seen is None or layer not in edit.inputs:
            raise UnavailableError(f"{self.info.title}: layer {layer}'s attention did not report its queries and "
                                   "keys, so they cannot be shown.")
        q = seen.q[0].float().cpu()  # (H, T, dh)
        k_kv, v_kv = seen.k[0].float().cpu(), seen.v[0].float().cpu()  # (H_kv, T, dh) each
        weights = seen.weights[0].float().cpu()  # (H, Q, K)
        H, T, dh = q.shape
        group = H // k_kv.shape[0]  # query heads per key/value head; 1 without grouped-query attention
        k, v = repeat_kv(k_kv, H), repeat_kv(v_kv, H)  # (H, K, dh), (H, K, dh)
        scores = q @ k.transpose(-2, -1) * seen.scale  # (H, Q, K)
        query_scale = None if seen.query_scale is None else seen.query_scale.float().cpu()  # (Q,) or None
        if query_scale is not None:
            scores = scores * query_scale[:, None]  # (H, Q, K)
        if seen.allowed is not None:
            scores = scores.masked_fill(~seen.allowed.cpu(), float("-inf"))  # (H, Q, K)
        gap = float((torch.softmax(scores, dim=-1) - weights).abs().max())
        if gap > 1e-4:
            raise UnavailableError(
                f"{self.info.title}: softmax(q·kᵀ·scale) differs from this model's attention weights by {gap:.2g}: "
                "its attention adds something to the scores (e.g. ALiBi biases or soft-capping), so showing plain "
                "scores would be wrong."
            )
        w_o, bias = proj  # (H, dh, D), (D,) or None
        ctx = edit.outputs[layer][0].float().cpu()  # (H, T, dh): what the output projection saw, after the edit
        contribution = ctx @ w_o  # (H, T, D)
        resid = edit.inputs[layer][0].float().cpu()  # (T, D)
        return [
            HeadInside(tokens=enc.labels, layer=layer, head=h, q=q[h], k=k[h], v=v[h], scores=scores[h],
                       weights=weights[h], contribution=contribution[h], scale=seen.scale,
                       query_scale=query_scale, bias=bias, resid=resid,
                       kv_head=h // group, ablated=(layer, h) in ablate)
            for h in range(H)
        ]

    def norm_inputs(self, text: str, ablate: Iterable[Head] = (), ablation: str = "zero",
                    reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(values (L, H, K, dh), w_o (L, H, dh, D)) for the norm view (Kobayashi et al. 2020), from the same run
        (same heads off, same meaning of "off") as the weights it is drawn with. A switched-off head's values are
        zero: what it adds (0, or its mean) does not come from the keys. Key/value heads shared by grouped-query
        attention are repeated per query head."""
        w_o = [self._w_o(layer) for layer in range(self.n_layers)]
        if any(w is None for w in w_o):
            return None
        _, ids, edit, ablate, _, _ = self._edit_for(text, ablate, ablation, reference, values=True)
        with torch.no_grad():
            self.forward(ids, edit)
        values = torch.stack([repeat_kv(edit.values[layer][0].float().cpu(), self.n_heads)
                              for layer in range(self.n_layers)])  # (L, H, K, dh)
        keep = head_keep_mask(ablate, self.n_layers, self.n_heads)  # (L, H)
        values = values * keep[:, :, None, None]  # (L, H, K, dh): a switched-off head's keys carry nothing
        return values, torch.stack([w for w, _ in w_o])  # (L, H, K, dh), (L, H, dh, D)

    def readout(self, text: str) -> Readout | None:
        """The run on `text` (all heads on) as parts for direct effects (see `Readout`). None when this model has
        no LM head, no recognised final norm or output projection, or when the frozen-scale norm does not
        reproduce the model's own output (e.g. logits soft-capped), so no number shown rests on a guess."""
        parts = self.final_parts()
        w_o = [self._w_o(layer) for layer in range(self.n_layers)]
        if parts is None or any(w is None for w in w_o):
            return None
        _, ids = self._ids(text)
        edit = HeadEdit(capture=True, final=True)
        with torch.no_grad():
            out = self.forward(ids, edit)
        if edit.final_io is None or out.logits is None:
            return None
        residual, normed = (t[0].detach().float().cpu() for t in edit.final_io)  # (T, D), (T, D)
        gain, bias = parts.gain, parts.bias  # (D,), (D,) or None
        centred = residual - residual.mean(-1, keepdim=True) if parts.centered else residual  # (T, D)
        # The scale the norm divided by, read off its own input and output, so any epsilon convention is honoured.
        shifted = normed - (0 if bias is None else bias)  # (T, D)
        scale = (gain * centred).norm(dim=-1) / shifted.norm(dim=-1).clamp_min(1e-12)  # (T,)
        rebuilt = gain * centred / scale[:, None] + (0 if bias is None else bias)  # (T, D)
        if not torch.allclose(rebuilt, normed, atol=1e-4 * float(normed.abs().max()) + 1e-6):
            return None
        logits = out.logits[0].float().cpu()  # (T, V)
        again = normed @ parts.unembed.T + (0 if parts.unembed_bias is None else parts.unembed_bias)  # (T, V)
        if not torch.allclose(again, logits, atol=1e-3 * float(logits.abs().max()) + 1e-5):
            return None
        return Readout(outputs=edit.stacked(), w_o=torch.stack([w for w, _ in w_o]), residual=residual, scale=scale,
                       centered=parts.centered, gain=gain, bias=bias, unembed=parts.unembed,
                       unembed_bias=parts.unembed_bias, logits=logits)  # w_o (L, H, dh, D)

    def lexicon(self) -> Lexicon:
        """English words from a fixed list, kept where this model's tokenizer reads each as one token both after a
        space and at the start of a text (`models.lexicon.english_lexicon`); an adapter whose model has its own
        vocabulary (the tiny model) answers with that instead. InputError when too few words are single tokens."""
        from mha_viz.models.lexicon import english_lexicon

        return english_lexicon(self)

    def head_weights_from(self, layer: int, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                          b_q, b_k, b_v, rotary: bool):
        """A `HeadWeights` from nn.Linear-layout projections: w_q (H * dh, D), w_k and w_v (H_kv * dh, D), their
        biases (H * dh,) / (H_kv * dh,) or None; the output projection from `output_projection`."""
        from mha_viz.contract import HeadWeights

        layer = _index(layer, self.n_layers, "layer")
        proj = self._w_o(layer)
        if proj is None:
            raise UnavailableError(f"{self.info.title}: layer {layer}'s output projection was not found.")
        H = self.n_heads
        dh = w_q.shape[0] // H
        h_kv = w_k.shape[0] // dh
        group = H // h_kv
        kv_head = tuple(h // group for h in range(H))

        def per_head(w, n):  # (n * dh, D) -> (n, D, dh)
            return w.detach().float().cpu().reshape(n, dh, -1).transpose(1, 2).contiguous()

        def bias_per_head(b, n):  # (n * dh,) -> (n, dh)
            return None if b is None else b.detach().float().cpu().reshape(n, dh)

        idx = torch.tensor(kv_head)
        wk, wv = per_head(w_k, h_kv)[idx], per_head(w_v, h_kv)[idx]  # (H, D, dh) each
        bk, bv = bias_per_head(b_k, h_kv), bias_per_head(b_v, h_kv)
        return HeadWeights(layer=layer, w_q=per_head(w_q, H), w_k=wk, w_v=wv, w_o=proj[0],
                           b_q=bias_per_head(b_q, H), b_k=None if bk is None else bk[idx],
                           b_v=None if bv is None else bv[idx], b_o=proj[1], kv_head=kv_head, rotary=rotary)

