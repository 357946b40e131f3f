"""The census figures draw the census's numbers: every head once, its baselines in the legend, clicks carry heads."""
import numpy as np
import torch

from mha_viz import plotting


def test_census_map_draws_every_head_with_its_baselines():
    scores = torch.arange(12, dtype=torch.float32).view(3, 4) / 12  # (L, H)
    fig = plotting.census_map(scores, "previous, 24 random sequences", 0.1, "best offset -1: 0.51")
    heat, points = fig.data
    np.testing.assert_allclose(np.asarray(heat.z), scores.numpy())
    assert "uniform 0.10" in heat.colorbar.title.text and "best offset -1: 0.51" in heat.colorbar.title.text
    heads = {tuple(int(v) for v in row) for row in np.asarray(points.customdata)}
    assert heads == {(l, h) for l in range(3) for h in range(4)}


def test_census_scatter_places_each_head_at_its_two_scores():
    x = torch.rand(2, 3)
    y = torch.rand(2, 3)
    fig = plotting.census_scatter(x, y, "previous", "induction", 0.1, 0.2)
    (trace,) = fig.data
    np.testing.assert_allclose(np.asarray(trace.x), x.flatten().numpy())
    np.testing.assert_allclose(np.asarray(trace.y), y.flatten().numpy())
    assert list(trace.text) == [f"L{l} H{h}" for l in range(2) for h in range(3)]
    assert {s.x0 for s in fig.layout.shapes if s.xref == "x"} == {0.1}


def test_seed_maps_share_one_scale():
    maps = [torch.rand(3, 4) for _ in range(3)]
    fig = plotting.census_maps_side_by_side(maps, ["tiny", "tiny#seed1", "tiny#seed2"])
    assert len(fig.data) == 3 and all(t.zmin == 0 and t.zmax == 1 for t in fig.data)
    for trace, m in zip(fig.data, maps):
        np.testing.assert_allclose(np.asarray(trace.z), m.numpy(), rtol=1e-6)
