"""Circuits in the weights: each head's query/key (QK) and value/output (OV) maps, how heads of different layers
compose, and how much a head's OV map copies tokens. After Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits" (Transformer Circuits Thread, https://transformer-circuits.pub/2021/framework/index.html).

Row-vector convention, as the model contract's `HeadWeights` (q = x @ w_q + b_q): a head reads x (D,) and
    its QK map  W_QK = W_Q W_Kᵀ (D, D):  score(query x, key y) = x W_Q W_Kᵀ yᵀ (before the 1/sqrt(dh) scale)
    its OV map  W_OV = W_V W_O  (D, D):  what it writes for a key y = y W_V W_O (times its attention weight)
Both have rank <= dh and are kept as their factors; no D x D (or V x V) matrix is built for a score.

What these maps leave out, here and everywhere in this module (where ours differs from the paper's
attention-only models and from TransformerLens):
  * Norms are IGNORED, not folded. x is the input of the projections (a pre-LN model's normalised residual, BERT's
    block input); the LayerNorm/RMSNorm between an earlier head's output and a later head's projections is
    treated as the identity: its gain and (LayerNorm) centring are not folded into the weights, as TransformerLens
    does by default (`fold_ln`, `center_writing_weights`), and its division by the residual's size is dropped. That
    division is one number per token, which a composition score, normalised by both matrices' norms, would not see;
    the gain and the centring it would see. In BERT (post-LN) the attention output also passes an output
    LayerNorm and the MLP before the next layer reads it: ignored too.
  * Biases are left out of the maps (the paper's maps are the linear parts).
  * MLPs are left out: a composition score measures the direct path from one head's output to another's input.
  * Rotary models rotate q and k by position after the projection: W_Q W_Kᵀ is their map at relative offset 0.
  * What a model does to its projected queries, keys or values beyond the weights (a qk-norm; OLMo's clip_qkv,
    which clamps them, so the maps differ from the model where the clip acts) is left out too; the model declares
    it (`Model.weights_leave_out`) and `Circuits.left_out` carries it to the page.

Axis letters: L layer, H head, D d_model, dh head width, V vocabulary, P position; N = L*H heads, layer-major.
"""
from __future__ import annotations

import functools
import math
import threading
import weakref
from dataclasses import dataclass

import torch

from mha_viz import measures
from mha_viz.contract import InputError, UnavailableError
from mha_viz.names import head_name

MODES = ("q", "k", "v")  # the input of the later head the earlier head's output reaches: query, key or value
_GRAM_BYTES = 600 * 2**20  # the Gram route keeps every head's packed D x D Gram matrix; above this, the direct route


def _check_weights(w: torch.Tensor, name: str, shape: str) -> torch.Tensor:
    if not isinstance(w, torch.Tensor) or w.ndim != 4 or not w.is_floating_point():
        got = tuple(w.shape) if isinstance(w, torch.Tensor) else type(w).__name__
        raise ValueError(f"{name} must be a float tensor of shape {shape}; got {got}")
    return w.float()


def r_factor(a: torch.Tensor) -> torch.Tensor:
    """A k x k factor F of a (..., n, k), n >= k, with Fᵀ F = aᵀ a -> (..., k, k), float64: then a = Q F with Q's
    columns orthonormal, so ||a @ x||_F == ||F @ x||_F for every x. How a product of thin factors is measured
    without building it. F = Lᵀ from the Cholesky factorisation aᵀa = L Lᵀ of the k x k Gram matrix (faster than a
    QR of the tall matrix, and than an eigendecomposition); where a is rank-deficient, so that Cholesky fails,
    F = S^(1/2) Vᵀ from the Gram matrix's eigendecomposition instead."""
    gram = (a.transpose(-2, -1) @ a).double()  # (..., k, k)
    low, info = torch.linalg.cholesky_ex(gram)  # (..., k, k), (...) 0 where it succeeded
    f = low.transpose(-2, -1)  # (..., k, k)
    bad = info != 0
    if bad.any():
        e, v = torch.linalg.eigh(gram[bad])  # (n_bad, k), (n_bad, k, k)
        f[bad] = e.clamp_min(0).sqrt()[..., :, None] * v.transpose(-2, -1)
    return f


def factored_norm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """||a @ b||_F for a (..., n, k), b (..., k, m), n, m >= k, from k x k factors -> (...)."""
    return (r_factor(a) @ r_factor(b.transpose(-2, -1)).transpose(-2, -1)).flatten(-2).norm(dim=-1)


def factored_singular_values(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The singular values of a @ b (the k largest; the rest are 0) for a (..., n, k), b (..., k, m) -> (..., k),
    descending: those of R_a R_bᵀ, which differs from a @ b only by orthonormal factors on each side."""
    return torch.linalg.svdvals(r_factor(a) @ r_factor(b.transpose(-2, -1)).transpose(-2, -1))  # (..., k)


def effective_rank(s: torch.Tensor) -> torch.Tensor:
    """exp(entropy of s / sum(s)) over the last axis (Roy & Vetterli 2007, "The effective rank: a measure of
    effective dimensionality", EUSIPCO): 1 when one singular value holds everything, k when all k are equal."""
    p = s / s.sum(-1, keepdim=True).clamp_min(1e-30)  # (..., k)
    return torch.exp(-torch.xlogy(p, p).sum(-1))  # (...)


def head_factors(w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor
                 ) -> dict[str, torch.Tensor]:
    """The k x k factors (`r_factor`, float64) of every head's W_Q, W_K, W_V and W_Oᵀ -> {"q", "k", "v", "o"}:
    (L, H, dh, dh) each. Every norm and singular value of a head's QK and OV maps follows from them:
    ||W_Q W_Kᵀ|| = ||F_q F_kᵀ||, ||W_V W_O|| = ||F_v F_oᵀ||, likewise their singular values."""
    return {"q": r_factor(w_q), "k": r_factor(w_k), "v": r_factor(w_v), "o": r_factor(w_o.transpose(-2, -1))}


def _sides(w_q, w_k, w_v, f: dict, mode: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The later head's map the earlier head's output enters, M = A B with A (L, H, D, dh): Q-composition reads
    through W_Q W_Kᵀ, K-composition through (W_Q W_Kᵀ)ᵀ = W_K W_Qᵀ, V-composition through W_V W_O (Elhage et al.
    2021, "Composition scores"; TransformerLens `all_composition_scores`: right = QK, QK.T, OV for "Q", "K", "V").
    Returns (A, F_B (L, H, dh, dh) with ||X B|| = ||X F_Bᵀ||, ||M||_F (L, H))."""
    if mode == "q":
        a, fa, fb = w_q, f["q"], f["k"]
    elif mode == "k":
        a, fa, fb = w_k, f["k"], f["q"]
    elif mode == "v":
        a, fa, fb = w_v, f["v"], f["o"]
    else:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    return a, fb, (fa @ fb.transpose(-2, -1)).flatten(-2).norm(dim=-1)


PAIR_COLUMNS = 90  # later heads measured per matrix product (a few sizes timed: 48-135 cost about the same)
GRAM_STRIP = 64  # columns of a Gram matrix's upper triangle computed per product (see `_gram_strips`)


def _gram_strips(v: torch.Tensor, off_weight: float) -> list[torch.Tensor]:
    """The upper triangle of every head's D x D Gram matrix G = vᵀv, v (N, dh, D), as row strips: strip s holds
    rows s*b .. s*b+b-1 of G from column s*b on -> [(N, b, D - s*b)], b = GRAM_STRIP. Only ~half of G is computed
    (D (D + b) / 2 entries instead of D^2), straight into the strips. In each strip the columns right of its
    diagonal b x b block are multiplied by `off_weight`: with 2 on one side and 1 on the other, the sum of the
    strips' dot products is the Frobenius inner product <G1, G2> (the diagonal blocks hold both of their own
    triangles)."""
    d = v.shape[-1]
    strips = []
    for s in range(0, d, GRAM_STRIP):
        strip = v[:, :, s:s + GRAM_STRIP].transpose(-2, -1) @ v[:, :, s:]  # (N, b, D - s)
        if off_weight != 1.0:
            strip[:, :, GRAM_STRIP:] *= off_weight
        strips.append(strip.flatten(1))  # (N, b (D - s))
    return strips


def composition_scores(w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor,
                       factors: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Composition scores from every head into every head of a later layer (Elhage et al. 2021, section
    "Composition scores" of "Additional intuition and observations"):

        score(A -> B) = ||W_OV^A  M^B||_F / (||W_OV^A||_F ||M^B||_F)

    with M^B = W_QK^B (Q-composition), (W_QK^B)ᵀ (K-composition) or W_OV^B (V-composition), row-vector
    convention (the paper writes the transposes, W_QKᵀ W_OV and so on, for column vectors). 1 when the earlier
    head's output space lies in what the later map reads, about 1/sqrt(rank) for unrelated random maps; compare
    with `random_baselines`.

    w_q, w_k, w_v (L, H, D, dh), w_o (L, H, dh, D) -> {"q", "k", "v"}: (L, H, L, H) float32 indexed
    [earlier layer, earlier head, later layer, later head], NaN where the first layer is not earlier.
    `factors`: `head_factors` of the same weights, when the caller has them already.
    """
    w_q = _check_weights(w_q, "w_q", "(L, H, D, dh)")
    w_k = _check_weights(w_k, "w_k", "(L, H, D, dh)")
    w_v = _check_weights(w_v, "w_v", "(L, H, D, dh)")
    w_o = _check_weights(w_o, "w_o", "(L, H, dh, D)")
    n_layers, n_heads, d_model, d_head = w_q.shape
    for name, w, want in (("w_k", w_k, w_q.shape), ("w_v", w_v, w_q.shape),
                          ("w_o", w_o, (n_layers, n_heads, d_head, d_model))):
        if w.shape != want:
            raise ValueError(f"{name} has shape {tuple(w.shape)}; with w_q {tuple(w_q.shape)} it must be {tuple(want)}")
    n = n_layers * n_heads
    f = head_factors(w_q, w_k, w_v, w_o) if factors is None else factors  # (L, H, dh, dh) each
    # The earlier head's OV map W_V W_O: ||W_V W_O X|| = ||F_v W_O X||, so its output side is U1 = F_v W_O.
    u1 = (f["v"].float() @ w_o).reshape(n, d_head, d_model)  # (N, dh, D)
    left_norm = (f["v"] @ f["o"].transpose(-2, -1)).flatten(-2).norm(dim=-1).reshape(n)  # (N,)
    gram = d_model <= d_head * d_head and n * (d_model * (d_model + GRAM_STRIP) // 2) * 4 <= _GRAM_BYTES
    # Every earlier head's OV output side as Gram strips, off-diagonal entries doubled (see `_gram_strips`).
    g1 = _gram_strips(u1, off_weight=2.0) if gram else None  # [(N, P_s)]
    layer_of = torch.arange(n) // n_heads  # (N,)
    out = {}
    for mode in MODES:
        a, fb, right_norm = _sides(w_q, w_k, w_v, f, mode)  # (L, H, D, dh), (L, H, dh, dh), (L, H)
        u2 = (a @ fb.transpose(-2, -1).float()).reshape(n, d_model, d_head)  # (N, D, dh)
        right_norm = right_norm.reshape(n)  # (N,)
        num2 = torch.zeros(n, n)  # (N earlier, N later): ||W_OV^A M^B||_F^2
        block = max(1, PAIR_COLUMNS // n_heads)  # later layers at a time: one product, not a vector per layer
        for first in range(1, n_layers, block):
            last = min(first + block, n_layers)
            cols = slice(first * n_heads, last * n_heads)
            rows = slice(0, (last - 1) * n_heads)  # every head of a layer earlier than some of these (rest masked)
            if gram:
                # ||U1 U2||^2 = <U1ᵀU1, U2 U2ᵀ>_F: one dot product of D x D Grams per pair, cheaper than the
                # dh x D x dh product when D < dh^2 (SmolLM2: 184k against 2.4M multiply-adds), and each Gram
                # only half built. All pairs of a strip in one matrix product.
                g2 = _gram_strips(u2[cols].transpose(-2, -1), off_weight=1.0)  # [(H', P_s)]
                acc = num2[rows, cols]  # (N1, H') a copy: written back below
                for s1, s2 in zip(g1, g2):
                    acc.addmm_(s1[rows], s2.T)  # (N1, H')
                num2[rows, cols] = acc
            else:
                prod = torch.einsum("aid,bdj->abij", u1[rows], u2[cols])  # (N1, H', dh, dh)
                num2[rows, cols] = prod.flatten(-2).pow(2).sum(-1)  # (N1, H')
        score = num2.double().clamp_min(0).sqrt() / (left_norm[:, None] * right_norm[None, :])  # (N, N)
        earlier = layer_of[:, None] < layer_of[None, :]  # (N, N)
        score = torch.where(earlier, score, torch.full_like(score, float("nan")))  # (N, N)
        out[mode] = score.reshape(n_layers, n_heads, n_layers, n_heads).float()  # (L, H, L, H)
    return out


@dataclass(frozen=True)
class Baseline:
    """Composition scores of random matrices of the same shapes (Elhage et al. 2021 compare their scores with
    these): iid Gaussian W_Q, W_K, W_V (D, dh) and W_O (dh, D), every pair of `n_heads` earlier and later heads."""
    mean: float
    std: float
    p99: float  # the 99th percentile: a score above it is unlikely for unrelated maps
    n_pairs: int


@functools.lru_cache(maxsize=32)
def random_baselines(d_model: int, d_head: int, n_heads: int = 16, seed: int = 0) -> dict[str, Baseline]:
    """{"q", "k", "v"}: `Baseline` of `composition_scores` for random weights of the shapes (D, dh), from a
    seeded generator that leaves the global RNG alone. The score is scale-free, so the Gaussian's variance does
    not matter; for iid maps it is close to 1/sqrt(D)."""
    if d_model < 1 or d_head < 1 or d_head > d_model:
        raise ValueError(f"need 1 <= d_head <= d_model; got d_model={d_model}, d_head={d_head}")
    gen = torch.Generator().manual_seed(seed)
    shape_in, shape_out = (2, n_heads, d_model, d_head), (2, n_heads, d_head, d_model)
    w_q, w_k, w_v = (torch.randn(shape_in, generator=gen, dtype=torch.float64) for _ in range(3))
    w_o = torch.randn(shape_out, generator=gen, dtype=torch.float64)
    out = {}
    for mode, scores in composition_scores(w_q, w_k, w_v, w_o).items():
        pairs = scores[0, :, 1, :].flatten().double()  # (n_heads^2,) every head of layer 0 into every head of layer 1
        out[mode] = Baseline(mean=float(pairs.mean()), std=float(pairs.std()), p99=float(pairs.quantile(0.99)),
                             n_pairs=pairs.numel())
    return out


def _symmetric_gram(x: torch.Tensor) -> torch.Tensor:
    """xᵀx for x (V, D) -> (D, D), from its upper triangle in row strips (about half the multiply-adds)."""
    d = x.shape[1]
    g = torch.zeros(d, d, dtype=x.dtype)  # (D, D)
    for s in range(0, d, GRAM_STRIP):
        g[s:s + GRAM_STRIP, s:] = x[:, s:s + GRAM_STRIP].T @ x[:, s:]  # (b, D - s)
    return g.triu() + g.triu(1).T  # (D, D)


def copying_scores(w_v: torch.Tensor, w_o: torch.Tensor, tokens: torch.Tensor,
                   unembed: torch.Tensor | None) -> torch.Tensor:
    """Each head's copying score from the eigenvalues λ of its token-to-token OV map W_E W_V W_O W_U
    (V, V), rows = the token attended to, columns = the logits it raises: sum(λ) / sum(|λ|) (Elhage et al.
    2021, "Copying / primitive in-context learning" in "One-layer attention-only transformers"). +1 when every
    eigenvalue is positive (a head that raises the logit of the token it attends to), -1 when every one is
    negative. The nonzero eigenvalues of (W_E W_V)(W_O W_U) are those of (W_O W_U)(W_E W_V), dh x dh, so no
    V x V matrix is built.

    w_v (L, H, D, dh), w_o (L, H, dh, D), tokens (V, D), unembed (V, D) or None (an encoder without an LM head:
    the token embedding is used, as BERT's masked-LM head ties its decoder to it; its transform before the decoder
    is left out) -> (L, H) float32. Norms are ignored, as everywhere in this module."""
    w_v = _check_weights(w_v, "w_v", "(L, H, D, dh)")
    w_o = _check_weights(w_o, "w_o", "(L, H, dh, D)")
    e = tokens  # (V, D)
    u = e if unembed is None else unembed  # (V, D)
    if e.ndim != 2 or e.shape[1] != w_v.shape[2] or u.shape != e.shape:
        raise ValueError(f"tokens and unembed must be (V, {w_v.shape[2]}); got {tuple(e.shape)}, {tuple(u.shape)}")
    if u is e or torch.equal(u, e):  # tied embeddings (SmolLM2, BERT's decoder): a Gram matrix, half the work
        ue = _symmetric_gram(e.float())  # (D, D)
    else:
        ue = u.float().T @ e.float()  # (D, D): W_U then W_E, summed over the vocabulary (float32: V x D x D)
    small = (w_o @ ue @ w_v).double()  # (L, H, dh, dh)
    lam = torch.linalg.eigvals(small)  # (L, H, dh) complex
    # The sum of a real matrix's eigenvalues is its (real) trace; .real drops a rounding-sized imaginary part.
    return (lam.sum(-1).real / lam.abs().sum(-1).clamp_min(1e-30)).float()  # (L, H)


def ov_token_map(tokens: torch.Tensor, w_v: torch.Tensor, w_o: torch.Tensor, unembed: torch.Tensor | None,
                 rows: torch.Tensor | None = None) -> torch.Tensor:
    """One head's OV circuit W_E W_V W_O W_U: what attending to a token adds to each logit -> (R, V) for the
    token ids `rows` (None: every token, (V, V)). tokens, unembed (V, D) (unembed None: the token embedding, as
    in `copying_scores`); w_v (D, dh), w_o (dh, D)."""
    e = tokens.float() if rows is None else tokens.float()[rows]  # (R, D)
    u = tokens.float() if unembed is None else unembed.float()  # (V, D)
    return ((e @ w_v.float()) @ w_o.float()) @ u.T  # (R, V)


def qk_token_map(tokens: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor) -> torch.Tensor:
    """One head's QK circuit W_E W_Q W_Kᵀ W_Eᵀ: the score a query token gives a key token from the token
    embeddings alone (before the 1/sqrt(dh) scale; no positions, no norms, no biases) -> (V query, V key)."""
    e = tokens.float()  # (V, D)
    return (e @ w_q.float()) @ (e @ w_k.float()).T  # (V, V)


def qk_position_map(positions: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, causal: bool) -> torch.Tensor:
    """The same for learned absolute positions, W_P W_Q W_Kᵀ W_Pᵀ -> (P query, P key), NaN where a causal
    model's query cannot see the key. A head that attends to the previous token from position alone shows a
    band just below the diagonal. Not defined for rotary models (see `offset_profile`)."""
    p = positions.float()  # (P, D)
    scores = (p @ w_q.float()) @ (p @ w_k.float()).T  # (P, P)
    if causal:
        n = scores.shape[0]
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("nan"))  # (P, P)
    return scores


def offset_profile(position_map: torch.Tensor, max_offset: int = 32) -> torch.Tensor:
    """Mean of a position map along each diagonal: the score for a key `offset` positions before the query,
    offsets 0..max_offset -> (max_offset + 1,). A previous-token head peaks at offset 1."""
    n = position_map.shape[0]
    out = [position_map.diagonal(offset=-o).nanmean() for o in range(min(max_offset, n - 1) + 1)]
    return torch.stack(out).float()  # (O,)


# -- through the model contract ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Circuits:
    """What `circuits(model)` measures from a model's weights alone (no text is run). See the module docstring
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
    `show_circuits`): what every model's circuits leave out (see the module docstring), then what this model
    declares its attention does beyond its weights per head (`Circuits.left_out`: a qk-norm, OLMo's clip_qkv).
    Plain text: each host escapes it for its medium. `c` None (not measured yet) gives the first part alone."""
    words = ("The norms between heads are left out (not folded in), as are biases and MLPs: these are the direct "
             "paths, an approximation.")
    if c is not None and c.left_out:
        words += (" This model's attention also does what weights per head cannot carry, left out too: "
                  + "; ".join(c.left_out) + ".")
    return words


def head_weights(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, list]:
    """Every layer's `model.head_weights(layer)` stacked -> (w_q, w_k, w_v (L, H, D, dh), w_o (L, H, dh, D),
    the per-layer HeadWeights). Raises the model's UnavailableError when it cannot give its weights per head."""
    layers = [model.head_weights(layer) for layer in range(model.n_layers)]
    stack = [torch.stack([getattr(w, name).detach().float() for w in layers]) for name in ("w_q", "w_k", "w_v", "w_o")]
    return stack[0], stack[1], stack[2], stack[3], layers


def circuits(model) -> Circuits:
    """Composition scores between every pair of heads, their random baseline, each head's OV copying score and
    the singular values of its QK and OV maps, from `model.head_weights` and `model.embeddings` (the contract's
    capabilities; a model that lacks them raises UnavailableError). Elhage et al. 2021, "A Mathematical Framework
    for Transformer Circuits": see `composition_scores` and `copying_scores` for the formulas; NORMS ARE IGNORED
    (not folded): the module docstring says what that leaves out. Kept beside the model (weakly, under a lock:
    nothing is written on the shared model; its weights do not change after loading), so every caller after the
    first gets it at once."""
    with _CIRCUITS_LOCK:
        if model not in _CIRCUITS:
            _CIRCUITS[model] = _circuits(model)
        return _CIRCUITS[model]


_CIRCUITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_CIRCUITS_LOCK = threading.Lock()


def _circuits(model) -> Circuits:
    w_q, w_k, w_v, w_o, layers = head_weights(model)  # (L, H, D, dh) x 3, (L, H, dh, D)
    n_layers, n_heads, d_model, d_head = w_q.shape
    f = head_factors(w_q, w_k, w_v, w_o)  # (L, H, dh, dh) each
    composition = composition_scores(w_q, w_k, w_v, w_o, factors=f)
    baseline = random_baselines(d_model, d_head)
    try:
        emb = model.embeddings()
        copying = copying_scores(w_v, w_o, emb.tokens.detach(), None if emb.unembed is None else emb.unembed.detach())
    except UnavailableError:
        copying = None
    qk_s = torch.linalg.svdvals(f["q"] @ f["k"].transpose(-2, -1)).float()  # (L, H, dh) those of W_Q W_Kᵀ
    ov_s = torch.linalg.svdvals(f["v"] @ f["o"].transpose(-2, -1)).float()  # (L, H, dh) those of W_V W_O
    result = Circuits(
        name=model.name, n_layers=n_layers, n_heads=n_heads, d_model=d_model, d_head=d_head,
        composition=composition, baseline=baseline, copying=copying, qk_singular=qk_s, ov_singular=ov_s,
        qk_rank=effective_rank(qk_s), ov_rank=effective_rank(ov_s), rotary=any(w.rotary for w in layers),
        kv_heads=tuple(tuple(w.kv_head) for w in layers), left_out=tuple(model.weights_leave_out()))
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


# -- over training: the previous-token head -> induction head path, step by step ---------------------------------
@dataclass(frozen=True)
class Formation:
    """One model's saved training steps, measured: which heads form the induction path at the last step, and
    how their composition (from the weights) and their patterns (from runs) grew step by step. S = saved steps.

        induction_head   the head of a layer after the first with the highest induction score at the last step
        previous_head    the head of an earlier layer with the highest previous-token attention at the last step
        composition      {"q", "k", "v"}: (S,) composition score previous_head -> induction_head at each step
        induction        (S,) induction_head's induction score; previous (S,) previous_head's previous-token score
        copying          (S,) induction_head's OV copying score (NaN without embeddings)
        top_pair         the highest K-composition pair at the last step (earlier, later, score), found in the
                         weights alone: the same pair as (previous_head, induction_head), or not
    The patterns are measured on `texts` (random words said twice, `repeated_texts`), the same texts at every
    step."""
    name: str
    steps: tuple[int, ...]
    previous_head: tuple[int, int]
    induction_head: tuple[int, int]
    composition: dict[str, torch.Tensor]
    induction: torch.Tensor
    previous: torch.Tensor
    copying: torch.Tensor
    baseline: dict[str, Baseline]
    top_pair: tuple[tuple[int, int], tuple[int, int], float] | None
    texts: tuple[str, ...]

    def first_step_at(self, values: torch.Tensor, fraction: float = 0.5) -> int | None:
        """The first saved step where `values` (S,) has covered `fraction` of its way from its value at the first
        step to its value at the last step; None when it does not rise."""
        v = values.double()
        low = float(v[0])
        rise = float(v[-1]) - low
        if not math.isfinite(rise) or rise <= 0:
            return None
        for step, x in zip(self.steps, v.tolist()):
            if x - low >= fraction * rise:
                return step
        return None


def induction_path(induction: torch.Tensor, previous: torch.Tensor) -> tuple[tuple[int, int], tuple[int, int]]:
    """(previous-token head, induction head) found by measurement, induction and previous (L, H) from
    `induction_and_previous`: the induction head is the highest induction score outside layer 0 (a head of layer 0
    has no earlier head to compose with), the previous-token head the highest previous-token score in a layer before
    it."""
    n_layers, n_heads = induction.shape
    if n_layers < 2:
        raise ValueError("one layer: no earlier head to compose with")
    flat = int(induction[1:].nan_to_num(-1.0).flatten().argmax())
    ind = (1 + flat // n_heads, flat % n_heads)
    flat = int(previous[:ind[0]].nan_to_num(-1.0).flatten().argmax())
    return (flat // n_heads, flat % n_heads), ind


def formation(name: str, steps: list[int], per_step: list[Circuits],
              patterns: list[tuple[torch.Tensor, torch.Tensor]], texts: tuple[str, ...]) -> Formation:
    """`Formation` from each saved step's `circuits` and `induction_and_previous` ((L, H) induction, (L, H)
    previous), in step order. The two heads are found by measurement at the last step (`induction_path`), not named."""
    if not steps or len(per_step) != len(steps) or len(patterns) != len(steps):
        raise ValueError(f"need one Circuits and one pattern measurement per step; got {len(steps)} steps, "
                         f"{len(per_step)} circuits, {len(patterns)} measurements")
    last = per_step[-1]
    prev, ind = induction_path(*patterns[-1])
    pair = prev + ind
    nan = torch.tensor(float("nan"))
    top = last.top_pairs("k", 1)
    return Formation(
        name=name, steps=tuple(steps), previous_head=prev, induction_head=ind,
        composition={m: torch.stack([c.composition[m][pair] for c in per_step]) for m in MODES},  # (S,)
        induction=torch.stack([p[0][ind] for p in patterns]), previous=torch.stack([p[1][prev] for p in patterns]),
        copying=torch.stack([nan if c.copying is None else c.copying[ind] for c in per_step]),
        baseline=last.baseline, top_pair=top[0] if top else None, texts=tuple(texts))


RISE_STARTS = 0.1  # the induction score "has started to rise" once it has covered this share of its rise


def describe_formation(f: Formation) -> str:
    """What the measurement says, in words (markdown), every number read from `f`: the two heads, where the
    K-composition and the induction score stand at the first and last step, the first step where each has covered
    half of its rise, which comes first, and how far the K-composition has risen by the last saved step before
    the induction score starts to (has covered RISE_STARTS of its rise)."""
    prev, ind = head_name(f.previous_head), head_name(f.induction_head)
    k, base = f.composition["k"], f.baseline["k"]
    k_half = f.first_step_at(k)
    i_half = f.first_step_at(f.induction)
    first, last = f.steps[0], f.steps[-1]
    text = (f"**{f.name}**: {prev} attends most to the previous token at step {last} "
            f"({float(f.previous[-1]):.0%}), and {ind} has the highest induction score ({float(f.induction[-1]):.0%}). "
            f"The K-composition {prev} → {ind} is {float(k[0]):.3f} at step {first} and {float(k[-1]):.3f} at step "
            f"{last} (random matrices: {base.mean:.3f}, 99th percentile {base.p99:.3f}); {ind}'s induction score "
            f"goes from {float(f.induction[0]):.0%} to {float(f.induction[-1]):.0%}.")
    if k_half is None or i_half is None:
        what = "the K-composition" if k_half is None else "the induction score"
        return text + f" {what[0].upper() + what[1:]} does not rise over these steps."
    text += (f" The K-composition has covered half of its rise by step {k_half}, the induction score by step "
             f"{i_half}: ")
    if k_half < i_half:
        text += "in these saved steps the K-composition rises first, the induction score after it."
    elif k_half > i_half:
        text += "in these saved steps the induction score rises first, the K-composition after it."
    else:
        text += "both by the same saved step, so these steps cannot tell which comes first."
    starts = f.first_step_at(f.induction, RISE_STARTS)
    at = f.steps.index(starts) if starts is not None else 0
    if at > 0:  # the last saved step before the induction score has covered RISE_STARTS of its rise

        def share(v: torch.Tensor) -> float:
            return (float(v[at - 1]) - float(v[0])) / (float(v[-1]) - float(v[0]))

        k_share = share(k)
        # Past 100%: the K-composition stood above its final value then, and came back down by the last step.
        k_said = (f"covered {k_share:.0%} of its" if k_share <= 1 else
                  f"already passed its final value ({k_share:.0%} of its rise, falling back by step {last})")
        text += (f" At step {f.steps[at - 1]}, the last saved step before the induction score has covered "
                 f"{RISE_STARTS:.0%} of its rise (it has covered {share(f.induction):.0%}), the K-composition has "
                 f"{k_said}.")
    if f.top_pair is not None:
        (a, b, score) = f.top_pair
        same = (a, b) == (f.previous_head, f.induction_head)
        text += (f" In the weights alone, the highest K-composition pair at step {last} is "
                 f"{head_name(a)} → {head_name(b)} ({score:.3f}){': the same two heads' if same else ''}.")
    return text
