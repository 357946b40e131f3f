"""Activation patching, attribution patching and direct effects per head: drives a Model through the contract.

Patching asks which heads carry the difference between two inputs. Run the first text ("clean" in the
literature's terms it is the one being changed), replace one head's output by its output on a second text that
differs in one detail (e.g. a swapped name), and measure how far a metric moves from the first text's value
toward the second's (Vig et al. 2020; Meng et al. 2022; Wang et al. 2022; best practice in Zhang & Nanda 2023
and Heimersheim & Nanda 2024). The direct effect asks how much of a logit difference each head writes straight
into the residual stream that the unembedding reads (Elhage et al. 2021), not through later layers.

No streamlit, no plotting. The references they are tested against (one run per head, finite differences, hooks)
live in the tests.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from mha_viz.contract import Head, InputError, Model, Readout

# -- metrics --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    """One number per run that patching moves. Called as metric(output, logits) on one run ((T, D), (T, V)) or a
    batch ((B, T, D), (B, T, V)); returns a scalar tensor or (B,).

    kind "logit_diff": logits[position, answer] - logits[position, other], the logit difference of Wang et al.
        2022 (IOI: " Mary" vs " John"); free of the softmax's shared shift, and linear in the final residual.
    kind "cosine": cosine similarity of the mean-pooled embedding with `target`'s (encoders, no LM head).
    """
    kind: str
    position: int = -1
    answer: int = 0
    other: int = 0
    target: torch.Tensor | None = None  # (T, D) the second text's final hidden states, for "cosine"

    def __call__(self, output: torch.Tensor, logits: torch.Tensor | None) -> torch.Tensor:
        if self.kind == "logit_diff":
            if logits is None:
                raise InputError("the logit difference needs a model with an LM head; use the cosine metric")
            row = logits[..., self.position, :]  # (V,) or (B, V)
            return row[..., self.answer] - row[..., self.other]
        if self.kind == "cosine":
            pooled = output.mean(dim=-2)  # (D,) or (B, D): sentence-transformers' mean pooling
            return F.cosine_similarity(pooled, self.target.mean(dim=0).to(pooled.dtype), dim=-1)
        raise InputError(f"metric kind must be 'logit_diff' or 'cosine'; got {self.kind!r}")

    def describe(self, decode: Callable[[int], str] | None = None) -> str:
        if self.kind == "cosine":
            return "cosine similarity of the sentence embedding with the second sentence's"
        name = decode or str
        return f"logit({name(self.answer)!r}) − logit({name(self.other)!r}) at position {self.position}"


# -- exact patching -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchingMap:
    """The metric on the text, on the source, and after patching each head alone -> `patched` (L, H)."""
    text_value: float
    source_value: float
    patched: torch.Tensor  # (L, H) the metric with that one head's output taken from the source

    @property
    def moved(self) -> torch.Tensor:
        """(patched - text) / (source - text) -> (L, H): 0 = no change, 1 = all the way to the source's value."""
        return normalise(self.patched - self.text_value, self.text_value, self.source_value)


def normalise(change: torch.Tensor, text_value: float, source_value: float) -> torch.Tensor:
    """A change of the metric as a share of the gap between the two texts; the raw change when they agree."""
    gap = source_value - text_value
    return change / gap if abs(gap) > 1e-6 else change


def patching_map(model: Model, text: str, source: str, metric: Metric, chunk: int | None = None,
                 progress: Callable[[float], None] | None = None) -> PatchingMap:
    """Patch every head alone from `source` into `text` (all other heads on) and measure `metric` -> PatchingMap.

    Activation patching as in Vig et al. 2020 and Wang et al. 2022, per head output (its slice of the output
    projection's input), every later layer recomputed. One row of a batched forward per head, `chunk` at a time
    (None: `Model.wave_rows`), the way the head-importance map is batched; the source's outputs are computed once
    and shared by every row. On a causal model where the two texts agree up to some token, the positions before it
    are not recomputed (the engine sees that the patched outputs equal the text's own there; see
    `run_batch_keep`): the same numbers.
    """
    n_tokens, n_source = model.token_count(text), model.token_count(source)
    if n_tokens != n_source:
        raise InputError(f"the source text has {n_source} tokens and the text has {n_tokens}: patching needs the "
                         "same number of tokens in both")
    L, H = model.n_layers, model.n_heads
    source_out = model.head_outputs(source)[None]  # (1, L, H, T, dh)
    every = torch.ones(1, L, H)  # (1, L, H)
    text_value = float(metric(*model.run_batch_keep(text, every)).squeeze())
    source_value = float(metric(*model.run_batch_keep(source, every)).squeeze())
    at = None
    if metric.kind == "logit_diff":  # only the logits at the metric's position are computed: (B, 1, V)
        at, metric = [metric.position], dataclasses.replace(metric, position=0)
    heads = [(layer, head) for layer in range(L) for head in range(H)]
    patched = torch.zeros(L, H)  # (L, H)
    # One growing batch per call, sized by the positions each row recomputes (see Model.wave_rows).
    chunk = chunk or model.wave_rows(model.recomputed_positions(text, source), n_tokens)
    for start in range(0, len(heads), chunk):
        part = heads[start:start + chunk]
        keep = torch.ones(len(part), L, H)  # (B, L, H)
        for row, (layer, head) in enumerate(part):
            keep[row, layer, head] = 0.0  # 0 = take `source_out` here
        values = metric(*model.run_batch_keep(text, keep, source_out, at))  # (B,)
        for (layer, head), value in zip(part, values.tolist()):
            patched[layer, head] = value
        if progress is not None:
            progress(min(1.0, (start + len(part)) / len(heads)))
    return PatchingMap(text_value, source_value, patched)


# -- attribution patching -------------------------------------------------------------------------------------


def attribution_patching(model: Model, text: str, source: str, metric: Metric) -> torch.Tensor:
    """A first-order estimate of every head's patching effect -> (L, H), in the metric's units.

    Attribution patching (Nanda 2023, "Attribution Patching: Activation Patching At Industrial Scale"; Syed,
    Rager & Conmy 2023): metric(patched h) - metric(text) ≈ sum over positions and dims of
    (z_h(source) - z_h(text)) * d metric / d z_h, with the gradient taken on the text's run. One forward and one
    backward on the text, one forward on the source, whatever the number of heads. Exact in the limit of a
    small patch; a large one (a whole name swapped) can be far off where the metric bends (e.g. saturates).
    """
    got = model.head_gradients(text, metric)
    if got is None:
        raise InputError(f"{model.name} cannot give gradients of its head outputs, so attribution patching is "
                         "not available; use the exact patching map")
    text_out, grads = got  # (L, H, T, dh) twice
    source_out = model.head_outputs(source)  # (L, H, T, dh)
    if source_out.shape != text_out.shape:
        raise InputError(f"the source text has {source_out.shape[2]} tokens and the text has {text_out.shape[2]}: "
                         "patching needs the same number of tokens in both")
    return ((source_out - text_out) * grads).sum(dim=(-1, -2))  # (L, H)


# -- direct effects -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DirectEffects:
    """heads (L, H) + rest == total: each head's direct effect on a logit difference, what everything else
    (embeddings, MLPs, biases) adds, and the run's own logit difference."""
    heads: torch.Tensor  # (L, H)
    rest: float
    total: float


def direct_effects(readout: Readout, position: int, answer: int, other: int) -> DirectEffects:
    """Each head's direct effect on logit(answer) - logit(other) at `position` -> DirectEffects.

    The residual stream is a sum of terms, one per head among them (Elhage et al. 2021, "A Mathematical
    Framework for Transformer Circuits"): head h of layer l adds z_lh @ W_O[l, h]. With the final norm's scale
    frozen at this input (as in the direct logit attribution of Wang et al. 2022), the norm and the unembedding
    are linear, so each term maps to its own share of the logit difference; what is not a head's term
    (embeddings, MLP outputs, the output projections' biases, the norm's and unembedding's biases) is `rest`.
    Only the direct path: what a head changes through later layers is not counted here (patching counts it).
    """
    r = readout
    T = r.residual.shape[0]
    if not -T <= position < T:
        raise InputError(f"position {position} is outside the text's {T} tokens")
    direction = (r.unembed[answer] - r.unembed[other]).float()  # (D,)

    def through_norm(x: torch.Tensor) -> torch.Tensor:  # (..., D) -> (..., D), the frozen-scale final norm
        if r.centered:
            x = x - x.mean(dim=-1, keepdim=True)  # (..., D)
        return r.gain * x / r.scale[position]  # (..., D)

    terms = torch.einsum("lhk,lhkd->lhd", r.outputs[:, :, position], r.w_o)  # (L, H, D)
    heads = through_norm(terms) @ direction  # (L, H)
    rest = through_norm(r.residual[position] - terms.sum(dim=(0, 1))) @ direction  # ()
    if r.bias is not None:
        rest = rest + r.bias @ direction
    if r.unembed_bias is not None:
        rest = rest + r.unembed_bias[answer] - r.unembed_bias[other]
    total = r.logits[position, answer] - r.logits[position, other]
    return DirectEffects(heads=heads, rest=float(rest), total=float(total))


# -- comparing maps -------------------------------------------------------------------------------------------


def rank_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation of two maps (L, H) over all heads (average ranks for ties); NaN if either
    map is constant."""
    if a.shape != b.shape:
        raise ValueError(f"the maps differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")

    def ranks(x: torch.Tensor) -> torch.Tensor:
        flat = x.flatten().double()  # (N,)
        order = flat.argsort()
        r = torch.empty_like(flat)
        r[order] = torch.arange(len(flat), dtype=torch.float64)
        for value in flat.unique():  # ties share their average rank
            tied = flat == value
            if tied.sum() > 1:
                r[tied] = r[tied].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = float(ra.norm() * rb.norm())
    return float((ra @ rb) / denom) if denom > 0 else float("nan")


def top_heads(values: torch.Tensor, k: int = 5) -> list[tuple[Head, float]]:
    """The k heads with the largest |value| of a map (L, H), largest first, with their values."""
    flat = values.flatten()
    order = flat.abs().argsort(descending=True)[:k]
    n_heads = values.shape[1]
    return [((int(i) // n_heads, int(i) % n_heads), float(flat[i])) for i in order]
