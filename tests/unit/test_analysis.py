"""Hand-computed cases for every function in mha_viz.analysis."""
import math

import pytest
import torch

from mha_viz import analysis as A
from mha_viz.contract import head_slices as S


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    # torch.testing.assert_close costs ~1 s of lazy imports on first use; this keeps the file fast
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert torch.allclose(actual.float(), expected.float(), atol=atol, rtol=rtol), f"\n{actual}\n!=\n{expected}"


def causal_softmax(scores: torch.Tensor) -> torch.Tensor:
    t = scores.shape[-1]
    above = torch.ones(t, t, dtype=torch.bool).triu(1)  # (Q, K)
    return torch.softmax(scores.masked_fill(above, float("-inf")), dim=-1)


# ---------------------------------------------------------------------------------------------- 1. ablation


def test_cosine_change_mean_pools_tokens():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # mean (0.5, 0.5)
    b = torch.tensor([[1.0, 0.0], [0.0, 3.0]])  # mean (0.5, 1.5)
    assert A.cosine_change(a, b) == pytest.approx(1 / math.sqrt(1.25), abs=1e-6)
    assert A.cosine_change(a, a) == pytest.approx(1.0, abs=1e-6)


def test_cosine_change_mask_selects_positions():
    a = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    b = torch.tensor([[1.0, 0.0], [-1.0, 2.0]])  # mean over both (0, 1): orthogonal to a
    assert A.cosine_change(a, b) == pytest.approx(0.0, abs=1e-6)
    assert A.cosine_change(a, b, mask=torch.tensor([True, False])) == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="no positions"):
        A.cosine_change(a, b, mask=torch.tensor([False, False]))


def test_token_change_absolute_and_relative():
    a = torch.tensor([[3.0, 4.0], [0.0, 1.0]])
    b = torch.tensor([[0.0, 0.0], [0.0, 3.0]])
    assert_close(A.token_change(a, b), torch.tensor([5.0, 2.0]))
    assert_close(A.token_change(a, b, relative=True), torch.tensor([1.0, 2.0]))


def test_next_token_kl_identical_is_zero_and_hand_case():
    logits = torch.randn(4, 11)
    assert A.next_token_kl(logits, logits) == pytest.approx(0.0, abs=1e-6)
    p = torch.tensor([0.5, 0.5]).log()
    q = torch.tensor([0.25, 0.75]).log() + 3.0  # a shift of the logits does not change softmax
    # KL(p || q) = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln(4/3); the reverse direction differs
    assert A.next_token_kl(p, q) == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)
    assert A.next_token_kl(q, p) == pytest.approx(0.25 * math.log(0.5) + 0.75 * math.log(1.5), abs=1e-6)


def test_next_token_kl_picks_position():
    a = torch.stack([torch.tensor([0.5, 0.5]).log(), torch.zeros(2)])  # (T=2, V=2)
    b = torch.stack([torch.tensor([0.25, 0.75]).log(), torch.zeros(2)])
    assert A.next_token_kl(a, b) == pytest.approx(0.0, abs=1e-6)  # last position: identical
    assert A.next_token_kl(a, b, position=0) == pytest.approx(0.5 * math.log(4 / 3), abs=1e-6)
    with pytest.raises(ValueError, match="out of range"):
        A.next_token_kl(a, b, position=5)


def test_topk_predictions():
    probs, ids = A.topk_predictions(torch.tensor([0.1, 0.6, 0.3]).log(), k=2)
    assert ids.tolist() == [1, 2]
    assert_close(probs, torch.tensor([0.6, 0.3]))
    with pytest.raises(ValueError, match="between 1"):
        A.topk_predictions(torch.zeros(3), k=4)


def test_kl_batch_equals_loop():
    torch.manual_seed(0)
    base, batch = torch.randn(5, 13), torch.randn(4, 5, 13)  # (T, V), (B, T, V)
    for position in (-1, 2):
        loop = torch.tensor([A.next_token_kl(base, batch[i], position) for i in range(4)])
        assert_close(A.kl_batch(base, batch, position), loop)
    assert_close(A.kl_batch(base[-1], batch[:, -1]), A.kl_batch(base, batch))
    assert (A.kl_batch(base, batch) > 0).all()


def test_one_minus_cos_batch_equals_loop():
    torch.manual_seed(1)
    base, outs = torch.randn(5, 8), torch.randn(3, 5, 8)
    mask = torch.tensor([False, True, True, False, True])
    for m in (None, mask):
        loop = torch.tensor([1 - A.cosine_change(base, outs[i], m) for i in range(3)])
        assert_close(A.one_minus_cos_batch(base, outs, m), loop)
    assert_close(A.one_minus_cos_batch(base, base[None]), torch.zeros(1), atol=1e-6, rtol=0)


def test_ablation_inputs_are_validated():
    with pytest.raises(ValueError, match="same shape"):
        A.cosine_change(torch.zeros(3, 4), torch.zeros(2, 4))
    with pytest.raises(TypeError, match="torch.as_tensor"):
        A.token_change([[1.0]], torch.zeros(1, 1))
    with pytest.raises(ValueError, match="leading batch axis"):
        A.kl_batch(torch.zeros(3, 5), torch.zeros(2, 5))


# ---------------------------------------------------------------------------------------------- 2. distances


def test_js_divergence_bounds_and_hand_case():
    p = torch.softmax(torch.randn(3, 6), -1)
    assert_close(A.js_divergence(p, p), torch.zeros(3))
    one_hots = torch.eye(2)
    assert A.js_divergence(one_hots[0], one_hots[1]).item() == pytest.approx(1.0)  # 1 bit
    # p = (1, 0), q = (1/2, 1/2): m = (3/4, 1/4); KL(p||m) = ln(4/3), KL(q||m) = ln(4/3) / 2
    js = A.js_divergence(torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]))
    assert js.item() == pytest.approx(0.75 * math.log(4 / 3) / math.log(2), abs=1e-6)
    assert torch.isfinite(js)


def test_pattern_shift_is_mean_js_over_rows():
    eye = torch.eye(2)
    att_a = torch.stack([eye, eye])[None]  # (1, 2, 2, 2)
    att_b = att_a.clone()
    att_b[0, 1, 1] = torch.tensor([1.0, 0.0])  # head 1, row 1: disjoint from before (1 bit); row 0 same
    assert_close(A.pattern_shift(att_a, att_b), torch.tensor([[0.0, 0.5]]))


def test_head_distance_matches_pairwise_js():
    torch.manual_seed(2)
    att = causal_softmax(torch.randn(2, 3, 5, 5))  # (L, H, T, T)
    att[1, 2] = att[0, 0]  # head n=5 copies head n=0
    dist = A.head_distance(att)
    flat = att.reshape(6, 5, 5)
    ref = torch.tensor([[A.js_divergence(flat[i], flat[j]).mean().item() for j in range(6)] for i in range(6)])
    assert_close(dist, ref, atol=1e-5, rtol=0)
    assert dist[0, 5] == pytest.approx(0.0, abs=1e-6)
    assert dist[0, 1] > 0.01
    assert torch.equal(dist, dist.T) and torch.equal(dist.diagonal(), torch.zeros(6))


def two_cluster_distances() -> torch.Tensor:
    group = torch.tensor([0, 1, 0, 1, 0, 1])  # interleaved on purpose
    dist = torch.where(group[:, None] == group[None, :], 0.1, 0.9)  # (6, 6)
    dist += 0.01 * torch.arange(6.0)[:, None] * torch.arange(6.0)[None, :] / 25  # break ties
    dist = (dist + dist.T) / 2
    dist.fill_diagonal_(0.0)
    return dist


def contiguous(order: torch.Tensor, members: set[int]) -> bool:
    spots = sorted(order.tolist().index(m) for m in members)
    return spots[-1] - spots[0] == len(members) - 1


def test_similarity_order_groups_clusters():
    order = A.similarity_order(two_cluster_distances())
    assert sorted(order.tolist()) == list(range(6))
    assert contiguous(order, {0, 2, 4}) and contiguous(order, {1, 3, 5})


def test_similarity_order_on_head_patterns():
    t = 6
    prev = torch.zeros(t, t)
    prev[0, 0] = 1.0
    prev[torch.arange(1, t), torch.arange(t - 1)] = 1.0  # every query on the previous token
    first = torch.zeros(t, t)
    first[:, 0] = 1.0  # every query on the first token
    torch.manual_seed(3)
    heads = [0.9 * (prev if h % 2 else first) + 0.1 * causal_softmax(torch.randn(t, t)) for h in range(6)]
    order = A.similarity_order(A.head_distance(torch.stack(heads).view(2, 3, t, t)))
    assert contiguous(order, {0, 2, 4}) and contiguous(order, {1, 3, 5})


def test_similarity_order_rejects_bad_input():
    with pytest.raises(ValueError, match="symmetric"):
        A.similarity_order(torch.tensor([[0.0, 1.0], [2.0, 0.0]]))
    with pytest.raises(ValueError, match="square"):
        A.similarity_order(torch.zeros(2, 3))


# ---------------------------------------------------------------------------------------------- 3. scores


def shifted_identity(t: int) -> torch.Tensor:
    att = torch.zeros(t, t)
    att[0, 0] = 1.0
    att[torch.arange(1, t), torch.arange(t - 1)] = 1.0
    return att  # (T, T), causal


def test_previous_token_pattern_scores():
    t = 5
    s = A.pattern_scores(shifted_identity(t)[None, None], causal=True)
    assert list(s) == list(A.SCORE_NAMES)
    assert s["previous"].shape == (1, 1)
    assert s["previous"].item() == pytest.approx(1.0)
    assert s["self"].item() == pytest.approx(1 / t)  # only query 0 attends to itself
    assert s["first"].item() == pytest.approx(1 / (t - 1))  # only query 1's previous token is the first
    assert s["next"].item() == 0.0
    assert s["entropy"].item() == pytest.approx(0.0, abs=1e-6)  # one-hot rows
    assert math.isnan(s["special"].item()) and math.isnan(s["duplicate"].item())


def test_next_self_first_scores_bidirectional():
    t = 4
    nxt = torch.zeros(t, t)
    nxt[torch.arange(t - 1), torch.arange(1, t)] = 1.0
    nxt[t - 1, 0] = 1.0
    att = torch.stack([nxt, torch.eye(t)])[None]  # (1, 2, T, T)
    s = A.pattern_scores(att, causal=False)
    assert s["next"][0].tolist() == pytest.approx([1.0, 0.0])
    assert s["self"][0].tolist() == pytest.approx([0.0, 1.0])
    assert s["first"][0].tolist() == pytest.approx([1 / 3, 0.0])  # query 3 wraps to the first token


def test_uniform_entropy_is_one_for_causal_and_bidirectional():
    for causal in (True, False):
        uniform = A.uniform_pattern(6, causal)[None, None]
        assert A.pattern_scores(uniform, causal=causal)["entropy"].item() == pytest.approx(1.0, abs=1e-6)
    # bidirectional normalisation treats a causal uniform pattern as partly concentrated
    causal_uniform = A.uniform_pattern(6, True)[None, None]
    assert A.pattern_scores(causal_uniform, causal=False)["entropy"].item() < 0.9


def test_special_punctuation_and_duplicate_scores():
    t = 5
    att = A.uniform_pattern(t, False).clone()  # (T, T), rows of 0.2
    att[2] = torch.tensor([0.6, 0.1, 0.1, 0.1, 0.1])
    att[3] = torch.tensor([0.1, 0.2, 0.3, 0.3, 0.1])
    ids = [5, 7, 5, 7, 9]  # queries 2 and 3 repeat keys 0 and 1
    s = A.pattern_scores(att[None, None], token_ids=ids, added=(4,))
    assert s["duplicate"].item() == pytest.approx((0.6 + 0.2) / 2)
    assert s["special"].item() == pytest.approx((0.2 * 3 + 0.1 * 2) / 5)  # key 4, every query sees it
    words = ["the", "cat", "the", "cat", "."]  # display labels work as ids: equal labels, same token
    s_words = A.pattern_scores(att[None, None], token_ids=words, tokens=words)
    assert s_words["duplicate"].item() == pytest.approx((0.6 + 0.2) / 2)
    assert s_words["punctuation"].item() == pytest.approx((0.2 * 3 + 0.1 * 2) / 5)
    assert math.isnan(s_words["special"].item())  # the tokenizer added nothing
    # A tokenizer-added position is special, never punctuation, and never a repeat's query or key.
    s = A.pattern_scores(att[None, None], token_ids=ids, added=(0, 4), tokens=words)
    assert math.isnan(s["punctuation"].item())
    assert s["duplicate"].item() == pytest.approx(0.2)  # only query 3 -> key 1 is left
    s = A.pattern_scores(att[None, None], token_ids=[1, 2, 3, 4, 5])
    assert math.isnan(s["duplicate"].item()) and math.isnan(s["special"].item())
    assert math.isnan(A.pattern_scores(att[None, None], token_ids=[])["duplicate"].item())  # no ids, no tokens


def test_pattern_scores_validates():
    with pytest.raises(ValueError, match="causal=False"):
        A.pattern_scores(A.uniform_pattern(3, False)[None, None], causal=True)
    with pytest.raises(ValueError, match="softmax"):
        A.pattern_scores(torch.ones(1, 1, 3, 3), causal=False)
    with pytest.raises(ValueError, match="run.token_ids"):
        A.pattern_scores(A.uniform_pattern(3, False)[None, None], token_ids=[1, 2])


def test_uniform_baselines_by_hand():
    b = A.uniform_baselines(4, causal=True)
    assert b["previous"] == pytest.approx((1 / 3 + 1 / 4) / 2)  # from query 2: previous_pairs
    assert b["next"] == 0.0 and b["entropy"] == pytest.approx(1.0)
    b = A.uniform_baselines(4, causal=False, token_ids=[1, 2, 1, 2])
    assert b["previous"] == pytest.approx(0.25) and b["duplicate"] == pytest.approx(0.25)


def test_top_badges_picks_largest_excess_over_baseline():
    t = 5
    first = torch.zeros(t, t)
    first[:, 0] = 1.0
    att = torch.stack([shifted_identity(t), first, A.uniform_pattern(t, True)])[None]  # (1, 3, T, T)
    scores = A.pattern_scores(att, causal=True)
    base = A.uniform_baselines(t, causal=True)
    assert A.top_badges(scores, base, 0, 0, n=1) == [("previous", pytest.approx(1.0))]
    assert [name for name, _ in A.top_badges(scores, base, 0, 1)] == ["first"]
    assert A.top_badges(scores, base, 0, 2) == []  # uniform attention earns no badge
    with pytest.raises(ValueError, match="does not exist"):
        A.top_badges(scores, base, 1, 0)


def test_describe_score_words_a_measurement():
    assert A.describe_score("previous", 0.62) == "62% of attention goes to the previous token on this input."
    assert "earlier occurrences of the same token" in A.describe_score("duplicate", 0.5)
    assert A.describe_score("duplicate", float("nan")).startswith("Not measurable on this input")
    assert "0.85 of its maximum" in A.describe_score("entropy", 0.85)
    with pytest.raises(ValueError, match="previous"):
        A.describe_score("det→noun", 0.5)  # needs a relation's gold pairs: not a score of one input


# ---------------------------------------------------------------------------------------------- 4. rollout


def test_rollout_by_hand():
    a0 = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.0, 0.5, 0.5]])
    a1 = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    out = A.rollout(torch.stack([a0, a1])[:, None])  # (L=2, H=1, 3, 3)
    r0 = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.0, 0.25, 0.75]])  # 0.5 A + 0.5 I
    # (0.5 A1 + 0.5 I) = [[1, 0, 0], [0, 1, 0], [0, .5, .5]], applied after layer 0: row 2 mixes rows 1, 2 of r0
    r1 = torch.tensor([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.125, 0.5, 0.375]])
    assert_close(out, torch.stack([r0, r1]))
    assert_close(out.sum(-1), torch.ones(2, 3))


def test_rollout_averages_kept_heads_only():
    a0 = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    att = torch.stack([a0, torch.eye(2)])[None]  # (1, 2, 2, 2)
    assert_close(A.rollout(att)[0], torch.tensor([[1.0, 0.0], [0.25, 0.75]]))  # heads averaged
    assert_close(A.rollout(att, keep=torch.tensor([[1.0, 0.0]]))[0], torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    assert_close(A.rollout(att, keep=torch.zeros(1, 2))[0], torch.eye(2))  # residual only
    with pytest.raises(ValueError, match="head_keep_mask"):
        A.rollout(att, keep=torch.ones(2, 2))


# ---------------------------------------------------------------------------------------------- 5. norm view


def test_norm_view_two_heads_by_hand():
    att = torch.tensor([[[0.5, 0.5], [1.0, 0.0]], [[0.2, 0.8], [0.6, 0.4]]])  # (H=2, Q=2, K=2)
    values = torch.tensor([[[1.0], [2.0]], [[3.0], [0.0]]])  # (H, K, dh=1)
    w_o = torch.tensor([[[3.0, 4.0]], [[1.0, 0.0]]])  # (H, dh, D=2)
    # ||f||: head 0 keys (3,4)->5, (6,8)->10; head 1 keys (3,0)->3, (0,0)->0
    expected = torch.tensor([[[2.5, 5.0], [5.0, 0.0]], [[0.6, 0.0], [1.8, 0.0]]])
    assert_close(A.norm_view(att, values, w_o), expected)


def test_norm_view_helpers_match_a_real_attention_layer():
    torch.manual_seed(4)
    t, d, n_heads, dh = 4, 6, 2, 3
    x = torch.randn(t, d)
    v_proj, o_proj = torch.nn.Linear(d, n_heads * dh), torch.nn.Linear(n_heads * dh, d)
    att = torch.softmax(torch.randn(n_heads, t, t), -1)  # (H, Q, K)
    with torch.no_grad():
        v = v_proj(x)  # (K, H*dh)
        ctx = att @ v.view(t, n_heads, dh).transpose(0, 1)  # (H, Q, dh)
        out = o_proj(ctx.transpose(0, 1).reshape(t, n_heads * dh))  # (Q, D) head outputs side by side
        values, w_o = S.split_heads(v, n_heads), S.out_proj_per_head(o_proj.weight, n_heads)
        f = torch.einsum("hkd,hdm->hkm", values, w_o)  # (H, K, D)
        assert_close(torch.einsum("hqk,hkm->qm", att, f) + o_proj.bias, out)  # sum of alpha f(x) + b_O
        assert_close(A.norm_view(att, values, w_o), att * f.norm(dim=-1)[:, None, :])


def test_split_heads_and_repeat_kv_for_grouped_query():
    v = torch.arange(8.0).view(2, 4)  # (K=2, H_kv=2 * dh=2)
    heads = S.repeat_kv(S.split_heads(v, 2), n_heads=4)  # (4, 2, 2)
    assert_close(heads[0], heads[1])
    assert_close(heads[2], torch.tensor([[2.0, 3.0], [6.0, 7.0]]))
    with pytest.raises(ValueError, match="H_kv dividing 3"):
        S.repeat_kv(S.split_heads(v, 2), n_heads=3)
    with pytest.raises(ValueError, match="divisible by 3"):
        S.split_heads(v, 3)
    with pytest.raises(ValueError, match="repeat_kv"):
        A.norm_view(torch.eye(2)[None], torch.ones(2, 2, 1), torch.ones(2, 1, 3))


# ---------------------------------------------------------------------------------------------- 6. display


def test_hide_positions_renormalises_rows():
    att = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.25, 0.25], [0.2, 0.2, 0.6]])
    kept = A.hide_positions(att, torch.tensor([False, True, True]))
    assert_close(kept, torch.tensor([[0.5, 0.5], [0.25, 0.75]]))
    batch = A.hide_positions(torch.softmax(torch.randn(2, 3, 5, 5), -1), torch.tensor([1, 0, 1, 1, 0]))
    assert batch.shape == (2, 3, 3, 3)
    assert_close(batch.sum(-1), torch.ones(2, 3, 3))


def test_merge_word_pieces_by_hand():
    att = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0], [0.1, 0.1, 0.8]])
    merged = A.merge_word_pieces(att, [[0], [1, 2]])
    # to a word: sum over its pieces; from a word: mean over its pieces
    assert_close(merged, torch.tensor([[0.2, 0.8], [0.35, 0.65]]))
    many = A.merge_word_pieces(torch.softmax(torch.randn(2, 4, 6, 6), -1), [[0], [1, 2, 3], [4, 5]])
    assert_close(many.sum(-1), torch.ones(2, 4, 3))
    with pytest.raises(ValueError, match="word_groups"):
        A.merge_word_pieces(att, [[0], [1]])


def test_word_groups_for_each_tokenizer():
    wordpiece = ["[CLS]", "play", "##ing", "fast", "[SEP]"]
    assert A.word_groups(wordpiece) == [[0], [1, 2], [3], [4]]
    sentencepiece = ["<s>", "▁Hel", "lo", "▁world", "."]
    assert A.word_groups(sentencepiece) == [[0], [1, 2], [3], [4]]
    bpe = ["<|im_start|>", "user", "Ġcat", "s"]
    assert A.word_groups(bpe) == [[0], [1], [2, 3]]
    assert A.word_groups(["a", "b", "c"], starts=[True, False, True]) == [[0, 1], [2]]
    assert A.word_groups(["x", "##y", "##z"], special=[1]) == [[0], [1], [2]]
    assert A.word_labels(wordpiece, A.word_groups(wordpiece)) == ["[CLS]", "playing", "fast", "[SEP]"]
    assert A.word_labels(sentencepiece, [[1, 2], [3, 4]]) == ["Hello", "world."]


def test_word_groups_keep_punctuation_and_lines_apart():
    # Byte-level labels as the adapter decodes them: a leading space starts a word.
    decoded = ["The", " na", "ïve", ",", "\n", "caf", "é", " end", "!", "\n\n", "x"]
    assert A.word_groups(decoded) == [[0], [1, 2], [3], [4], [5, 6], [7], [8], [9], [10]]
    wordpiece = ["[CLS]", "3", "##.", "##5", "km", "##!", "[SEP]"]
    assert A.word_groups(wordpiece) == [[0], [1], [2], [3], [4], [5], [6]]
    # A word never runs onto the next line, even when the next piece carries no start marker.
    assert A.word_groups(["▁a", "b", "<0x0A>", "c", "▁d"]) == [[0, 1], [2], [3], [4]]


def test_duplicate_induction_and_special_equal_their_plain_formulas():
    # The registry builds masks from repeat pairs; on random attention with many repeated tokens and random
    # tokenizer-added positions, each equals its formula written out here with loops.
    torch.manual_seed(0)
    for causal in (True, False):
        t = 40
        att = torch.rand(3, 4, t, t)  # (L, H, Q, K)
        att = att.tril() if causal else att
        att = att / att.sum(-1, keepdim=True)
        ids = torch.randint(0, 8, (t,)).tolist()  # 8 distinct tokens in 40 positions: many repeats
        added = [i for i in range(t) if torch.rand(()) > 0.8]
        s = A.pattern_scores(att, ids, added, causal=causal)
        content = [i not in added for i in range(t)]
        dup, ind = torch.zeros(t, t, dtype=torch.bool), torch.zeros(t, t, dtype=torch.bool)  # (Q, K)
        for q in range(t):
            for k in range(q):
                if content[q] and content[k] and ids[k] == ids[q]:
                    dup[q, k] = True
                    if k + 1 < q and content[k + 1]:
                        ind[q, k + 1] = True
        for name, mask in (("duplicate", dup), ("induction", ind)):
            rows = mask.any(-1)  # (Q,)
            torch.testing.assert_close(s[name], (att * mask.float()).sum(-1)[..., rows].mean(-1))
        keys = torch.tensor([not c for c in content])  # (K,)
        seen = keys[None, :] & (torch.ones(t, t).tril().bool() if causal else torch.ones(t, t).bool())  # (Q, K)
        rows = seen.any(-1)
        torch.testing.assert_close(s["special"], (att * seen.float()).sum(-1)[..., rows].mean(-1))


def test_checks_still_catch_nan_inf_and_negative_weights():
    att = A.uniform_pattern(4, False)[None, None].clone()  # (1, 1, T, T)
    for bad, message in ((float("nan"), "NaN or inf"), (float("inf"), "NaN or inf"), (-0.1, "negative")):
        broken = att.clone()
        broken[0, 0, 1, 2] = bad
        with pytest.raises(ValueError, match=message):
            A.pattern_scores(broken, causal=False)


def test_nearby_score_equals_its_formula():
    """The registered nearby: a band of width 2 either side scores 1, the baseline is uniform attention's, and on
    random attention it equals the formula written out (content queries from 2 on, content keys 1-2 away, never
    position 0)."""
    t = 12
    pos = torch.arange(t)
    dist = (pos[:, None] - pos[None, :]).abs()  # (Q, K)
    band = ((dist >= 1) & (dist <= 2)).float()  # (Q, K)
    band = band / band.sum(-1, keepdim=True)
    att = torch.stack([band, torch.softmax(torch.randn(t, t), -1)])[None]  # (1, 2, T, T)
    added = (t - 1,)  # a trailing [SEP]: neither a query nor a key of the score
    scores = A.pattern_scores(att, added=added)
    mask = torch.zeros(t, t, dtype=torch.bool)  # (Q, K)
    for q in range(2, t - 1):
        for k in range(1, t - 1):
            mask[q, k] = 1 <= abs(q - k) <= 2
    ref = (att * mask).sum(-1)[..., 2:t - 1].mean(-1)  # (1, 2)
    torch.testing.assert_close(scores["nearby"], ref)
    assert scores["nearby"][0, 0] > 0.9
    base = A.uniform_baselines(t, False, added=added)
    assert base["nearby"] == pytest.approx(float((mask.float() / t).sum(-1)[2:t - 1].mean()))
    assert [name for name, _ in A.top_badges(scores, base, 0, 0, n=1)] == ["nearby"]
