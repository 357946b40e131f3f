"""The records every model hands every view, and the errors and checks at the boundary between them.

    AttentionRun   one run: tokens, attention (L, H, Q, K), what was switched off or patched, output, logits
    HeadInside     one head opened up: q, k, v, scores, weights, contribution
    Readout        a run as the sum of its parts, for direct effects on the logits
    HeadWeights    one layer's projections split per head
    Embeddings     the token and position embeddings and the unembedding
    Lexicon        whole words that are one token each, for generated inputs
    ModelInfo      a model's name, title, kind and sizes
    Encoded        one text as a tokenizer makes it
    EncodedText    a text checked and encoded once, at the engine's entry: what every step of a run reads
    GenerationSettings  how a causal model writes a continuation: how many tokens, greedy or sampled, the seed
    Continuation   a written continuation: the run over prompt + written tokens, and each step's distribution

Errors: InputError (the request cannot be run), ModelLoadError, UnavailableError (an optional capability this
model lacks). Checks: `check_text`, `check_ablate`, `check_index`, `clean_text`, `head_keep_mask`.
Axis letters as in `mha_viz.contract`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Callable, Iterable, TypeVar

import torch

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

        tokens        list[str]                    as in `run.tokens`, len T (the queries'; see `key_tokens`)
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
    # The keys' labels (len K) where they are another text's than the queries' (cross-attention: target tokens
    # reading source tokens; `tokens` then labels the queries), or None: the keys are `tokens`.
    key_tokens: list[str] | None = None


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


@dataclass(frozen=True)
class Encoded:
    """One text as the model's tokenizer makes it (after truncation to `max_tokens`)."""

    ids: list[int]
    labels: list[str]  # one display label per position
    dropped: int  # tokens cut off the end
    special: tuple[int, ...]  # positions of tokens the tokenizer added ([CLS], [SEP], <bos>, ...)
    unknown: tuple[int, ...]  # positions of words mapped to the unknown token


@dataclass(frozen=True)
class EncodedText:
    """A text checked (`check_text`) and encoded by one model, once, where a run enters the engine
    (`Model.encode_text`): the run, its meaning of "off" and a cache's size estimate all read this value instead of
    checking and encoding the string again. `model` is the encoding model's name, so a value made by one model
    is never read as another's tokens."""

    text: str  # the checked text (lone surrogates replaced, see `clean_text`)
    encoded: Encoded
    model: str

    @property
    def ids(self) -> list[int]:
        return self.encoded.ids

    @property
    def n_tokens(self) -> int:
        return len(self.encoded.ids)


Metric = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]  # (output (T, D), logits (T, V)) -> scalar


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



def check_index(value, n: int, what: str) -> int:
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


MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a 64-bit seed


@dataclass(frozen=True)
class GenerationSettings:
    """How a causal model writes a continuation (`Model.generate`): at most `tokens` new tokens, each the most
    likely one (greedy, the default) or drawn from softmax(logits / temperature) by a `torch.Generator` seeded with
    `seed`, so the same settings write the same tokens on every load of a link. Checked here, at the boundary:
    a bad value is an InputError that says what to give instead."""

    tokens: int = 16  # N: how many new tokens at most (an end-of-text token stops it earlier)
    sampling: bool = False  # False: greedy, and temperature and seed change nothing
    temperature: float = 1.0  # > 0; below 1 sharpens the distribution, above 1 flattens it
    seed: int = 0  # the sampling generator's seed

    def __post_init__(self):
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 1:
            raise InputError(f"the number of tokens to write must be a whole number of at least 1; got "
                             f"{str(self.tokens)[:20]!r}")
        try:
            temperature = float(self.temperature)
        except (TypeError, ValueError):
            raise InputError(f"the temperature must be a number above 0; got {str(self.temperature)[:20]!r}") from None
        if not temperature > 0 or temperature == float("inf"):
            raise InputError(f"the temperature must be above 0 (1 samples from the model's own distribution); got "
                             f"{str(self.temperature)[:20]}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= MAX_SEED:
            raise InputError(f"the seed must be a whole number from 0 to {MAX_SEED}; got {str(self.seed)[:24]!r}")
        object.__setattr__(self, "temperature", temperature)

    @classmethod
    def read(cls, tokens, sampling=False, temperature=1.0, seed=0) -> "GenerationSettings":
        """Settings from what a person typed or a link carried (strings allowed): "12" tokens, "7" as a seed; a
        value that is not a number is an InputError naming it."""
        def whole(value, what: str) -> int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            text = str(value).strip()
            if not (text.isdigit() or (text.startswith("-") and text[1:].isdigit())):
                raise InputError(f"the {what} must be a whole number; got {text[:24]!r}")
            return int(text)

        try:
            temperature = float(temperature)
        except (TypeError, ValueError):
            raise InputError(f"the temperature must be a number above 0; got {str(temperature)[:20]!r}") from None
        return cls(tokens=whole(tokens, "number of tokens to write"), sampling=bool(sampling),
                   temperature=temperature, seed=whole(seed, "seed"))


@dataclass(frozen=True)
class Continuation:
    """A continuation a causal model wrote (`Model.generate`), with the heads in `run.ablated` switched off
    while it wrote.

        run        AttentionRun over the prompt and the written tokens (T = n_prompt + written): attentions
                   (L, H, T, T), row t being what position t attended to when it was read, equal to one forward
                   over the final sequence; logits (P, V) at run.logits_at = n_prompt - 1 .. T - 1, row k the
                   scores the k-th written token was chosen from (the last row: what would come next)
        n_prompt   positions 0 .. n_prompt - 1 are the prompt; n_prompt .. T - 1 were written
        settings   how it was written
        stopped    "end": the model wrote an end-of-text token (the last written); "limit": settings.tokens written
    """

    run: AttentionRun
    n_prompt: int
    settings: GenerationSettings
    stopped: str

    @property
    def written_ids(self) -> list[int]:
        return list(self.run.token_ids[self.n_prompt:])

    @property
    def written(self) -> list[str]:
        """The written tokens' labels."""
        return list(self.run.tokens[self.n_prompt:])

    def step_probs(self, step: int) -> torch.Tensor:
        """The distribution written token `step` (0-based) was chosen from -> (V,): softmax(logits / temperature)
        when sampling, the model's own softmax(logits) when greedy."""
        step = check_index(step, len(self.written_ids) + 1, "step")
        t = self.settings.temperature if self.settings.sampling else 1.0
        return torch.softmax(self.run.logits[step].float() / t, dim=-1)  # (V,)

    def chosen_prob(self, step: int) -> float:
        """The probability of the token written at `step` under the distribution it was chosen from."""
        return float(self.step_probs(step)[self.written_ids[step]])

    def top(self, step: int, n: int = 5) -> list[tuple[int, float]]:
        """The `n` most likely tokens at `step`: [(token id, probability)], most likely first."""
        probs, ids = self.step_probs(step).topk(n)  # (n,), (n,)
        return [(int(i), float(p)) for i, p in zip(ids, probs)]
