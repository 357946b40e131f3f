"""Circuits from the weights alone, as pure functions on stacked per-head weights: the thin-factor algebra every
score rests on (`r_factor`, `factored_norm`, `factored_singular_values`, `effective_rank`, `head_factors`), the
composition scores between heads (`composition_scores`) and their random-matrix baseline (`Baseline`,
`random_baselines`), each head's OV copying score (`copying_scores`), and one head's token and position maps
(`ov_token_map`, `qk_token_map`, `qk_position_map`, `offset_profile`). The conventions and what the maps leave out
are in the package's docstring (`mha_viz.analysis.circuits`).

Axis letters: L layer, H head, D d_model, dh head width, V vocabulary, P position; N = L*H heads, layer-major.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

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
    is left out) -> (L, H) float32. Norms are ignored, as everywhere in this package."""
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
