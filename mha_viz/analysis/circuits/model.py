"""Circuits through the model contract: `circuits(model)` measures a model's weights once (`Circuits`, kept beside
the model) with `head_weights` and `left_out_words` for what its maps leave out; and the causal check that tests a
composition by running the model (`causal_check`, `CausalCheck`, on `repeated_texts`; `induction_and_previous`
scores every head with the registered measures).

Axis letters: L layer, H head, D d_model, dh head width.
"""
from __future__ import annotations

import math
import threading
import weakref
from dataclasses import dataclass

import torch

from mha_viz import measures
from mha_viz.analysis.circuits.weights import (
    Baseline,
    composition_scores,
    copying_scores,
    effective_rank,
    head_factors,
    random_baselines,
)
from mha_viz.contract import InputError, UnavailableError
from mha_viz.contract.kinds import ENCODER, KINDS, canonical  # ENCODER's layers: `model.n_layers`


@dataclass(frozen=True)
class Circuits:
    """What `circuits(model)` measures from a model's weights alone (no text is run). See the package docstring
    for what the maps leave out (norms ignored, biases and MLPs left out), and `left_out` for what this model adds.

        composition   {"q", "k", "v"}: (L, H, L, H) score from head [l1, h1] into head [l2, h2], NaN unless l1 < l2
        baseline      {"q", "k", "v"}: `Baseline` of random matrices of the same shapes
        copying       (L, H) sum(λ) / sum(|λ|) of each head's token-to-token OV map; None without embeddings
        qk_singular   (L, H, dh) singular values of W_Q W_Kᵀ, descending; ov_singular likewise for W_V W_O
        qk_rank       (L, H) their effective rank (Roy & Vetterli 2007); ov_rank likewise
    """
    name: str
    n_layers: int
    n_heads: int
    d_model: int
    d_head: int
    composition: dict[str, torch.Tensor]
    baseline: dict[str, Baseline]
    copying: torch.Tensor | None
    qk_singular: torch.Tensor
    ov_singular: torch.Tensor
    qk_rank: torch.Tensor
    ov_rank: torch.Tensor
    rotary: bool
    kv_heads: tuple[tuple[int, ...], ...]  # per layer: the key/value head each query head uses
    # What this model's attention does beyond its weights per head, which the maps leave out as well, one phrase
    # each, as the model declares it (`Model.weights_leave_out`: a qk-norm, OLMo's clip_qkv); () for none.
    left_out: tuple[str, ...] = ()
    # A model with cross-attention: which of its kinds these are ("Encoder", "Decoder", "Cross"); "" for one stack.
    kind: str = ""
    # Why `composition` lacks some of "q", "k", "v" (cross-attention heads' keys and values read another stack);
    # "" when it holds all three.
    composition_note: str = ""

    def top_pairs(self, mode: str = "k", n: int = 5) -> list[tuple[tuple[int, int], tuple[int, int], float]]:
        """The n highest scores of `mode` as ((earlier layer, head), (later layer, head), score), best first."""
        scores = self.composition[mode].flatten()  # (L*H*L*H,)
        order = scores.nan_to_num(float("-inf")).argsort(descending=True)[:n]
        out = []
        for i in order.tolist():
            if not math.isfinite(float(scores[i])):
                break
            l1, h1, l2, h2 = torch.unravel_index(torch.tensor(i), self.composition[mode].shape)
            out.append(((int(l1), int(h1)), (int(l2), int(h2)), float(scores[i])))
        return out


def left_out_words(c: Circuits | None) -> str:
    """What the maps leave out, in the words both hosts show beside them (the app's Circuits page, the notebook's
    `show_circuits`): what every model's circuits leave out (see the package docstring), then what this model
    declares its attention does beyond its weights per head (`Circuits.left_out`: a qk-norm, OLMo's clip_qkv).
    Plain text: each host escapes it for its medium. `c` None (not measured yet) gives the first part alone."""
    words = ("The norms between heads are left out (not folded in), as are biases and MLPs: these are the direct "
             "paths, an approximation.")
    if c is not None and c.left_out:
        words += (" This model's attention also does what weights per head cannot carry, left out too: "
                  + "; ".join(c.left_out) + ".")
    return words


def _check_kind(model, kind: str | None) -> str | None:
    """`kind` as the page spells it, in any case ("cross" -> "Cross"); None stays None."""
    if kind is not None and not model.has_cross_attention:
        raise InputError(f"kind {kind!r} applies to models with cross-attention; {model.info.name} has one "
                         "self-attention stack: leave kind out")
    if kind is None:
        return None
    found = canonical(kind)
    if found is None:
        raise InputError(f"kind {kind!r} is not a kind of attention of {model.info.name}; its kinds are "
                         f"{', '.join(KINDS)} (in any case)")
    return found


def head_weights(model, kind: str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                           list]:
    """Every layer's `model.head_weights(layer)` stacked -> (w_q, w_k, w_v (L, H, D, dh), w_o (L, H, dh, D),
    the per-layer HeadWeights). `kind`: a model with cross-attention's Encoder, Decoder or Cross layers
    (`model.head_weights(layer, kind=kind)`); None: `model.n_layers` layers, its encoder's there. Raises the
    model's UnavailableError when it cannot give its weights per head."""
    if _check_kind(model, kind) is None:
        layers = [model.head_weights(layer) for layer in range(model.n_layers)]
    else:
        count = model.n_layers if kind == ENCODER else model.decoder_layers()
        layers = [model.head_weights(layer, kind=kind) for layer in range(count)]
    stack = [torch.stack([getattr(w, name).detach().float() for w in layers]) for name in ("w_q", "w_k", "w_v", "w_o")]
    return stack[0], stack[1], stack[2], stack[3], layers


def circuits(model, kind: str | None = None) -> Circuits:
    """Composition scores between every pair of heads, their random baseline, each head's OV copying score and
    the singular values of its QK and OV maps, from `model.head_weights` and `model.embeddings` (the contract's
    capabilities; a model that lacks them raises UnavailableError). Elhage et al. 2021, "A Mathematical Framework
    for Transformer Circuits": see `composition_scores` and `copying_scores` for the formulas; NORMS ARE IGNORED
    (not folded): the package docstring says what that leaves out. Kept beside the model per `kind` (weakly, under
    a lock: nothing is written on the shared model; its weights do not change after loading), so every caller
    after the first gets it at once.

    `kind`, for a model with cross-attention: "Encoder" (also for None: the `model.n_layers` layers),
    "Decoder" (the decoder's self-attention: one stack over the target) or "Cross" (its cross-attention: queries
    read the decoder's stream, keys and values the encoder's output, so only the composition modes the model's
    `composition_modes(kind)` names are measured, and `composition_note` says why)."""
    kind = ENCODER if kind is None and model.has_cross_attention else _check_kind(model, kind)
    with _CIRCUITS_LOCK:
        per_kind = _CIRCUITS.setdefault(model, {})
        if kind not in per_kind:
            per_kind[kind] = _circuits(model, kind)
        return per_kind[kind]


_CIRCUITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CIRCUITS_LOCK = threading.Lock()


def _circuits(model, kind: str | None = None) -> Circuits:
    w_q, w_k, w_v, w_o, layers = head_weights(model, kind)  # (L, H, D, dh) x 3, (L, H, dh, D)
    by_kind = {} if kind is None else {"kind": kind}
    n_layers, n_heads, d_model, d_head = w_q.shape
    f = head_factors(w_q, w_k, w_v, w_o)  # (L, H, dh, dh) each
    composition = composition_scores(w_q, w_k, w_v, w_o, factors=f)
    baseline = random_baselines(d_model, d_head)
    note = ""
    if kind is not None:
        modes, note = model.composition_modes(kind)
        composition = {m: s for m, s in composition.items() if m in modes}
        baseline = {m: b for m, b in baseline.items() if m in modes}
    try:
        emb = model.embeddings(**by_kind)
        copying = copying_scores(w_v, w_o, emb.tokens.detach(), None if emb.unembed is None else emb.unembed.detach())
    except UnavailableError:
        copying = None
    qk_s = torch.linalg.svdvals(f["q"] @ f["k"].transpose(-2, -1)).float()  # (L, H, dh) those of W_Q W_Kᵀ
    ov_s = torch.linalg.svdvals(f["v"] @ f["o"].transpose(-2, -1)).float()  # (L, H, dh) those of W_V W_O
    result = Circuits(
        name=model.name, n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_head=d_head,
        composition=composition, baseline=baseline, copying=copying, qk_singular=qk_s, ov_singular=ov_s,
        qk_rank=effective_rank(qk_s), ov_rank=effective_rank(ov_s), rotary=any(w.rotary for w in layers),
        kv_heads=tuple(tuple(w.kv_head) for w in layers), left_out=tuple(model.weights_leave_out(**by_kind)),
        kind=kind or "", composition_note=note)
    return result


def check_same_shape(a: Circuits, b: Circuits) -> None:
    """Two models' circuits can be compared head by head only with the same layers, heads and widths."""
    shape_a = (a.n_layers, a.n_heads, a.d_model, a.d_head)
    shape_b = (b.n_layers, b.n_heads, b.d_model, b.d_head)
    if shape_a != shape_b:
        raise ValueError(f"{a.name} has (layers, heads, d_model, dh) = {shape_a} and {b.name} {shape_b}: only "
                         "models of the same shape compare head by head; pick two steps or seeds of one model")


# -- the causal check: switch the earlier head off and measure the later head ----------------------------------
@dataclass(frozen=True)
class CausalCheck:
    """Pattern scores on random token sequences said twice, with all heads on and with `off` mean-ablated.

        induction_on / induction_off  (L, H) the registered `induction` measure, averaged over the texts
        previous_on / previous_off    (L, H) attention on the previous token, same texts
    """
    off: tuple[int, int]
    texts: tuple[str, ...]
    induction_on: torch.Tensor
    induction_off: torch.Tensor
    previous_on: torch.Tensor
    previous_off: torch.Tensor
    ablation: str


def repeated_texts(model, n_texts: int = 4, n_words: int = 20, seed: int = 0) -> tuple[str, ...]:
    """`n_texts` texts of `n_words` distinct random words said twice, words drawn from the model's own vocabulary
    (pieces that decode to letters only), as Olsson et al. 2022 measure induction on repeated random tokens.
    A word may become several tokens; the score finds the repeats in the token ids, whatever they are."""
    n_vocab = model.embeddings().tokens.shape[0]
    n_words = max(2, min(n_words, (model.info.max_tokens - 4) // 4))  # room for word pieces and special tokens
    gen = torch.Generator().manual_seed(seed)
    words: list[str] = []
    seen = set()
    for i in torch.randperm(n_vocab, generator=gen).tolist():
        word = model.decode(i).strip()
        if word.isascii() and word.isalpha() and word.lower() not in seen and _readable(model, word):
            seen.add(word.lower())
            words.append(word)
            if len(words) == n_texts * n_words:
                break
    if len(words) < 2 * n_words:
        raise ValueError(f"{model.name}'s vocabulary has too few plain words ({len(words)}) for repeated texts")
    chunks = [words[i:i + n_words] for i in range(0, len(words) - n_words + 1, n_words)]
    return tuple(" ".join(c + c) for c in chunks)


def _readable(model, word: str) -> bool:
    """Whether the model takes `word` as text: a compiled program's BOS decodes to a word it refuses to read."""
    try:
        model.token_count(word)
    except InputError:
        return False
    return True


def causal_check(model, off: tuple[int, int], texts: tuple[str, ...] | None = None,
                 ablation: str = "mean") -> CausalCheck:
    """Every head's induction and previous-token scores on repeated random texts with all heads on, and with the
    head `off` switched off through `model.run(..., ablate={off}, ablation=...)` (mean: its output set to its mean
    over the model's example sentences, or over `texts` when it has none). Tests whether a composition seen in the
    weights is used: e.g. an induction head's score falling when the previous-token head feeding its keys is off."""
    texts = tuple(texts) if texts is not None else repeated_texts(model)
    reference = None if model.examples() else list(texts)
    on_i, on_p = induction_and_previous(model, texts)
    off_i, off_p = induction_and_previous(model, texts, ablate={tuple(off)}, ablation=ablation, reference=reference)
    return CausalCheck(off=tuple(off), texts=texts, induction_on=on_i, induction_off=off_i,
                       previous_on=on_p, previous_off=off_p, ablation=ablation)


def induction_and_previous(model, texts: tuple[str, ...], **run_args) -> tuple[torch.Tensor, torch.Tensor]:
    """Every head's registered `induction` and `previous` measures (`mha_viz.measures`: the same definitions as
    the badges and the census), each averaged over `texts` (repeated random words: `repeated_texts`), from
    `model.run(text, **run_args)` -> ((L, H), (L, H))."""
    induction, previous = [], []
    for text in texts:
        run = model.run(text, **run_args)
        pos = measures.Positions.of(len(run.tokens), model.causal, run.tokens, run.token_ids, run.special,
                                    unknown=run.unknown)
        induction.append(measures.REGISTRY["induction"](run.attentions, pos))  # (L, H)
        previous.append(measures.REGISTRY["previous"](run.attentions, pos))  # (L, H)
    return _mean(induction), _mean(previous)


def _mean(scores: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(scores).nanmean(0)  # (L, H) over the texts
