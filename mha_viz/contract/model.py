"""The `Model` interface: what a view may ask of every model. What only some models can do (a mask token, weights
per head, a program's output, a training record, ...) is declared in `mha_viz.contract.capabilities` with its "not
available" answer, and `Model` takes those declarations in, so a view asks the model instead of checking its name.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Callable, Iterable, Sequence

import torch

from mha_viz.contract.capabilities import Capabilities, ProgramCapabilities, TrainingCapability
from mha_viz.contract.records import (
    AttentionRun,
    EncodedText,
    Head,
    HeadInside,
    Metric,
    ModelInfo,
    R,
    Readout,
    check_index,
)


class Model(Capabilities, ProgramCapabilities, TrainingCapability, ABC):
    """What a view may ask of any model (abstract, or written once here on top of the abstract methods); the
    optional capabilities come from the classes it derives from (`mha_viz.contract.capabilities`).

    Every adapter in mha-viz derives from `mha_viz.models.interventions.EditableModel`, which implements the
    abstract methods once on top of the adapter's tokenizer and one forward pass.
    """

    info: ModelInfo
    # What mean ablation averages a head's output over (which positions, how texts weigh), in the words the
    # sidebar's help uses (`MeanAblation.help_for`): the engine's definition (EditableModel.head_means).
    mean_over = ("the example sentences' ordinary tokens (special tokens such as [CLS], [SEP] and `<bos>` left out, "
                 "each sentence weighted equally)")

    @property
    def n_layers(self) -> int:
        return self.info.n_layers

    @property
    def n_heads(self) -> int:
        return self.info.n_heads

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def causal(self) -> bool:
        return self.info.causal if self.info.causal is not None else self.info.kind == "causal-lm"

    # -- what every model answers ----------------------------------------------------------------------------
    @abstractmethod
    def run(self, text: "str | EncodedText", ablate: Iterable[Head] = (), ablation: str = "zero",
            reference: Iterable[str] | None = None, patch: Iterable[Head] = (),
            source: str | None = None, logits_at: Sequence[int] | None = None, target: str | None = None,
            ablate_cross: Iterable[Head] = (), patch_cross: Iterable[Head] = (),
            on_layer: Callable[[int, torch.Tensor], None] | None = None) -> AttentionRun:
        """One forward of `text` with heads intervened on; every later layer is recomputed.

        A head's output is its slice of the output projection's input. Heads in `ablate` are switched off as
        `ablation` says (an `Ablation` or its key: "zero" sets their output to 0, "mean" to its mean over the
        `reference` texts, None: `examples()`, see `head_means`, "resample" to its outputs on another of those
        texts, see `ResampleAblation`). Heads in `patch` take their output, position by
        position, from a run on `source` with all heads on (activation patching); `source` must have as many
        tokens as `text`. Their own patterns are still computed.

        logits_at: the positions whose logits are computed (negative ones count from the end); `run.logits` is
        then (P, V) and `run.logits_at` names them. None: every position's. A model may compute more than asked
        (`run.logits_at` None then says it holds every position's).

        on_layer(layer, weights): called once per layer of `run.attentions`, in layer order, with that layer's
        attention (H, Q, K) float32 on the CPU, as soon as it is known; it must not change `weights`.

        target, ablate_cross, patch_cross: a model with cross-attention (`has_cross_attention`) reads `text` as
        its source and `target` as the decoder's text (None: its own greedy continuation); `ablate` and `patch`
        number its encoder's then its decoder's layers, `ablate_cross` and `patch_cross` its cross-attention
        layers (contract/kinds.py names the kinds). A model with one text answers any of them with an
        InputError that says so."""

    def run_many(self, texts: Sequence[str], reduce: Callable[[int, AttentionRun], R], logits: bool = False,
                 progress: Callable[[int], None] | None = None) -> list[R]:
        """Many texts, each run with all heads on, reduced as soon as it is read: returns
        `[reduce(i, model.run(text)) for i, text in enumerate(texts)]`, in the order of `texts`, keeping only what
        `reduce` returns, so memory holds one batch of attention at a time, never every text's.

        reduce(i, run): i is the text's index in `texts`; runs may be handed over in another order (the engine
        runs texts of similar length together, padded, with the same numbers as one by one to float tolerance).
        logits=False: `run.logits` is None, and the LM head may be skipped. progress(n): called with how many
        texts are done after each batch. This default runs the texts one by one."""
        texts = [self.encode_text(t) for t in (texts if not isinstance(texts, str) else [texts])]
        out = []
        for i, text in enumerate(texts):
            run = self.run(text)
            if not logits and run.logits is not None:
                run = replace(run, logits=None)
            out.append(reduce(i, run))
            if progress is not None:
                progress(i + 1)
        return out

    @abstractmethod
    def run_batch_keep(self, text: "str | EncodedText", keep: torch.Tensor, replace: torch.Tensor | None = None,
                       positions: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward over a batch of head masks `keep` (B, L, H) on the same text; a head with keep 0 outputs
        0, or `replace` (B or 1, L, H, T or 1, dh) at its (layer, head) when given.
        Returns (output (B, T, D), logits (B, T, V), or (B, P, V) at `positions` when given, or None). Used to
        ablate or patch many heads in one pass."""

    def single_head_work(self, text: "str | EncodedText", source: str | None = None) -> float:
        """What a map of single-head runs over every head costs, in unedited forwards of `text`: head importance
        (source None) or the exact patching map from `source`. Here one forward per head; the engine counts what
        its batches recompute."""
        return float(self.n_layers * self.n_heads)

    def recomputed_positions(self, text: "str | EncodedText", source: str | None = None) -> int:
        """How many positions of `text` a single-head run recomputes: all of them here; with a `source` to patch
        from, the engine's causal models recompute only those from the first token where the texts differ."""
        return self.token_count(text)

    def wave_rows(self, n_tokens: int, n_keys: int | None = None) -> int:
        """How many rows one `run_batch_keep` call that recomputes `n_tokens` positions (attending to `n_keys`,
        default the same) should carry: long maps go this many heads per call (and report progress per call)."""
        return 16

    @abstractmethod
    def head_outputs(self, text: "str | EncodedText") -> torch.Tensor:
        """Every head's output on `text` with all heads on -> (L, H, T, dh): its slice of the output
        projection's input."""

    def layer_outputs(self, text: "str | EncodedText") -> Sequence[torch.Tensor]:
        """Every head's output on `text` with all heads on, one entry per layer of heads the model edits, as
        `Ablation.replacements` lists them: (H, P, dh) each, P that layer's query positions. One text: the L
        layers of `head_outputs`; an encoder-decoder model: its encoder's, its decoder's and its cross-attention
        layers."""
        return list(self.head_outputs(text))  # L x (H, T, dh)

    @abstractmethod
    def head_means(self, reference: Iterable[str] | None = None) -> torch.Tensor:
        """Each head's mean output over the `reference` texts (None: `examples()`) -> (L, H, dh), one row per
        layer of `layer_outputs`, what mean ablation sets a head to. Which positions and how texts are
        weighted: see the implementation."""

    @abstractmethod
    def head_gradients(self, text: "str | EncodedText", metric: Metric, ablate: Iterable[Head] = (),
                       ablation: str = "zero",
                       reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Head outputs on `text` (with `ablate` switched off as `run` does it) and the gradient of
        `metric(output (T, D), logits (T, V) or None) -> scalar` with respect to them: (outputs (L, H, T, dh),
        grads (L, H, T, dh)); None when unavailable."""

    @abstractmethod
    def inside_layer(self, text: "str | EncodedText", layer: int, ablate: Iterable[Head] = (), ablation: str = "zero",
                     reference: Iterable[str] | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up (see `HeadInside`) from one forward, with the heads in `ablate`
        switched off as `run` switches them off. Raises UnavailableError when this architecture's projections
        cannot be read."""

    def inside(self, text: "str | EncodedText", layer: int, head: int, ablate: Iterable[Head] = (),
               ablation: str = "zero", reference: Iterable[str] | None = None) -> HeadInside:
        """One head opened up (see `HeadInside`); `inside_layer` for every head of its layer."""
        return self.inside_layer(text, layer, ablate, ablation, reference)[check_index(head, self.n_heads, "head")]

    @abstractmethod
    def norm_inputs(self, text: "str | EncodedText", ablate: Iterable[Head] = (), ablation: str = "zero",
                    reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Per-head value vectors and output-projection slices for the norm view (Kobayashi et al. 2020):
        (values (L, H, K, dh), w_o (L, H, dh, D)) from the run with `ablate` switched off as `run` does it;
        switched-off heads' values are zero (what they add does not depend on the keys). None when unavailable."""

    @abstractmethod
    def readout(self, text: "str | EncodedText") -> Readout | None:
        """What the direct effect of each head on the logits needs (see `Readout`); None for models without an
        LM head, or whose final norm or unembedding could not be identified."""

    @abstractmethod
    def encode_text(self, text: "str | EncodedText") -> EncodedText:
        """`text` checked (`check_text`) and encoded, once: the value a run reads from its entry on. An
        `EncodedText` this model made is handed back as it is, so passing one on checks nothing again."""

    def token_count(self, text: "str | EncodedText") -> int:
        """How many tokens `text` becomes (after truncation), without running the model."""
        return self.encode_text(text).n_tokens

    @abstractmethod
    def token_id(self, piece: str) -> int:
        """The id of `piece` when it is exactly one token (e.g. " Mary"), or an InputError saying what it is."""

    @abstractmethod
    def decode(self, token_id: int) -> str:
        """One token id as text, e.g. to label a prediction."""

    def decode_ids(self, ids: list[int]) -> str:
        """Several token ids as one text, e.g. a merged word's label. Adapters whose pieces can split a character
        decode the ids together, so the character is whole again."""
        return "".join(self.decode(i) for i in ids)

