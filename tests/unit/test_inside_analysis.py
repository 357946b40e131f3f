"""The measures and figures of the token views on made-up tensors, where the right answer is known."""
import numpy as np
import torch

from mha_viz import analysis, plotting


def test_combine_heads_splits_the_total_length_between_heads_and_bias():
    g = torch.Generator().manual_seed(0)
    contributions, bias = torch.randn(5, 16, generator=g), torch.randn(16, generator=g)  # (H, D), (D,)
    combo = analysis.combine_heads(contributions, bias)
    assert torch.allclose(combo.total, contributions.sum(0) + bias)
    assert abs(float(combo.along.sum()) + combo.bias_along - combo.total_norm) < 1e-4
    assert torch.allclose(combo.norms, contributions.norm(dim=-1))
    cos = torch.nn.functional.cosine_similarity(contributions, combo.total[None], dim=-1)  # (H,)
    assert torch.allclose(combo.cosine, cos, atol=1e-5)


def test_a_silent_head_has_zero_norm_share_and_cosine():
    contributions = torch.tensor([[3.0, 4.0], [0.0, 0.0]])  # (H, D)
    combo = analysis.combine_heads(contributions, None)
    assert combo.norms.tolist() == [5.0, 0.0] and combo.along[1] == 0 and combo.cosine[1] == 0
    assert combo.bias_along == 0 and combo.total_norm == 5.0


def test_weighted_values_sum_to_the_attention_output():
    g = torch.Generator().manual_seed(1)
    weights, v = torch.softmax(torch.randn(6, generator=g), -1), torch.randn(6, 4, generator=g)  # (K,), (K, dh)
    assert torch.allclose(analysis.weighted_values(weights, v).sum(0), weights @ v, atol=1e-6)
    assert torch.allclose(analysis.value_norms(v), v.norm(dim=-1))


def test_update_sizes():
    sizes = analysis.update_sizes(torch.tensor([2.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert sizes["resid"] == 2 and sizes["update"] == 1 and sizes["ratio"] == 0.5 and sizes["cosine"] == 0
    assert abs(sizes["after"] - 5 ** 0.5) < 1e-6


def test_follow_figure_puts_each_head_in_its_own_colour_band():
    rows = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.25, 0.25]])  # (R, K)
    fig = plotting.follow_figure(["a", "b", "<c>"], rows, ["L0 H0", "L0 H1"], [0, 1], [False, True], 1, "t")
    z = np.asarray(fig.data[0].z)
    assert (z[0] < 0.5).all() and (z[1] >= 0.5).all()  # row r inside [r / R, (r + 1) / R)
    assert z[0, 1] > z[0, 0]  # more weight, more colour
    assert fig.data[0].colorscale[1][1] == plotting.head_colour(0)
    assert fig.data[0].colorscale[-1][1] == plotting.OFF_COLOUR  # the switched-off head is grey
    assert list(fig.data[0].y) == ["L0 H0", "L0 H1 (off)"]
    assert fig.data[0].text[0][2] == "&lt;c&gt;"  # tokens are text, never HTML
    assert np.allclose(np.asarray(fig.data[0].customdata), rows.numpy())  # hover shows the real weight


def test_follow_figure_of_a_long_text_sends_no_per_cell_words():
    n = 300
    rows = torch.softmax(torch.randn(27, n, generator=torch.Generator().manual_seed(3)), -1)  # (R, K)
    fig = plotting.follow_figure([f"w{i}" for i in range(n)], rows, [f"H{i}" for i in range(27)], list(range(27)),
                                 [False] * 27, 5, "t")
    assert fig.data[0].text is None and fig.data[0].texttemplate is None
    assert len(fig.data[0].x) == n and fig.layout.xaxis.showticklabels  # the tokens move to the axis instead


def test_pattern_pick_figure_makes_every_cell_a_click_on_its_row():
    pattern = torch.softmax(torch.randn(4, 4, generator=torch.Generator().manual_seed(2)), -1)  # (Q, K)
    fig = plotting.pattern_pick_figure(pattern, ["a", "b", "c", "d"], "t", query=1)
    heat, clicks = fig.data
    assert heat.hoverinfo == "skip" and clicks.type == "scatter"  # plotly clicks only points that take hover
    assert list(clicks.customdata) == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    assert list(clicks.y[4:8]) == ["b"] * 4 and float(clicks.text[5]) == round(float(pattern[1, 1]), 3)
    assert fig.layout.shapes[0].y0 == 0.5 and fig.layout.shapes[0].y1 == 1.5  # the query row outlined
    n = plotting.CLICKABLE_ROWS_UP_TO + 1
    assert len(plotting.pattern_pick_figure(torch.eye(n), [str(i) for i in range(n)], "t", 0).data) == 1


def test_follow_cells_hold_their_words_at_the_narrowest_plot():
    """Follow a token writes each token in its cell; at 1000 px "cabinet" ran into the next cell. A word that does
    not fit the cell (at the narrowest plot, FOLLOW_PLOT_PX) is written at 9 px and cut with "…"; short words stay
    whole at 10 px; past three characters a cell the words go to the axis."""
    short = ["a", "b", "cd"] * 6
    assert plotting.cell_words(short) == (short, 10)
    tokens = ["[CLS]", "the", "keys", "cabinet"] + ["x"] * 14  # 18 cells of ~22 px
    words, font = plotting.cell_words(tokens)
    room = int((plotting.FOLLOW_PLOT_PX / 18 - 2) / (plotting._CHAR_EM * 9))
    assert font == 9 and words[3] == "cabinet"[:room - 1] + "…" and words[1] == "the"
    assert all(len(w) <= room for w in words)
    assert plotting.cell_words(["word"] * 60) == (None, 10)
    fig = plotting.follow_figure(tokens, torch.rand(2, 18), ["L0 H0", "L0 H1"], [0, 1], [False, False], 0, "t")
    assert list(fig.data[0].text[0]) == words and fig.data[0].textfont.size == 9
