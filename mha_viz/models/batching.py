"""How many runs are scheduled: the batches behind `run_batch_keep` (the importance and patching maps) and
`run_many` (the census). Each saving here changes no number (the engine's tests compare each against one run per
row): rows resume after the layers they leave unedited, grow into one batch as they begin, run only the tail of a
text that an edit leaves unchanged at its start, and texts of similar length share a padded forward.

`Batching` is a part of `EditableModel` (models/interventions.py); it relies on the adapter's `forward`,
`key_values`, its `can_resume`, `grows`, `tails` and `pads`, and on the engine's public `encode_text` (a text checked
and encoded once) and `head_outputs` (the unedited run's head outputs, kept per text).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from mha_viz.contract import Ablation, AttentionRun, Encoded, EncodedText, InputError, R, check_index
from mha_viz.models.points import Forward, HeadEdit
from mha_viz.models.schedule import PerModelCache, budget, padded, tail

_STATES = PerModelCache(per_model=4)  # a few texts' block outputs: L x T x D floats each (8 MB for SmolLM2 at 120)
_PAST = PerModelCache(per_model=4)  # a few prefixes' keys and values per layer (3 MB for SmolLM2 at 120)


class Batching:
    """`run_batch_keep`, `run_many` and what they are planned with (see the module docstring)."""

    def run_batch_keep(self, text: str, keep: torch.Tensor, replace: torch.Tensor | None = None,
                       positions: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """See `Model.run_batch_keep`. Two savings that change no number: each row's layers before the first one it
        edits are taken from the unedited run of this text (kept per text), not recomputed (rows that first edit
        the same layer share a forward resumed there; a row that edits nothing is the unedited run's end); and with
        `positions`, only those positions' logits are computed -> logits (B, P, V)."""
        text = self.encode_text(text)
        if not isinstance(keep, torch.Tensor) or keep.ndim != 3 or tuple(keep.shape[1:]) != (self.n_layers,
                                                                                                self.n_heads):
            got = tuple(keep.shape) if isinstance(keep, torch.Tensor) else type(keep).__name__
            raise InputError(f"keep must be (B, {self.n_layers}, {self.n_heads}) with 1 = keep, 0 = switch off; "
                             f"got {got}")
        enc, ids = text.encoded, torch.tensor([text.ids])  # (1, T)
        n = len(enc.ids)
        at = None if positions is None else [check_index(p % n if isinstance(p, int) and -n <= p < 0 else p, n,
                                                    "position") for p in positions]
        B, keep = keep.shape[0], keep.float()
        if B == 0:
            raise InputError("keep has no rows: give at least one (L, H) mask")
        edits = (keep < 1).any(dim=2)  # (B, L): the layers each row edits
        first = torch.where(edits.any(1), edits.float().argmax(1), torch.tensor(self.n_layers))  # (B,)
        starts = first.tolist() if self.can_resume else [0] * B
        hidden, logits = [None] * B, [None] * B
        same = self._same_until(text, keep, replace, at)  # positions 0..same-1 are as in the unedited run
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
            states = [tail(state, same) for state in states] if states is not None else None
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

    def _same_until(self, text: EncodedText, keep: torch.Tensor, replace: torch.Tensor | None,
                    at: list[int] | None) -> int:
        """The first position where some row's edit changes a head output (what its replaced heads output there
        differs from their own output in the unedited run): 0 unless the adapter `tails`, the edits replace outputs
        position by position (patching) and agree with the unedited run at the start (a source text that differs
        from this one only from some token on). Capped at the first position whose logits are read."""
        if not self.tails or replace is None or replace.shape[3] == 1:
            return 0
        n = text.n_tokens
        own = self.head_outputs(text)  # (L, H, T, dh), kept per text by the engine
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
        text = self.encode_text(text)
        share = self.recomputed_positions(text, source) / text.n_tokens
        return H * layers * share

    def recomputed_positions(self, text: str, source: str | None = None) -> int:
        """See `Model.recomputed_positions`: with a source on a model that `tails`, the positions from the first
        token where the two texts differ (the last one at least: it is read)."""
        a = self.encode_text(text).ids
        if source is None or not self.tails:
            return len(a)
        b = self.encode_text(source).ids
        same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
        return len(a) - min(same, len(a) - 1)

    def wave_rows(self, n_tokens: int, n_keys: int | None = None) -> int:
        """How many rows of `run_batch_keep` recomputing `n_tokens` positions (a tail of a text of `n_keys`) one
        growing batch takes (see `_waves`): what callers chunk a long map by, so each chunk is one batch and
        progress is reported per batch."""
        n_keys = n_tokens if n_keys is None else n_keys
        per_row = max(self.n_heads * n_tokens * n_keys, 1)  # one layer's attention weights, per row
        room = budget(self.device)  # the CPU's fixed budget, or a share of the GPU memory free now
        # Eager attention holds about four arrays of that size at once (scores, masked, softmax, dropout's copy).
        return max(1, min(room.wave_tokens // max(n_tokens, 1), room.attention // (per_row * 4)))

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
        encs = [self.encode_text(t).encoded for t in (texts if not isinstance(texts, str) else [texts])]
        out: list = [None] * len(encs)
        zero, done = Ablation.of("zero"), 0
        for group in self._batches([len(e.ids) for e in encs]):
            ids, lengths = padded([encs[i] for i in group])  # (B, T)
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
        first, so little is padding), each group within the device's budget (`schedule.budget`: on the CPU
        `BATCH_TOKENS` rows x padded length and `BATCH_ATTENTION` attention weights B x L x H x T x T; on a GPU a
        share of its free memory); a text over either budget on its own goes alone."""
        per_row = self.n_layers * self.n_heads
        room = budget(self.device)
        groups: list[list[int]] = []
        for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], i)):
            t = lengths[i]  # the longest of its group so far: sorted
            n = len(groups[-1]) + 1 if groups else 0
            if groups and n * t <= room.tokens and n * per_row * t * t <= room.attention:
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
