"""The one data contract between every model adapter and every view.

Axis names, used in shape comments across the package:
    L = layer, H = head (query heads), Q = query position, K = key position,
    T = token position (Q == K == T for self-attention), D = d_model, V = vocabulary, B = batch.

A `Model` turns text into an `AttentionRun`:
    run.tokens      list[str]                      one display label per position, len T
    run.attentions  torch.float32 (L, H, Q, K)     each row sums to 1; causal models are lower-triangular
    run.ablated     frozenset[(layer, head)]       heads whose contribution was switched off in this run
    run.ablation    Ablation ("zero", "mean", ...) what "off" meant for the heads in `ablated` (a str subclass)
    run.patched     frozenset[(layer, head)]       heads whose output was taken from a run on another text
    run.output      torch.float32 (T, D)           final hidden states
    run.logits      torch.float32 (T, V) or None   where the model has an LM head

`Model.inside(text, layer, head)` opens one head up as a `HeadInside` (dh = one head's size, see its docstring).
`Model.run_many(texts, reduce)` runs many texts (in padded batches) and keeps only `reduce(i, run)` of each.

Everything is on the CPU in float32, so views never care which model produced it.

This module holds the data types, the errors, the boundary checks and the abstract `Model`; the implementation
every adapter shares (run, inside, interventions) is written once in `mha_viz.models.interventions`.
"""
from __future__ import annotations

import operator
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, ClassVar, Iterable, Sequence, TypeVar

import torch

if TYPE_CHECKING:
    import torch as _torch  # noqa: F401

    from mha_viz.training_record import TrainingEvidence  # the tiny model's record: its own module

Head = tuple[int, int]  # (layer, head), both 0-based
R = TypeVar("R")  # what a `Model.run_many` reduction returns


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
    # What "off" meant for the heads in `ablated`: one of `Ablation.kinds()` by its key ("zero", "mean",
    # "resample"). See `Model.run`.
    ablation: str = "zero"  # an Ablation (a str), "zero" for runs with nothing switched off
    # Heads whose output was taken from a run on another text (activation patching).
    patched: frozenset[Head] = frozenset()
    # The positions `logits` holds, in its row order, when the run computed only those (`run(..., logits_at=...)`):
    # logits is then (P, V), row i being position logits_at[i]. None: every position, logits (T, V).
    logits_at: tuple[int, ...] | None = None


@dataclass(frozen=True)
class HeadInside:
    """One head of one layer opened up on one text: how it arrives at its weights and what it adds.

        tokens        list[str]                    as in `run.tokens`, len T
        q, k, v       float32 (T, dh)              this head's queries, keys and values; q and k as they enter the
                                                   dot product (after rotary embeddings where the model uses them);
                                                   with grouped-query attention k and v are the shared key/value head's
        scores        float32 (Q, K)               q . k^T times `scale` (and each row times `query_scale`, where
                                                   the model has one), plus `position_bias` where the model adds
                                                   one: the logits before softmax, -inf where the mask forbids (a
                                                   causal model's later keys, padding)
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
    query_scale: torch.Tensor | None  # (Q,) a further factor per query (length-scaled attention), or None
    bias: torch.Tensor | None  # (D,)
    resid: torch.Tensor  # (T, D)
    kv_head: int  # which key/value head k and v come from (== head without grouped-query attention)
    ablated: bool  # this head was switched off in this run: its contribution is zero, its weights still computed
    # (Q, K) what the model adds to the scaled q . k before the mask and softmax, or None: ALiBi's per-head linear
    # position bias (Bloom, MPT, Falcon with alibi; Press et al. 2022), the model's own numbers, so
    # q . k^T * scale + position_bias is `scores` where the mask allows.
    position_bias: torch.Tensor | None = None


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


@dataclass(frozen=True)
class HeadWeights:
    """One layer's attention weights split per head, in the row-vector convention of the code: for the projections'
    input x (T, D) — the normalised residual stream in pre-LN models, the block input in post-LN BERT —

        q = x @ w_q[h] + b_q[h]   (then rotary embeddings where `rotary`)      k, v likewise
        output of the layer's attention = sum_h z_h @ w_o[h] + b_o,  z_h = weights_h @ v_h

    Grouped-query models: w_k, w_v (and their biases) are given per *query* head, each the shared key/value head
    `kv_head[h]`'s slice, so every per-head formula reads the same for every architecture.
    """

    layer: int
    w_q: torch.Tensor  # (H, D, dh)
    w_k: torch.Tensor  # (H, D, dh)
    w_v: torch.Tensor  # (H, D, dh)
    w_o: torch.Tensor  # (H, dh, D)
    b_q: torch.Tensor | None  # (H, dh)
    b_k: torch.Tensor | None  # (H, dh)
    b_v: torch.Tensor | None  # (H, dh)
    b_o: torch.Tensor | None  # (D,)
    kv_head: tuple[int, ...]  # which key/value head each query head reads (h itself without grouped-query attention)
    rotary: bool  # q and k are rotated by their position after the projection (Llama-style models)


@dataclass(frozen=True)
class Embeddings:
    """The maps between tokens and the residual stream, for reading circuits out of the weights.

    tokens: (V, D) the token embedding; positions: (P, D) learned absolute position embeddings (None for rotary
    or none); unembed: (V, D) the LM head's weight (None for encoders); labels: one display label per token id."""

    tokens: torch.Tensor  # (V, D)
    positions: torch.Tensor | None  # (P, D)
    unembed: torch.Tensor | None  # (V, D)
    labels: list[str]


@dataclass(frozen=True)
class Lexicon:
    """Whole-word items that are one token each for one model (`Model.lexicon`), for generated inputs in which
    word i is the i-th non-special token and "the same word" is the same token.

    words: any of them, for random sequences (each drawn word is one token, so a repeat is the same token);
    nouns and verbs: (singular, plural) pairs, for agreement; determiner: the one used before every noun;
    object_determiner: before the object (the tiny corpus says "has a ..."); period: the sentence end, or "" when
    the model reads it as more than one token; source: where the words came from, in words for the page.
    """
    words: tuple[str, ...]
    nouns: tuple[tuple[str, str], ...]
    adjectives: tuple[str, ...]
    prepositions: tuple[str, ...]
    verbs: tuple[tuple[str, str], ...]
    determiner: str
    object_determiner: str
    period: str
    source: str


class InputError(ValueError):
    """The text or the ablation request cannot be run; the message says why and what to do."""


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message names the problem and the fix."""


class UnavailableError(RuntimeError):
    """This model's architecture cannot provide what was asked (an optional capability); the message says why."""


class Ablation(str):
    """What switching a head off sets its output to (its slice of the output projection's input).

    One subclass per meaning, owning its words and the replacement it computes: adding a meaning of "off" is one
    subclass here. The URL parser, the sidebar's picker and help, Inside a head, the notes, the census and every
    intervention read from it. An Ablation is a str equal to its `key` (the value of `?ablation=` in a link), so
    `run.ablation == "mean"` holds and it hashes as that string in caches. `Ablation.of(value)` turns a string (or
    an Ablation) into one, or raises an InputError listing the meanings there are.
    """

    key: ClassVar[str]
    label: ClassVar[str]  # short, for a picker: "zero", "mean"
    describe: ClassVar[str]  # completes "a head switched off has its output ...": "set to zero"
    adjective: ClassVar[str]  # "zero-ablated"
    help: ClassVar[str]  # one or two sentences for the sidebar's help and the notes
    source: ClassVar[str] = ""  # the paper the meaning comes from, where there is one
    _KINDS: ClassVar[dict[str, type["Ablation"]]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Ablation._KINDS[cls.key] = cls

    def __new__(cls, value: str | None = None):
        if cls is Ablation:
            return Ablation.of(value)
        return super().__new__(cls, cls.key)

    def __reduce__(self):
        return (type(self), ())

    @staticmethod
    def of(value) -> "Ablation":
        if isinstance(value, Ablation):
            return value
        kind = Ablation._KINDS.get(value) if isinstance(value, str) else None
        if kind is None:
            raise InputError(f"ablation must be one of {', '.join(map(repr, Ablation._KINDS))}; "
                             f"got {str(value)[:30]!r}")
        return kind()

    @staticmethod
    def kinds() -> tuple["Ablation", ...]:
        """Every meaning of "off", in the order they were defined (the first is the default)."""
        return tuple(kind() for kind in Ablation._KINDS.values())

    def outputs(self, model: "Model", reference: Iterable[str] | None) -> torch.Tensor | None:
        """What a switched-off head outputs instead, the same vector at every position -> (L, H, dh), or None
        for zero (cheaper than a tensor of zeros: the edit multiplies by 0 and adds nothing). A meaning whose
        replacement differs by position overrides `replacement` instead."""
        raise NotImplementedError(f"{type(self).__name__} gives one output per position: ask for its "
                                  "replacement(model, reference, text)")

    def replacement(self, model: "Model", reference: Iterable[str] | None, text: str) -> torch.Tensor | None:
        """What the switched-off heads output instead in a run on `text` -> (L, H, 1, dh): one vector for every
        position, or (L, H, T, dh): one per position of `text`'s T tokens; None for zero. By default `outputs`,
        the same at every position."""
        out = self.outputs(model, reference)  # (L, H, dh) or None
        return None if out is None else out[:, :, None]  # (L, H, 1, dh)


class ZeroAblation(Ablation):
    key = "zero"
    label = "zero"
    describe = "set to 0"
    adjective = "zero-ablated"
    help = ("A head switched off outputs zero: its contribution to the layer's output is removed. Zero is a value "
            "the head never produces, so zero ablation can overstate its role.")

    def outputs(self, model, reference):
        return None


class MeanAblation(Ablation):
    key = "mean"
    label = "mean"
    describe = "set to its average over the example sentences"
    adjective = "mean-ablated"
    help = ("A head switched off outputs its average output instead: the mean over the example sentences' ordinary "
            "tokens (special tokens such as [CLS], [SEP] and `<bos>` left out, each sentence weighted equally), "
            "with every head on, the same vector at every position. It removes what the head says about this input "
            "while keeping its typical output.")
    source = "Wang et al. 2022, IOI (theirs is position by position, over aligned template sentences)"

    def outputs(self, model, reference):
        return model.head_means(reference)  # (L, H, dh)


class ResampleAblation(Ablation):
    """Each switched-off head's output, position by position, from a run (all heads on) on another text of the
    reference set: the text `seed` picks among the reference texts that differ from the one being run, the same
    pick for every run with that reference set. Position i of the run takes position i of that text
    (`line_up`); where the text is shorter, the positions past its end take its last position's output."""

    key = "resample"
    label = "resample"
    describe = "taken from a run on another example sentence"
    adjective = "resample-ablated"
    help = ("A head switched off outputs, position by position, what it output on another example sentence (one "
            "picked by a fixed seed, run with every head on): an output the head really produces, just not for "
            "this input (causal scrubbing's resampling). Positions past the end of the other sentence take its "
            "last position's output.")
    source = "Chan et al. 2022, causal scrubbing"
    seed = 0  # which reference text is picked; fixed, so a run is the same on every page load

    def chosen(self, model: "Model", reference: Iterable[str] | None, text: str) -> str:
        """The reference text whose head outputs a run on `text` takes, or an InputError when there is no other."""
        text = check_text(text)
        others = [t for t in reference_texts(model, reference) if t.strip() != text.strip()]
        if not others:
            raise InputError("resample ablation takes each head's output from another text, and the reference set "
                             "holds only this one: pass reference=[other texts]")
        return random.Random(self.seed).choice(others)

    def replacement(self, model, reference, text):
        other = model.head_outputs(self.chosen(model, reference, text))  # (L, H, P, dh)
        return line_up(other, model.token_count(text))  # (L, H, T, dh)


def line_up(outputs: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """Head outputs of another text (L, H, P, dh) -> (L, H, n_tokens, dh) for a run of `n_tokens` positions:
    position i takes position i (the texts are read from their first token on, as patching reads them); where the
    other text is shorter, positions past its end take its last position's output (clipped, not cycled: cycling
    would put its first position, often an attention sink with outlier outputs, in the middle of the run)."""
    index = torch.arange(n_tokens).clamp_max(outputs.shape[2] - 1)  # (T,)
    return outputs[:, :, index]  # (L, H, T, dh)


def reference_texts(model: "Model", reference: Iterable[str] | None) -> tuple[str, ...]:
    """The texts mean and resample ablation read: `reference` checked, or the model's example sentences (None)."""
    if reference is None:
        texts = tuple(text for _, text, _ in model.examples())
        if not texts:
            raise InputError(f"{model.name} has no example sentences to take head outputs from; pass "
                             "reference=[some texts] for mean or resample ablation")
        return texts
    if isinstance(reference, str):
        raise InputError("reference must be a list of texts, not one text: wrap it as [text]")
    texts = tuple(check_text(t) for t in reference)
    if not texts:
        raise InputError("reference is empty: give at least one text to take head outputs from")
    return texts


ABLATIONS = tuple(Ablation._KINDS)  # the keys, for URL parsing and pickers: ("zero", "mean", "resample")


@dataclass(frozen=True)
class ModelInfo:
    name: str  # what load_model was called with
    title: str  # human-readable, shown in the UI
    kind: str  # "causal-lm", "masked-lm", "encoder", or "program" (compiled from a RASP program: no LM head)
    n_layers: int
    n_heads: int
    max_tokens: int
    n_kv_heads: int | None = None  # grouped-query attention: heads sharing key/value projections
    # Said while the model loads for the first time (e.g. SmolLM2 converts its GGUF once); None when loading is quick.
    load_note: str | None = None
    # Whether a query sees only earlier keys; None: as `kind` says (a causal LM is causal). A compiled program says it.
    causal: bool | None = None


def check_ablation(ablation) -> Ablation:
    """What "off" means, as an Ablation (from its key or itself), or an InputError listing the meanings."""
    return Ablation.of(ablation)


def check_ablate(ablate: Iterable[Head], n_layers: int, n_heads: int, what: str = "ablate") -> frozenset[Head]:
    """Validate a set of heads at the boundary, so a bad request fails with a message, not an IndexError.
    `what` is the argument's name (ablate, patch, base_off), so the message says which argument is wrong."""
    if isinstance(ablate, (str, bytes)):
        raise InputError(f"{what} must be a collection of (layer, head) pairs of ints; got the text {ablate[:40]!r}")
    heads = set()
    for item in ablate:
        # operator.index takes ints (numpy and torch integers too) but not floats, digit strings or bools, which
        # int() would silently turn into some other head: (0.9, 2) must not quietly switch off (0, 2).
        try:
            if isinstance(item, (str, bytes)) or len(item) != 2 or any(isinstance(v, bool) for v in item):
                raise TypeError
            layer, head = operator.index(item[0]), operator.index(item[1])
        except (TypeError, ValueError, IndexError):
            raise InputError(f"{what} must hold (layer, head) pairs of ints; got {str(item)[:60]!r}") from None
        if not (0 <= layer < n_layers and 0 <= head < n_heads):
            raise InputError(
                f"{what}: head ({layer}, {head}) does not exist: this model has layers 0-{n_layers - 1} "
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


def head_keep_mask(ablate: Iterable[Head], n_layers: int, n_heads: int) -> torch.Tensor:
    """1 where a head contributes, 0 where it is switched off -> (L, H)."""
    keep = torch.ones(n_layers, n_heads)  # (L, H)
    for layer, head in ablate:
        keep[layer, head] = 0.0
    return keep


Metric = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]  # (output (T, D), logits (T, V)) -> scalar


class Model(ABC):
    """What a view may ask of any model (abstract), and what it may ask of some (optional capabilities, declared
    here with their "not available" answer so a view asks the model instead of checking its name).

    Every adapter in mha-viz derives from `mha_viz.models.interventions.EditableModel`, which implements the
    abstract methods once on top of the adapter's tokenizer and one forward pass.
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
        return self.info.causal if self.info.causal is not None else self.info.kind == "causal-lm"

    # -- what every model answers ----------------------------------------------------------------------------
    @abstractmethod
    def run(self, text: str, ablate: Iterable[Head] = (), ablation: str = "zero",
            reference: Iterable[str] | None = None, patch: Iterable[Head] = (),
            source: str | None = None) -> AttentionRun:
        """One forward of `text` with heads intervened on; every later layer is recomputed.

        A head's output is its slice of the output projection's input. Heads in `ablate` are switched off as
        `ablation` says (an `Ablation` or its key: "zero" sets their output to 0, "mean" to its mean over the
        `reference` texts, None: `examples()`, see `head_means`, "resample" to its outputs on another of those
        texts, see `ResampleAblation`). Heads in `patch` take their output, position by
        position, from a run on `source` with all heads on (activation patching); `source` must have as many
        tokens as `text`. Their own patterns are still computed."""

    def run_many(self, texts: Sequence[str], reduce: Callable[[int, AttentionRun], R], logits: bool = False,
                 progress: Callable[[int], None] | None = None) -> list[R]:
        """Many texts, each run with all heads on, reduced as soon as it is read: returns
        `[reduce(i, model.run(text)) for i, text in enumerate(texts)]`, in the order of `texts`, keeping only what
        `reduce` returns, so memory holds one batch of attention at a time, never every text's.

        reduce(i, run): i is the text's index in `texts`; runs may be handed over in another order (the engine
        runs texts of similar length together, padded, with the same numbers as one by one to float tolerance).
        logits=False: `run.logits` is None, and the LM head may be skipped. progress(n): called with how many
        texts are done after each batch. This default runs the texts one by one."""
        texts = [check_text(t) for t in (texts if not isinstance(texts, str) else [texts])]
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
    def run_batch_keep(self, text: str, keep: torch.Tensor, replace: torch.Tensor | None = None,
                       positions: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward over a batch of head masks `keep` (B, L, H) on the same text; a head with keep 0 outputs
        0, or `replace` (B or 1, L, H, T or 1, dh) at its (layer, head) when given.
        Returns (output (B, T, D), logits (B, T, V), or (B, P, V) at `positions` when given, or None). Used to
        ablate or patch many heads in one pass."""

    def single_head_work(self, text: str, source: str | None = None) -> float:
        """What a map of single-head runs over every head costs, in unedited forwards of `text`: head importance
        (source None) or the exact patching map from `source`. Here one forward per head; the engine counts what
        its batches recompute."""
        return float(self.n_layers * self.n_heads)

    def recomputed_positions(self, text: str, source: str | None = None) -> int:
        """How many positions of `text` a single-head run recomputes: all of them here; with a `source` to patch
        from, the engine's causal models recompute only those from the first token where the texts differ."""
        return self.token_count(text)

    def wave_rows(self, n_tokens: int, n_keys: int | None = None) -> int:
        """How many rows one `run_batch_keep` call that recomputes `n_tokens` positions (attending to `n_keys`,
        default the same) should carry: long maps go this many heads per call (and report progress per call)."""
        return 16

    @abstractmethod
    def head_outputs(self, text: str) -> torch.Tensor:
        """Every head's output on `text` with all heads on -> (L, H, T, dh): its slice of the output
        projection's input."""

    @abstractmethod
    def head_means(self, reference: Iterable[str] | None = None) -> torch.Tensor:
        """Each head's mean output over the `reference` texts (None: `examples()`) -> (L, H, dh), what mean
        ablation sets a head to. Which positions and how texts are weighted: see the implementation."""

    @abstractmethod
    def head_gradients(self, text: str, metric: Metric, ablate: Iterable[Head] = (), ablation: str = "zero",
                       reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Head outputs on `text` (with `ablate` switched off as `run` does it) and the gradient of
        `metric(output (T, D), logits (T, V) or None) -> scalar` with respect to them: (outputs (L, H, T, dh),
        grads (L, H, T, dh)); None when unavailable."""

    @abstractmethod
    def inside_layer(self, text: str, layer: int, ablate: Iterable[Head] = (), ablation: str = "zero",
                     reference: Iterable[str] | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up (see `HeadInside`) from one forward, with the heads in `ablate`
        switched off as `run` switches them off. Raises UnavailableError when this architecture's projections
        cannot be read."""

    def inside(self, text: str, layer: int, head: int, ablate: Iterable[Head] = (), ablation: str = "zero",
               reference: Iterable[str] | None = None) -> HeadInside:
        """One head opened up (see `HeadInside`); `inside_layer` for every head of its layer."""
        return self.inside_layer(text, layer, ablate, ablation, reference)[_index(head, self.n_heads, "head")]

    @abstractmethod
    def norm_inputs(self, text: str, ablate: Iterable[Head] = (), ablation: str = "zero",
                    reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Per-head value vectors and output-projection slices for the norm view (Kobayashi et al. 2020):
        (values (L, H, K, dh), w_o (L, H, dh, D)) from the run with `ablate` switched off as `run` does it;
        switched-off heads' values are zero (what they add does not depend on the keys). None when unavailable."""

    @abstractmethod
    def readout(self, text: str) -> Readout | None:
        """What the direct effect of each head on the logits needs (see `Readout`); None for models without an
        LM head, or whose final norm or unembedding could not be identified."""

    @abstractmethod
    def token_count(self, text: str) -> int:
        """How many tokens `text` becomes (after truncation), without running the model."""

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

    # -- optional capabilities -------------------------------------------------------------------------------
    @property
    def mask_token(self) -> str | None:
        """The token a masked LM predicts at, e.g. "[MASK]"; None for other models."""
        return None

    def name_words(self) -> frozenset[str]:
        """Words this model knows to be parts of people's names, lowercase (the tiny model's first and last names:
        its vocabulary has no capitals, so "anna berg" is a name only because the model says so). Empty for
        models with no such list; the Patching view then takes capitalised words for names."""
        return frozenset()

    def prediction_position(self, run: AttentionRun) -> int | None:
        """Where predictions are read: a causal LM's last position, a masked LM's first mask token; None when
        the model has no LM head or a masked LM's text holds no mask token."""
        if run.logits is None:
            return None
        if self.info.kind == "masked-lm":
            masked = [i for i, t in enumerate(run.tokens) if self.mask_token and t == self.mask_token]
            return masked[0] if masked else None
        return len(run.tokens) - 1

    def head_weights(self, layer: int) -> HeadWeights:
        """One layer's query, key, value and output weights per head (see `HeadWeights`)."""
        raise UnavailableError(f"{self.info.title}: its attention weights per head could not be identified for "
                               "this architecture.")

    def weights_leave_out(self) -> tuple[str, ...]:
        """What this model's attention does to its projected queries, keys or values beyond `head_weights` (a
        qk-norm, OLMo's clip_qkv clamp), one phrase each for the Circuits page: maps read from the weights leave
        it out. () where the weights per head are the whole linear map (the norms between layers, biases and MLPs
        are left out of every model's circuits and not listed here)."""
        return ()

    def embeddings(self) -> Embeddings:
        """The token (and position) embedding and the unembedding (see `Embeddings`)."""
        raise UnavailableError(f"{self.info.title}: its embedding matrices could not be identified for this "
                               "architecture.")

    def training_evidence(self) -> "TrainingEvidence":
        """The loss log and measured scores of this model's training (see `mha_viz.training_record`)."""
        raise UnavailableError(f"{self.info.title} was not trained here, so it has no training record.")

    def ground_truth(self, tokens: list[str]):
        """Where the relations are in this text, when the model's training data defines them (the tiny model's
        corpus grammar); None otherwise."""
        return None

    def examples(self) -> list[tuple[str, str, str]]:
        """(button label, sentence, what to look for) triples offered as one-click examples; [] for none."""
        return []

    def program_output(self, run: AttentionRun) -> list | None:
        """A compiled program's decoded output at each position of `run` (its readout, with the run's heads off);
        None for a model that was not compiled from a program."""
        return None

    def written_heads(self) -> dict:
        """(layer, head) -> what a program wrote into that head (`models.compiled.config.WrittenHead`: its Select,
        in words and as the program's text); {} for a learned model, whose heads no one wrote."""
        return {}

    def lexicon(self) -> Lexicon:
        """Whole words this model reads as one token each, sorted by the part they play in a template sentence
        (see `Lexicon`): what the head census builds its inputs from."""
        raise UnavailableError(f"{self.info.title}: no list of single-token words is known for its tokenizer.")


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
