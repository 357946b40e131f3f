"""The circuit scores against an independent computation (the D x D and V x V matrices built out and measured
as the paper defines them), against TransformerLens where it is installed, and on weights with known answers."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mha_viz import measures
from mha_viz.analysis import circuits as C
from mha_viz.analysis.circuits import weights as W  # what the tests below patch: the module that reads it


def _random(L=3, H=4, D=24, dh=6, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w_q, w_k, w_v = (torch.randn(L, H, D, dh, generator=gen) for _ in range(3))
    return w_q, w_k, w_v, torch.randn(L, H, dh, D, generator=gen)


def _plain(w_q, w_k, w_v, w_o):
    """Composition scores from the definition, every matrix built out: ||OV1 M2|| / (||OV1|| ||M2||)."""
    L, H = w_q.shape[:2]
    ov = torch.einsum("lhdi,lhie->lhde", w_v.double(), w_o.double())  # (L, H, D, D)
    qk = torch.einsum("lhdi,lhei->lhde", w_q.double(), w_k.double())  # (L, H, D, D)
    right = {"q": qk, "k": qk.transpose(-2, -1), "v": ov}
    out = {m: torch.full((L, H, L, H), float("nan"), dtype=torch.float64) for m in C.MODES}
    for m in C.MODES:
        for l1 in range(L):
            for h1 in range(H):
                for l2 in range(l1 + 1, L):
                    for h2 in range(H):
                        a, b = ov[l1, h1], right[m][l2, h2]
                        out[m][l1, h1, l2, h2] = (a @ b).norm() / (a.norm() * b.norm())
    return out


@pytest.mark.parametrize("gram_bytes", [W._GRAM_BYTES, 0], ids=["gram-route", "direct-route"])
def test_composition_scores_equal_the_definition(monkeypatch, gram_bytes):
    monkeypatch.setattr(W, "_GRAM_BYTES", gram_bytes)
    weights = _random()
    ours, plain = C.composition_scores(*weights), _plain(*weights)
    for m in C.MODES:
        assert ours[m].shape == (3, 4, 3, 4)
        assert torch.equal(ours[m].isnan(), plain[m].isnan())  # NaN exactly where the first layer is not earlier
        assert ours[m][0, :, 0].isnan().all() and ours[m][2, :, 1].isnan().all()
        assert torch.allclose(ours[m].nan_to_num(), plain[m].float().nan_to_num(), atol=1e-6)


def test_composition_scores_equal_transformer_lens():
    tl = pytest.importorskip("transformer_lens")
    from transformer_lens.utilities.matrix import composition_scores as tl_scores

    w_q, w_k, w_v, w_o = _random(L=2, H=3, D=32, dh=8, seed=3)
    ours = C.composition_scores(w_q, w_k, w_v, w_o)
    ov, qk = tl.FactoredMatrix(w_v, w_o), tl.FactoredMatrix(w_q, w_k.transpose(-2, -1))
    for m, right in (("q", qk), ("k", qk.T), ("v", ov)):
        theirs = tl_scores(ov, right, broadcast_dims=True)  # (L, H, L, H), every pair (TL masks later)
        earlier = ours[m].isfinite()
        assert earlier.sum() == 9
        assert torch.allclose(ours[m][earlier], theirs[earlier].float(), atol=1e-5)


def _unit(D, i):
    return torch.eye(D)[:, i:i + 1]  # (D, 1)


def test_composition_is_one_into_the_same_direction_and_zero_into_an_orthogonal_one():
    # Head (0, 0) writes e0 from e0 (OV = e0 e0ᵀ); head (1, 0) reads its query along e0, head (1, 1) along e1.
    D, dh = 6, 1
    w_q, w_k, w_v = (torch.zeros(2, 2, D, dh) for _ in range(3))
    w_o = torch.zeros(2, 2, dh, D)
    for l in range(2):
        for h in range(2):
            w_v[l, h], w_o[l, h], w_k[l, h] = _unit(D, 2 + h), _unit(D, 3).T, _unit(D, 5)
    w_v[0, 0], w_o[0, 0] = _unit(D, 0), _unit(D, 0).T
    w_q[1, 0], w_q[1, 1] = _unit(D, 0), _unit(D, 1)
    w_q[0, :] = _unit(D, 4)
    scores = C.composition_scores(w_q, w_k, w_v, w_o)
    assert scores["q"][0, 0, 1, 0] == pytest.approx(1.0, abs=1e-6)
    assert scores["q"][0, 0, 1, 1] == pytest.approx(0.0, abs=1e-6)
    assert scores["k"][0, 0, 1, 0] == pytest.approx(0.0, abs=1e-6)  # its keys read e5, which nothing writes


def test_random_baseline_is_what_random_weights_score():
    base = C.random_baselines(64, 16)
    for m in C.MODES:
        b = base[m]
        assert b.n_pairs == 256 and b.std > 0 and b.mean < b.p99
        assert b.mean == pytest.approx(1 / math.sqrt(64), rel=0.15)  # iid maps: about 1/sqrt(D)
    # Other random weights of the same shapes (another seed) score within the baseline's spread.
    scores = C.composition_scores(*_random(L=2, H=8, D=64, dh=16, seed=7))["k"][0, :, 1, :]
    assert abs(float(scores.mean()) - base["k"].mean) < 3 * base["k"].std


def test_copying_scores_equal_the_eigenvalues_of_the_full_token_map():
    gen = torch.Generator().manual_seed(1)
    L, H, D, dh, V = 2, 3, 12, 4, 30
    w_v, w_o = torch.randn(L, H, D, dh, generator=gen), torch.randn(L, H, dh, D, generator=gen)
    tokens, unembed = torch.randn(V, D, generator=gen), torch.randn(V, D, generator=gen)
    ours = C.copying_scores(w_v, w_o, tokens, unembed)
    for l in range(L):
        for h in range(H):
            full = (tokens @ w_v[l, h] @ w_o[l, h] @ unembed.T).double().numpy()  # (V, V)
            lam = np.linalg.eigvals(full)
            assert float(ours[l, h]) == pytest.approx(lam.sum().real / np.abs(lam).sum(), abs=1e-4)
    # Tied embeddings take the Gram-matrix route (half of Wᵀ W built): the same eigenvalues.
    tied = C.copying_scores(w_v, w_o, tokens, tokens.clone())
    for l in range(L):
        for h in range(H):
            lam = np.linalg.eigvals((tokens @ w_v[l, h] @ w_o[l, h] @ tokens.T).double().numpy())  # (V,)
            assert float(tied[l, h]) == pytest.approx(lam.sum().real / np.abs(lam).sum(), abs=1e-4)


def test_copying_is_plus_one_for_a_copying_map_and_minus_one_for_its_negative():
    D, dh = 8, 3
    gen = torch.Generator().manual_seed(2)
    w_v = torch.randn(1, 2, D, dh, generator=gen)
    w_o = torch.stack([w_v[0, 0].T, -w_v[0, 1].T])[None]  # OV = W_V W_Vᵀ (positive) and its negative
    tokens = torch.eye(D)
    scores = C.copying_scores(w_v, w_o, tokens, tokens)
    assert scores[0, 0] == pytest.approx(1.0, abs=1e-5) and scores[0, 1] == pytest.approx(-1.0, abs=1e-5)
    # An encoder without an LM head: the token embedding stands in for the unembedding.
    assert torch.allclose(C.copying_scores(w_v, w_o, tokens, None), scores)


def test_r_factor_gives_the_gram_matrix_also_for_rank_deficient_weights():
    gen = torch.Generator().manual_seed(6)
    a = torch.randn(3, 40, 6, generator=gen, dtype=torch.float64)
    a[1, :, 3] = a[1, :, 0]  # rank 5 of 6: Cholesky fails, the eigendecomposition is used
    a[2] = 0.0  # a head that is all zeros
    f = C.r_factor(a)  # (3, 6, 6)
    assert torch.allclose(f.transpose(-2, -1) @ f, a.transpose(-2, -1) @ a, atol=1e-9)
    x = torch.randn(6, 7, generator=gen, dtype=torch.float64)
    assert torch.allclose((a @ x).flatten(1).norm(dim=1), (f @ x).flatten(1).norm(dim=1))


@pytest.mark.parametrize("strip", [4, 64], ids=["several-strips", "one-strip"])
def test_composition_scores_do_not_depend_on_the_strip_width(monkeypatch, strip):
    weights = _random(L=3, H=4, D=24, dh=6, seed=8)
    plain = _plain(*weights)
    monkeypatch.setattr(W, "GRAM_STRIP", strip)
    monkeypatch.setattr(W, "PAIR_COLUMNS", 4)  # one later layer per product: several column blocks
    ours = C.composition_scores(*weights)
    for m in C.MODES:
        assert torch.allclose(ours[m].nan_to_num(), plain[m].float().nan_to_num(), atol=1e-6)


def test_factored_singular_values_and_effective_rank():
    gen = torch.Generator().manual_seed(4)
    a = torch.randn(20, 5, generator=gen, dtype=torch.float64)
    b = torch.randn(5, 30, generator=gen, dtype=torch.float64)
    assert torch.allclose(C.factored_singular_values(a, b), torch.linalg.svdvals(a @ b)[:5])
    assert C.factored_norm(a, b) == pytest.approx(float((a @ b).norm()))
    assert float(C.effective_rank(torch.ones(7))) == pytest.approx(7.0)
    assert float(C.effective_rank(torch.tensor([3.0, 0, 0, 0]))) == pytest.approx(1.0)


def test_a_previous_token_head_is_a_band_beside_the_diagonal_of_its_position_map():
    P = 10
    positions = torch.eye(P)  # position i is the unit vector e_i
    w_q = torch.eye(P)  # the query of position i is e_i
    w_k = torch.diag(torch.ones(P - 1), diagonal=1)  # the key of position j is e_{j+1}: q_i . k_j = [j == i - 1]
    scores = C.qk_position_map(positions, w_q, w_k, causal=True)
    assert scores.triu(1).isnan().sum() == P * (P - 1) // 2  # later keys are never seen
    assert torch.equal(scores.nan_to_num().argmax(-1)[1:], torch.arange(P - 1))
    profile = C.offset_profile(scores, max_offset=4)
    assert int(profile.argmax()) == 1 and profile[1] == 1.0


def test_qk_and_ov_token_maps_are_the_products_of_the_paper():
    gen = torch.Generator().manual_seed(5)
    V, D, dh = 9, 6, 2
    e, u = torch.randn(V, D, generator=gen), torch.randn(V, D, generator=gen)
    w_q, w_k, w_v = (torch.randn(D, dh, generator=gen) for _ in range(3))
    w_o = torch.randn(dh, D, generator=gen)
    assert torch.allclose(C.qk_token_map(e, w_q, w_k), e @ w_q @ w_k.T @ e.T, atol=1e-5)
    assert torch.allclose(C.ov_token_map(e, w_v, w_o, u), e @ w_v @ w_o @ u.T, atol=1e-5)
    assert torch.allclose(C.ov_token_map(e, w_v, w_o, u, rows=torch.tensor([3])), (e @ w_v @ w_o @ u.T)[3:4],
                          atol=1e-5)


def test_the_induction_measure_finds_the_token_after_the_earlier_occurrence():
    """The registered `induction` measure that `circuits.induction_and_previous` (and so the Circuits view) averages."""
    ids = [0, 5, 6, 7, 5, 6, 7]  # the second 5 is at 4; its first occurrence at 1 is followed by 6 at 2
    att = torch.zeros(1, 2, 7, 7)
    att[0, 0, torch.arange(7), torch.arange(7)] = 1.0  # head 0 attends to itself
    for q, target in ((4, 2), (5, 3), (6, 4)):
        att[0, 1, q, target] = 1.0  # head 1 attends to the token after the earlier occurrence
    induction = measures.REGISTRY["induction"]
    scores = induction(att, measures.Positions.of(7, False, token_ids=ids))
    assert scores[0, 0] == 0.0 and scores[0, 1] == 1.0
    assert induction(att, measures.Positions.of(7, False, token_ids=list(range(7)))).isnan().all()  # no repeat


def _formation(k, induction, steps=(0, 100, 200, 300)):
    base = C.Baseline(mean=0.1, std=0.01, p99=0.12, n_pairs=256)
    t = torch.tensor
    return C.Formation(name="m", steps=tuple(steps), previous_head=(0, 1), induction_head=(1, 2),
                       composition={"k": t(k), "q": t(k), "v": t(k)}, induction=t(induction),
                       previous=t([0.1, 0.5, 0.9, 0.9]), copying=t([0.0, 0.5, 0.9, 0.9]),
                       baseline={m: base for m in C.MODES}, top_pair=((0, 1), (1, 2), k[-1]), texts=("a b a b",))


def test_the_words_on_a_formation_follow_its_numbers():
    f = _formation([0.1, 0.25, 0.28, 0.3], [0.0, 0.05, 0.6, 0.9])
    assert f.first_step_at(f.composition["k"]) == 100 and f.first_step_at(f.induction) == 200
    words = C.describe_formation(f)
    assert "is 0.100 at step 0 and 0.300 at step 300" in words
    assert "half of its rise by step 100, the induction score by step 200" in words
    assert "the K-composition rises first" in words and "the same two heads" in words
    # Step 100 is the last before the induction score covers 10% of its rise (5 of 90 points: 6%); K: 75%.
    assert "At step 100, the last saved step before" in words and "(it has covered 6%)" in words
    assert "the K-composition has covered 75% of its." in words
    later = C.describe_formation(_formation([0.1, 0.1, 0.11, 0.3], [0.0, 0.6, 0.8, 0.9]))
    assert "the induction score rises first" in later
    overshoot = C.describe_formation(_formation([0.1, 0.45, 0.35, 0.3], [0.0, 0.05, 0.6, 0.9]))
    # K at step 100 is 0.45, past its final 0.3: 175% of its rise, said as such, not as "covered 175%".
    assert "already passed its final value (175% of its rise, falling back by step 300)" in overshoot
    flat = C.describe_formation(_formation([0.3, 0.2, 0.2, 0.1], [0.0, 0.6, 0.8, 0.9]))
    assert "The K-composition does not rise over these steps." in flat


def test_the_induction_path_is_found_by_measurement():
    induction = torch.tensor([[0.9, 0.0], [0.1, 0.7], [0.8, 0.2]])  # layer 0's 0.9 cannot compose: ignored
    previous = torch.tensor([[0.2, 0.6], [0.95, 0.1], [0.0, 0.0]])
    assert C.induction_path(induction, previous) == ((1, 0), (2, 0))  # the best previous head before layer 2
    with pytest.raises(ValueError, match="one layer"):
        C.induction_path(induction[:1], previous[:1])
