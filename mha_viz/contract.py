"""The one data contract between every model adapter and every view.

Axis names, used in shape comments across the package:
    L = layer, H = head (query heads), Q = query position, K = key position,
    T = token position (Q == K == T for self-attention), D = d_model, V = vocabulary, B = batch.

A `Model` turns text into an `AttentionRun`:
    run.tokens      list[str]                      one display label per position, len T
    run.attentions  torch.float32 (L, H, Q, K)     each row sums to 1; causal models are lower-triangular
    run.ablated     frozenset[(layer, head)]       heads whose contribution was switched off in this run
    run.ablation    "zero" or "mean"               what "off" meant for the heads in `ablated`
    run.patched     frozenset[(layer, head)]       heads whose output was taken from a run on another text
    run.output      torch.float32 (T, D)           final hidden states
    run.logits      torch.float32 (T, V) or None   where the model has an LM head

`Model.inside(text, layer, head)` opens one head up as a `HeadInside` (dh = one head's size, see its docstring).

Everything is on the CPU in float32, so views never care which model produced it.
"""
from __future__ import annotations

import operator
from abc import ABC, abstractmethod
import dataclasses
from dataclasses import dataclass, field
from typing import Iterable

import torch

Head = tuple[int, int]  # (layer, head), both 0-based
ABLATIONS = ("zero", "mean")  # what switching a head off sets its output to; see Model.run


@dataclass(frozen=True)
class AttentionRun:
    tokens: list[str]
    attentions: torch.Tensor  # (L, H, Q, K) float32
    ablated: frozenset[Head]
    output: torch.Tensor  # (T, D) float32
    logits: torch.Tensor | None = None  # (T, V) float32
    token_ids: list[int] = field(default_factory=list)
    # How many tokens were cut off because the text was longer than the model accepts.
    truncated: int = 0
    # Positions whose word the model does not know (mapped to its unknown token).
    unknown: tuple[int, ...] = ()
    # Positions of special tokens the tokenizer added ([CLS], [SEP], <s>, ...).
    special: tuple[int, ...] = ()
    # What "off" meant for the heads in `ablated`: "zero" (output set to 0) or "mean" (set to its mean over
    # reference texts). See `Model.run`.
    ablation: str = "zero"
    # Heads whose output was taken from a run on another text (activation patching).
    patched: frozenset[Head] = frozenset()


@dataclass(frozen=True)
class HeadInside:
    """One head of one layer opened up on one text: how it arrives at its weights and what it adds.

        tokens        list[str]                    as in `run.tokens`, len T
        q, k, v       float32 (T, dh)              this head's queries, keys and values; q and k as they enter the
                                                   dot product (after rotary embeddings where the model uses them);
                                                   with grouped-query attention k and v are the shared key/value head's
        scores        float32 (Q, K)               q . k^T times `scale`: the logits before softmax, -inf where the
                                                   mask forbids (a causal model's later keys, padding)
        weights       float32 (Q, K)               softmax(scores) == run(text, ablate).attentions[layer, head]
        contribution  float32 (T, D)               this head's share of the attention output: (weights @ v) through
                                                   its slice of the output projection; zero when the head is ablated
                                                   (its mean output through that slice under mean ablation)
        bias          float32 (D,) or None         the output projection's bias, added once per layer, not per head
        resid         float32 (T, D)               the residual stream entering this layer (the block's input)

    The heads' contributions plus `bias` are the attention sublayer's output, what the layer adds to `resid` (pre-LN
    models; a post-LN model such as BERT adds it and then normalises).
    """

    tokens: list[str]
    layer: int
    head: int
    q: torch.Tensor  # (T, dh)
    k: torch.Tensor  # (T, dh)
    v: torch.Tensor  # (T, dh)
    scores: torch.Tensor  # (Q, K)
    weights: torch.Tensor  # (Q, K)
    contribution: torch.Tensor  # (T, D)
    scale: float  # what q . k^T is multiplied by, e.g. 1 / sqrt(dh)
    bias: torch.Tensor | None  # (D,)
    resid: torch.Tensor  # (T, D)
    kv_head: int  # which key/value head k and v come from (== head without grouped-query attention)
    ablated: bool  # this head was switched off in this run: its contribution is zero, its weights still computed


class InputError(ValueError):
    """The text or the ablation request cannot be run; the message says why and what to do."""


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message names the problem and the fix."""


class UnavailableError(RuntimeError):
    """This model's architecture cannot provide what was asked (an optional capability); the message says why."""


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what load_model was called with
    title: str  # human-readable, shown in the UI
    kind: str  # "causal-lm", "masked-lm" or "encoder"
    n_layers: int
    n_heads: int
    max_tokens: int
    n_kv_heads: int | None = None  # grouped-query attention: heads sharing key/value projections


@dataclass(frozen=True)
class Readout:
    """One run (all heads on) as the sum of its parts, for the direct effect of each head on the logits.

    The final residual stream is `residual` (T, D); the final norm maps it to y = gain * center(r) / scale + bias,
    and the LM head to logits = y @ unembed.T + unembed_bias. With `scale` frozen at this input (T,), that map is
    linear, so each head's term `outputs[l, h, t] @ w_o[l, h]` in the residual can be carried to the logits alone.
    """
    outputs: torch.Tensor  # (L, H, T, dh) each head's output (its slice of the output projection's input)
    w_o: torch.Tensor  # (L, H, dh, D) each head's slice of the output projection
    residual: torch.Tensor  # (T, D) the residual stream entering the final norm
    scale: torch.Tensor  # (T,) what the final norm divides by at each position, at this input
    centered: bool  # LayerNorm subtracts each vector's mean first; RMSNorm does not
    gain: torch.Tensor  # (D,)
    bias: torch.Tensor | None  # (D,)
    unembed: torch.Tensor  # (V, D) the LM head's weight, shared with the model (read only)
    unembed_bias: torch.Tensor | None  # (V,)
    logits: torch.Tensor  # (T, V) the run's logits


def check_ablation(ablation: str) -> None:
    """What "off" means must be one of ABLATIONS; said at the boundary, for `run` and `inside_layer` alike."""
    if ablation not in ABLATIONS:
        raise InputError(f"ablation must be one of {', '.join(map(repr, ABLATIONS))}; got {str(ablation)[:30]!r}")


def check_ablate(ablate: Iterable[Head], n_layers: int, n_heads: int) -> frozenset[Head]:
    """Validate an ablation set at the boundary, so a bad request fails with a message, not an IndexError."""
    if isinstance(ablate, (str, bytes)):
        raise InputError(f"ablate must be a collection of (layer, head) pairs of ints; got the text {ablate[:40]!r}")
    heads = set()
    for item in ablate:
        # operator.index takes ints (numpy and torch integers too) but not floats, digit strings or bools, which
        # int() would silently turn into some other head: (0.9, 2) must not quietly switch off (0, 2).
        try:
            if isinstance(item, (str, bytes)) or len(item) != 2 or any(isinstance(v, bool) for v in item):
                raise TypeError
            layer, head = operator.index(item[0]), operator.index(item[1])
        except (TypeError, ValueError, IndexError):
            raise InputError(f"ablate must hold (layer, head) pairs of ints; got {str(item)[:60]!r}") from None
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise InputError(
                f"head ({layer}, {head}) does not exist: this model has layers 0-{n_layers - 1} "
                f"and heads 0-{n_heads - 1}"
            )
        heads.add((layer, head))
    return frozenset(heads)


def clean_text(text: str) -> str:
    """`text` as valid Unicode: a lone surrogate (e.g. "\\ud800", which a Python str can hold but UTF-8 cannot)
    makes Hugging Face tokenizers raise a TypeError, so it becomes U+FFFD; a split pair is joined back."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def head_keep_mask(ablate: frozenset[Head], n_layers: int, n_heads: int) -> torch.Tensor:
    """1 where a head contributes, 0 where it is ablated."""
    keep = torch.ones(n_layers, n_heads)  # (L, H)
    for layer, head in ablate:
        keep[layer, head] = 0.0
    return keep


class Model(ABC):
    """Base class of every adapter: what a view may ask of any model, and what it may ask of some.

    Required (abstract): `info`, `_run` (one forward with heads switched off), `run_batch_keep` (a batch of head
    masks on one text), `decode` (one token id as text); `decode_ids` (several ids as one text) has a default.
    Optional capabilities, declared here with their "not available" answer so a view asks the model instead of
    checking its name: `mask_token`, `norm_inputs`, `ground_truth`, `examples`, `inside` (raises UnavailableError).
    """

    info: ModelInfo

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
        return self.info.kind == "causal-lm"

    def run(self, text: str, ablate: Iterable[Head] = (), ablation: str = "zero",
            reference: Iterable[str] | None = None, patch: Iterable[Head] = (),
            source: str | None = None) -> AttentionRun:
        """One forward of `text` with heads intervened on; every later layer is recomputed.

        A head's output is its slice of the output projection's input. Heads in `ablate` are switched off:
        `ablation="zero"` sets their output to 0 (the default, and today's behaviour); `"mean"` sets it to its
        mean over every position of the `reference` texts, each run with all heads on (None: `examples()`).
        Heads in `patch` take their output, position by position, from a run on `source` with all heads on
        (activation patching); `source` must have as many tokens as `text`. Their own patterns are still computed.
        """
        text = check_text(text)
        ablate = check_ablate(ablate, self.n_layers, self.n_heads)
        patch = check_ablate(patch, self.n_layers, self.n_heads)
        check_ablation(ablation)
        if ablate & patch:
            both = ", ".join(f"({l}, {h})" for l, h in sorted(ablate & patch)[:5])
            raise InputError(f"heads {both} are both ablated and patched; a head's output is one or the other")
        if patch and source is None:
            raise InputError("patch needs source=<another text>: the patched heads' outputs come from a run on it")
        if not patch and (ablation == "zero" or not ablate):
            return dataclasses.replace(self._run(text, ablate), ablation=ablation)
        replace_with = self.replacement(text, ablate, ablation, reference, patch, source)  # (1, L, H, T or 1, dh)
        run = self._run(text, ablate | patch, replace_with)
        return dataclasses.replace(run, ablated=ablate, ablation=ablation, patched=patch)

    def replacement(self, text: str, ablate: frozenset[Head], ablation: str, reference: Iterable[str] | None,
                    patch: frozenset[Head], source: str | None) -> torch.Tensor:
        """What each intervened head outputs instead -> (1, L, H, T or 1, dh): the mean for mean-ablated heads,
        the source run's outputs for patched heads, 0 elsewhere (zero-ablated heads; kept heads ignore theirs)."""
        n_tokens = self.token_count(text)
        src = None
        if patch:
            source = check_text(source)
            n_source = self.token_count(source)
            if n_source != n_tokens:
                raise InputError(
                    f"the source text has {n_source} tokens and the text has {n_tokens}: patching takes each "
                    "head's output position by position, so both need the same number of tokens. Change the "
                    "source so it lines up (e.g. swap one name for another of the same length in tokens)."
                )
            src = self.head_outputs(source)  # (L, H, T, dh)
        means = self.head_means(reference) if ablation == "mean" and ablate else None  # (L, H, dh)
        d_head = (src if src is not None else means).shape[-1]
        replace = torch.zeros(1, self.n_layers, self.n_heads, n_tokens if patch else 1, d_head)  # (1, L, H, T|1, dh)
        if means is not None:
            for layer, head in ablate:
                replace[0, layer, head] = means[layer, head]  # (dh,), the same at every position
        for layer, head in patch:
            replace[0, layer, head] = src[layer, head]  # (T, dh)
        return replace

    def head_means(self, reference: Iterable[str] | None = None) -> torch.Tensor:
        """Each head's output averaged over every position of the `reference` texts (None: `examples()`), each
        run with all heads on -> (L, H, dh). Kept per reference set: it depends only on the weights and texts,
        so it is the same for every session."""
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
        cache = self.__dict__.setdefault("_head_means", {})
        if texts not in cache:
            outputs = torch.cat([self.head_outputs(t) for t in texts], dim=2)  # (L, H, sum of T, dh)
            if len(cache) >= 8:
                cache.pop(next(iter(cache)))
            cache[texts] = outputs.mean(dim=2)  # (L, H, dh)
        return cache[texts]

    @abstractmethod
    def _run(self, text: str, ablate: frozenset[Head], replace: torch.Tensor | None = None) -> AttentionRun:
        """One forward of valid, non-empty `text` with the heads in `ablate` switched off: their output is 0, or
        `replace` (1, L, H, T or 1, dh) at their (layer, head) when given."""

    @abstractmethod
    def run_batch_keep(self, text: str, keep: torch.Tensor,
                       replace: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward over a batch of head masks `keep` (B, L, H) on the same text; a head with keep 0 outputs
        0, or `replace` (B or 1, L, H, T or 1, dh) at its (layer, head) when given.

        Returns (output (B, T, D), logits (B, T, V) or None). Used to ablate or patch many heads in one pass.
        """

    @abstractmethod
    def decode(self, token_id: int) -> str:
        """One token id as text, e.g. to label a prediction."""

    def decode_ids(self, ids: list[int]) -> str:
        """Several token ids as one text, e.g. a merged word's label. Adapters whose pieces can split a character
        decode the ids together, so the character is whole again."""
        return "".join(self.decode(i) for i in ids)

    # -- optional capabilities ---------------------------------------------------------------------------------
    @property
    def mask_token(self) -> str | None:
        """The token a masked LM predicts at, e.g. "[MASK]"; None for other models."""
        return None

    def prediction_position(self, run: AttentionRun) -> int | None:
        """Where predictions are read: a causal LM's last position, a masked LM's first mask token; None when
        the model has no LM head or a masked LM's text holds no mask token."""
        if run.logits is None:
            return None
        if self.info.kind == "masked-lm":
            masked = [i for i, t in enumerate(run.tokens) if self.mask_token and t == self.mask_token]
            return masked[0] if masked else None
        return len(run.tokens) - 1

    def norm_inputs(self, text: str, ablate: Iterable[Head] = ()) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Per-head value vectors and output-projection slices for the norm view (Kobayashi et al. 2020):
        (values (L, H, K, dh), w_o (L, H, dh, D)) with ablated heads' values zero; None when unavailable."""
        return None

    def inside(self, text: str, layer: int, head: int, ablate: Iterable[Head] = (), ablation: str = "zero",
               reference: Iterable[str] | None = None) -> HeadInside:
        """One head opened up (see `HeadInside`), with the heads in `ablate` switched off in the same run, as
        `run` switches them off (`ablation`, `reference`). Raises UnavailableError when this architecture's
        projections cannot be found."""
        return self.inside_layer(text, layer, ablate, ablation, reference)[_index(head, self.n_heads, "head")]

    def inside_layer(self, text: str, layer: int, ablate: Iterable[Head] = (), ablation: str = "zero",
                     reference: Iterable[str] | None = None) -> list[HeadInside]:
        """`inside` for every head of `layer` from one forward: what "how heads combine" needs."""
        layer = _index(layer, self.n_layers, "layer")
        text = check_text(text)
        ablate = check_ablate(ablate, self.n_layers, self.n_heads)
        check_ablation(ablation)
        replace = None
        if ablation != "zero" and ablate:
            replace = self.replacement(text, ablate, ablation, reference, frozenset(), None)  # (1, L, H, 1, dh)
        return self._inside_layer(text, layer, ablate, replace)

    def _inside_layer(self, text: str, layer: int, ablate: frozenset[Head],
                      replace: torch.Tensor | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up; the heads in `ablate` output 0, or `replace` (1, L, H, T or 1, dh)."""
        raise UnavailableError(
            f"{self.info.title}: opening a head (its queries, keys, values and contribution) is not available for "
            "this architecture. It works for the tiny model and transformers models whose attention uses "
            "transformers' attention interface with a linear output projection."
        )

    def token_count(self, text: str) -> int:
        """How many tokens `text` becomes (after truncation). Adapters answer without running the model."""
        return len(self._run(check_text(text), frozenset()).tokens)

    def head_outputs(self, text: str) -> torch.Tensor:
        """Every head's output on `text` with all heads on -> (L, H, T, dh): its slice of the output
        projection's input. Needed for mean ablation and patching; adapters that cannot give it raise."""
        raise InputError(f"{self.name} cannot report head outputs, so it supports only zero ablation")

    def head_gradients(self, text: str, metric) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Head outputs on `text` and the gradient of `metric(output (T, D), logits (T, V) or None) -> scalar`
        with respect to them: (outputs (L, H, T, dh), grads (L, H, T, dh)); None when unavailable."""
        return None

    def readout(self, text: str) -> "Readout | None":
        """What the direct effect of each head on the logits needs (see `Readout`); None for models without an
        LM head, or whose final norm or unembedding could not be identified."""
        return None

    def token_id(self, piece: str) -> int:
        """The id of `piece` when it is exactly one token (e.g. " Mary"), or an InputError saying what it is."""
        raise InputError(f"{self.name} cannot look up single tokens")

    def ground_truth(self, tokens: list[str]):
        """Where the relations are in this text, when the model's training data defines them (the tiny model's
        corpus grammar); None otherwise."""
        return None

    def examples(self) -> list[tuple[str, str, str]]:
        """(button label, sentence, what to look for) triples offered as one-click examples; [] for none."""
        return []


def _index(value, n: int, what: str) -> int:
    """An int in 0..n-1 (numpy and torch integers too; not bools, floats or strings), or an InputError."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise InputError(f"{what} must be an int; got {str(value)[:40]!r}") from None
    if not 0 <= value < n:
        raise InputError(f"{what} {value} does not exist: this model has {what}s 0-{n - 1}")
    return value


def check_text(text) -> str:
    """Valid, non-empty text, or an InputError that says what to type."""
    if not isinstance(text, str):
        raise InputError(f"text must be a string; got {type(text).__name__}")
    text = clean_text(text)
    if not text.strip():
        raise InputError("The text is empty: type a sentence to see its attention patterns.")
    return text
