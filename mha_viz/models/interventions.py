"""The intervention engine: everything a model does with its heads, written once on top of an adapter's forward.

A head's *output* is its slice of the output projection's input: the context vector `weights @ v`, before W_O
mixes the heads. Every intervention mha-viz offers is a choice per head between keeping that output and
replacing it (models/edits.py):

    zero ablation      replace with 0
    mean ablation      replace with the head's mean output over reference texts (one vector, every position)
    resample ablation  replace with the head's output on another reference text (one vector per position)
    patching           replace with the head's output in a run on another text (one vector per position)

Each meaning of "off" is a `contract.Ablation` that computes its own replacement. An adapter (tiny/, bert/, hf/)
derives from `EditableModel` and implements only what is specific to its model:

    encoding(text) -> Encoded                      tokens, ids, what was cut, special and unknown positions
    forward(ids (B, T), edit, attentions, lengths) -> Forward   one forward pass that calls the edit's named points
                                                   (models/points.py) at every layer; `lengths`: rows right-padded
    output_projection(layer) -> (weight (D, H*dh), bias (D,) or None) or None
    final_parts() -> FinalParts or None              the final norm and LM head, for direct effects
    decode, token_id, head_weights, embeddings, examples, ...

The engine is split by concern: what a run changes (edits.py), what it records (records.py), how one call is
scheduled (schedule.py) and how many are batched (batching.py); `HeadEdit` (points.py) joins the first three into
the one object a forward call is handed, as an argument (the in-repo stacks) or through a ContextVar
(transformers, hf/ablation.py). It is never stored on a model, which every session shares.

Axis letters as in mha_viz.contract; dh = one head's width, H_kv = key/value heads (grouped-query attention).
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Callable, Iterable, Sequence

import torch

from mha_viz.contract import (
    Ablation,
    AttentionRun,
    Encoded,
    EncodedText,
    Head,
    HeadInside,
    InputError,
    Lexicon,
    Metric,
    Model,
    Readout,
    UnavailableError,
    check_ablate,
    check_index,
    check_text,
    head_keep_mask,
    reference_texts,
)
from mha_viz.contract.head_slices import out_proj_per_head, repeat_kv
from mha_viz.models.batching import Batching
from mha_viz.models.edits import Change, intervention
from mha_viz.models.generation import Generation
from mha_viz.models.points import FinalParts, Forward, HeadEdit
from mha_viz.models.records import Attended, Records
from mha_viz.models.schedule import (
    BATCH_ATTENTION,
    BATCH_TOKENS,
    WAVE_TOKENS,
    EarlierRuns,
    PerModelCache,
    Schedule,
    Stopped,
    kept_layer,
    layer_steps,
    padded,
)

# What an adapter builds on, importable from the engine it derives from.
__all__ = ["Attended", "BATCH_ATTENTION", "BATCH_TOKENS", "Change", "EditableModel", "Encoded", "FinalParts",
           "Forward", "HeadEdit", "PerModelCache", "Records", "Schedule", "Stopped", "WAVE_TOKENS", "reuse_bytes",
           "reuse_clear"]

_MEANS = PerModelCache()
_OUTPUTS = PerModelCache(per_model=4)  # a few texts' head outputs: L x H x T x dh floats each (8 MB for SmolLM2 at 120)
_EARLIER = EarlierRuns()  # recent runs' layers, for incremental runs (see `EditableModel.run`)


def reuse_bytes() -> int:
    """The bytes the layers kept for incremental runs hold now, over every model (`schedule.EarlierRuns`): at most
    `schedule.EARLIER_SHARE` of MHA_VIZ_RUN_CACHE_MB, for the run cache to count beside the runs it keeps."""
    return _EARLIER.held_bytes()


def reuse_clear() -> None:
    """Drop every layer kept for incremental runs: they only save work, so a run that needs their memory comes
    first (the run cache calls this when its own kept runs are gone and a run still does not fit)."""
    _EARLIER.clear()


class EditableModel(Batching, Generation, Model):
    """The engine: `run`, `inside_layer`, `norm_inputs`, `head_outputs`, `head_gradients`, `head_means` and
    `readout` here, `run_batch_keep` and `run_many` in `Batching`, `generate` in `Generation`, each written once on
    the adapter's `encoding` and `forward`. Subclasses are read-only after construction, so one instance serves
    every session."""

    # -- what an adapter implements (abstract: a family that leaves one out cannot be made) -------------------
    @abstractmethod
    def encoding(self, text: str) -> Encoded:
        """Valid, non-empty `text` as tokens (see `Encoded`)."""

    @abstractmethod
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

    @property
    def device(self) -> torch.device:
        """Where this model's forward runs (MHA_VIZ_DEVICE, models/placement.py): the adapter's `_device`, set when
        it loads; the CPU for one that sets none. The engine's batch budgets count this device's memory."""
        return getattr(self, "_device", None) or torch.device("cpu")

    # -- built once ----------------------------------------------------------------------------------------
    def encode_text(self, text: str | EncodedText) -> EncodedText:
        """See `Model.encode_text`: the one place a text is checked (`check_text`) and encoded. Every public method
        takes a str or this value, and each hands the value on, so a run checks its text once."""
        if isinstance(text, EncodedText) and text.model == self.name:
            return text
        text = check_text(text.text if isinstance(text, EncodedText) else text)
        return EncodedText(text=text, encoded=self.encoding(text), model=self.name)

    @staticmethod
    def _ids(text: EncodedText) -> tuple[Encoded, torch.Tensor]:
        return text.encoded, torch.tensor([text.ids])  # (1, T)

    def token_count(self, text: str | EncodedText) -> int:
        return self.encode_text(text).n_tokens

    def _heads(self, heads: Iterable[Head], what: str) -> frozenset[Head]:
        return check_ablate(heads, self.n_layers, self.n_heads, what)

    def _edit_for(self, text: str | EncodedText, ablate: Iterable[Head], ablation, reference,
                  patch: Iterable[Head] = (), source: str | None = None,
                  **record) -> tuple[Encoded, torch.Tensor, HeadEdit, frozenset[Head], frozenset[Head], Ablation]:
        """Validate one intervention request and build its HeadEdit (with what `record` asks to be recorded)."""
        enc, ids, keep, replace, ablate, patch, ablation = self._request(text, ablate, ablation, reference, patch,
                                                                          source)
        return enc, ids, HeadEdit(keep, replace, **record), ablate, patch, ablation

    def _request(self, text: str | EncodedText, ablate: Iterable[Head], ablation, reference,
                 patch: Iterable[Head] = (), source: str | None = None):
        """Validate one intervention request -> (enc, ids (1, T), keep (1, L, H) or None, replace (1, L, H, T or 1,
        dh) or None, ablate, patch, ablation): what `intervention` says the heads output instead."""
        text = self.encode_text(text)
        ablate, patch = self._heads(ablate, "ablate"), self._heads(patch, "patch")
        ablation = Ablation.of(ablation)
        if ablate & patch:
            both = ", ".join(f"({l}, {h})" for l, h in sorted(ablate & patch)[:5])
            raise InputError(f"heads {both} are both ablated and patched; a head's output is one or the other")
        if patch and source is None:
            raise InputError("patch needs source=<another text>: the patched heads' outputs come from a run on it")
        enc, ids = self._ids(text)
        keep, replace = intervention(self, text, ablate, ablation, reference, patch, source)
        return enc, ids, keep, replace, ablate, patch, ablation

    def run(self, text: str | EncodedText, ablate: Iterable[Head] = (), ablation: str = "zero",
            reference: Iterable[str] | None = None, patch: Iterable[Head] = (),
            source: str | None = None, logits_at: Sequence[int] | None = None, target: str | None = None,
            ablate_cross: Iterable[Head] = (), patch_cross: Iterable[Head] = (),
            on_layer: Callable[[int, torch.Tensor], None] | None = None) -> AttentionRun:
        """See `Model.run`. Incremental where the adapter resumes (`can_resume`): the layers below the first one
        whose edit differs from a recent run of the same tokens are taken over from it (`_EARLIER`,
        `schedule.EarlierRuns`), equal to computing them again, and only the layers from there on run.

        logits_at: the positions whose logits are computed (negative ones count from the end), in that order:
        `run.logits` is then (P, V) and `run.logits_at` names the positions; None (the default) computes every
        position's. The LM head is a large share of a small model's forward (SmolLM2: 49152 x 576 per position),
        and a view that reads one prediction needs one position.

        on_layer(layer, weights): called once per layer, in layer order, with that layer's attention weights
        (H, Q, K) float32 on the CPU, equal to `run.attentions[layer]`, as soon as the layer is known: layers taken
        over from an earlier run at once, each computed layer while the forward goes on to the next one (an
        adapter that cannot resume: every layer after its forward). A page starts on a layer's picture while the
        layers above it are still computing. It must not change `weights`; what it raises ends the run.

        target, ablate_cross, patch_cross: what an encoder-decoder model takes (hf/seq2seq.py); this model has one
        stack over one text and no cross-attention, so any of them is an InputError saying so."""
        if target is not None or ablate_cross or patch_cross:
            what = "a target text" if target is not None else "ablate_cross (cross-attention heads)" if ablate_cross \
                else "patch_cross (cross-attention heads)"
            raise InputError(f"{self.info.name} is a {self.info.kind} model with one text and no cross-attention, so "
                             f"{what} does not apply; give one text, or load an encoder-decoder model (BART, "
                             "Marian, T5) for a source and a target.")
        enc, ids, keep, replace, ablate, patch, ablation = self._request(text, ablate, ablation, reference, patch,
                                                                          source)
        n = len(enc.ids)
        at = None if logits_at is None else [check_index(p % n if isinstance(p, int) and -n <= p < 0 else p, n,
                                                    "position") for p in logits_at]
        with torch.no_grad():
            if self.can_resume:
                out, attentions = self._incremental(enc, ids, keep, replace, at, on_layer)
            else:
                out = self.forward(ids, HeadEdit(keep, replace, logits_at=at), attentions=True)
                attentions = out.attentions[0].float().cpu().contiguous()  # (L, H, Q, K)
                for layer in range(attentions.shape[0]) if on_layer is not None else ():
                    on_layer(layer, attentions[layer])  # (H, Q, K)
        return AttentionRun(
            tokens=enc.labels,
            attentions=attentions,  # (L, H, Q, K)
            ablated=ablate,
            output=out.hidden[0].float().cpu(),  # (T, D)
            logits=None if out.logits is None else out.logits[0].float().cpu(),  # (T, V), or (P, V) at logits_at
            token_ids=list(enc.ids),
            truncated=enc.dropped,
            unknown=enc.unknown,
            special=enc.special,
            ablation=ablation,
            patched=patch,
            logits_at=None if at is None or out.logits is None else tuple(at),
        )

    def _incremental(self, enc: Encoded, ids: torch.Tensor, keep: torch.Tensor | None,
                     replace: torch.Tensor | None, at: list[int] | None,
                     on_layer: Callable[[int, torch.Tensor], None] | None = None) -> tuple[Forward, torch.Tensor]:
        """One run's forward from the first layer no recent run of these tokens computed the same way: layers
        0..l-1 (block outputs and attention weights) come from that run, layers l.. run, and the run is kept for
        the next (l = L: only the final norm and LM head run). -> (the forward's output, attentions (L, H, Q, K))."""
        L = self.n_layers
        steps = layer_steps(keep, replace, L, self.n_heads)
        key = tuple(enc.ids)
        taken = _EARLIER.resume(self, key, steps)  # layers 0..start-1, as computed before
        start = len(taken)
        edit = HeadEdit(keep, replace, start=start, prefix=taken[-1].state if start else None, logits_at=at,
                        states=True, patterns=True)
        if on_layer is not None:
            for layer, kept in enumerate(taken):
                on_layer(layer, kept.pattern)  # (H, Q, K)
            # (1, H, Q, K) as attention computed it -> (H, Q, K) float32 on the CPU, as kept_layer keeps it
            edit.on_pattern = lambda layer, weights: on_layer(layer, weights[0].detach().float().cpu())
        out = self.forward(ids, edit)
        layers = taken + [kept_layer(steps[layer], edit.states[layer], edit.patterns[layer])
                          for layer in range(start, L)]
        if start < L:
            _EARLIER.keep(self, key, layers)
        return out, torch.stack([layer.pattern for layer in layers])  # (L, H, Q, K)

    def head_outputs(self, text: str | EncodedText) -> torch.Tensor:
        """See `Model.head_outputs`; kept for a few texts per model (a patching source, a resampled reference text
        is read again on every run, batching compares edits with it), handed out as a copy so no caller can change
        the kept one."""
        enc, ids = self._ids(self.encode_text(text))
        return _OUTPUTS.get(self, tuple(enc.ids), lambda: self._captured(ids)).clone()  # (L, H, T, dh)

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
        texts = reference_texts(self, reference)
        return _MEANS.get(self, texts, lambda: self._mean_outputs(texts))

    def _mean_outputs(self, texts: tuple[str, ...]) -> torch.Tensor:
        encs = [self.encoding(text) for text in texts]
        per_text: list = [None] * len(texts)
        # One padded forward per group of texts where the adapter pads, else one per text; each stops at the last
        # layer's head outputs (nothing after them is needed).
        groups = self._batches([len(e.ids) for e in encs]) if self.pads else [[i] for i in range(len(encs))]
        for group in groups:
            ids, lengths = padded([encs[i] for i in group])  # (B, T)
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

    def head_gradients(self, text: str | EncodedText, metric: Metric, ablate: Iterable[Head] = (),
                       ablation: str = "zero",
                       reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs, d metric / d outputs), both (L, H, T, dh), in the run with `ablate` switched off (their
        outputs are what replaced them). torch.autograd.grad, not backward(): nothing is accumulated in the shared
        model's parameters."""
        _, ids, edit, _, _, _ = self._edit_for(text, ablate, ablation, reference, capture=True, grad=True)
        with torch.enable_grad():
            out = self.forward(ids, edit)
            # The metric reads CPU tensors whatever the device (its own tensors, a cosine's target, are on the CPU);
            # the copy to the CPU is part of the graph, so the gradient flows back to the device's outputs.
            logits = None if out.logits is None else out.logits[0].float().cpu()  # (T, V)
            hidden = out.hidden[0].float().cpu()  # (T, D)
            grads = torch.autograd.grad(metric(hidden, logits), edit.deltas)  # per layer (1,H,T,dh)
        return edit.stacked(), torch.stack([g[0] for g in grads]).float().cpu()  # (L, H, T, dh) twice

    def _w_o(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        proj = self.output_projection(layer)
        if proj is None:
            return None
        weight, bias = proj
        return out_proj_per_head(weight, self.n_heads), bias  # (H, dh, D), (D,) or None

    def inside_layer(self, text: str | EncodedText, layer: int, ablate: Iterable[Head] = (),
                     ablation: str = "zero", reference: Iterable[str] | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up (see `HeadInside`) from one forward with `ablate` applied as `run`
        applies it. q, k, v, the mask, the weights and any bias added to the scores (ALiBi) are what the layer's
        attention computed with (reported to the edit by the adapter); the scores are recomputed from them and
        checked against those weights."""
        layer = check_index(layer, self.n_layers, "layer")
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
        position_bias = None
        if seen.score_bias is not None:  # ALiBi: the model's own bias, added as the model adds it
            position_bias = seen.score_bias[0].float().cpu().expand(H, T, k.shape[1]).clone()  # (H, Q, K)
            scores = scores + position_bias  # (H, Q, K)
        if seen.allowed is not None:
            scores = scores.masked_fill(~seen.allowed.cpu(), float("-inf"))  # (H, Q, K)
        gap = float((torch.softmax(scores, dim=-1) - weights).abs().max())
        if gap > 1e-4:
            raise UnavailableError(
                f"{self.info.title}: softmax(q·kᵀ·scale) differs from this model's attention weights by {gap:.2g}: "
                "its attention changes the scores in a way it does not report (e.g. soft-capping), so showing "
                "these scores would be wrong."
            )
        w_o, bias = proj  # (H, dh, D), (D,) or None
        ctx = edit.outputs[layer][0].float().cpu()  # (H, T, dh): what the output projection saw, after the edit
        contribution = ctx @ w_o  # (H, T, D)
        resid = edit.inputs[layer][0].float().cpu()  # (T, D)
        return [
            HeadInside(tokens=enc.labels, layer=layer, head=h, q=q[h], k=k[h], v=v[h], scores=scores[h],
                       weights=weights[h], contribution=contribution[h], scale=seen.scale,
                       query_scale=query_scale, bias=bias, resid=resid,
                       kv_head=h // group, ablated=(layer, h) in ablate,
                       position_bias=None if position_bias is None else position_bias[h])
            for h in range(H)
        ]

    def norm_inputs(self, text: str | EncodedText, ablate: Iterable[Head] = (), ablation: str = "zero",
                    reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(values (L, H, K, dh), w_o (L, H, dh, D)) for the norm view (Kobayashi et al. 2020), from the same run
        (same heads off, same meaning of "off") as the weights it is drawn with. A switched-off head's values are
        zero: what it adds (0, its mean, another text's output) does not come from the keys. Key/value heads shared
        by grouped-query attention are repeated per query head."""
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

    def readout(self, text: str | EncodedText) -> Readout | None:
        """The run on `text` (all heads on) as parts for direct effects (see `Readout`). None when this model has
        no LM head, no recognised final norm or output projection, or when the frozen-scale norm does not
        reproduce the model's own output (e.g. logits soft-capped), so no number shown rests on a guess."""
        parts = self.final_parts()
        w_o = [self._w_o(layer) for layer in range(self.n_layers)]
        if parts is None or any(w is None for w in w_o):
            return None
        _, ids = self._ids(self.encode_text(text))
        edit = HeadEdit(capture=True, final=True)
        with torch.no_grad():
            out = self.forward(ids, edit)
        if edit.final_io is None or out.logits is None:
            return None
        # A model kept in bfloat16 or float16 (MHA_VIZ_DTYPE) rounds its own norm output and logits to that dtype:
        # the checks below allow its rounding (a few units of its eps) instead of float32's.
        rounding = max(1.0, 4 * torch.finfo(edit.final_io[1].dtype).eps / 1e-3)
        residual, normed = (t[0].detach().float().cpu() for t in edit.final_io)  # (T, D), (T, D)
        gain, bias = parts.gain, parts.bias  # (D,), (D,) or None
        centred = residual - residual.mean(-1, keepdim=True) if parts.centered else residual  # (T, D)
        # The scale the norm divided by, read off its own input and output, so any epsilon convention is honoured.
        shifted = normed - (0 if bias is None else bias)  # (T, D)
        scale = (gain * centred).norm(dim=-1) / shifted.norm(dim=-1).clamp_min(1e-12)  # (T,)
        rebuilt = gain * centred / scale[:, None] + (0 if bias is None else bias)  # (T, D)
        if not torch.allclose(rebuilt, normed, atol=1e-4 * rounding * float(normed.abs().max()) + 1e-6):
            return None
        logits = out.logits[0].float().cpu()  # (T, V)
        again = normed @ parts.unembed.T + (0 if parts.unembed_bias is None else parts.unembed_bias)  # (T, V)
        if not torch.allclose(again, logits, atol=1e-3 * rounding * float(logits.abs().max()) + 1e-5):
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

        layer = check_index(layer, self.n_layers, "layer")
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
