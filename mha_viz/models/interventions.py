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
scheduled (schedule.py), how many are batched (batching.py) and what is read out besides the run
(inspection.py); `HeadEdit` (points.py) joins the first three into the one object a forward call is handed, as an
argument (the in-repo stacks) or through a ContextVar (transformers, hf/ablation.py). It is never stored on a
model, which every session shares.

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
    InputError,
    Lexicon,
    Metric,
    Model,
    check_ablate,
    check_index,
    check_text,
    reference_texts,
)
from mha_viz.models.batching import Batching
from mha_viz.models.edits import Change, intervention
from mha_viz.models.generation import Generation
from mha_viz.models.inspection import Inspection
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


class EditableModel(Batching, Generation, Inspection, Model):
    """The engine: `run`, `head_outputs`, `head_gradients` and `head_means` here, `run_batch_keep` and `run_many` in
    `Batching`, `generate` in `Generation`, `inside_layer`, `norm_inputs` and `readout` in `Inspection`, each
    written once on the adapter's `encoding` and `forward`. Subclasses are read-only after construction, so one
    instance serves every session."""

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

    def lexicon(self) -> Lexicon:
        """English words from a fixed list, kept where this model's tokenizer reads each as one token both after a
        space and at the start of a text (`models.lexicon.english_lexicon`); an adapter whose model has its own
        vocabulary (the tiny model) answers with that instead. InputError when too few words are single tokens."""
        from mha_viz.models.lexicon import english_lexicon

        return english_lexicon(self)
