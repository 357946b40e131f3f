"""Models loaded beside the user's (training steps, other seeds, the census's untrained twin) live in the run cache,
under its memory budget, counted by the bytes of their weights, and leave it least recently used like a run."""
import pytest

import mha_viz.app.cache as cache
from mha_viz.contract import Model
from mha_viz.settings import settings


@pytest.fixture
def budget(monkeypatch):
    """A run cache of `mb` MB for the test, a fresh one afterwards."""
    def set_mb(mb: int):
        monkeypatch.setenv("MHA_VIZ_RUN_CACHE_MB", str(mb))
        settings.cache_clear()  # settings are read once per process
        cache.runs.cache_clear()
        return cache.runs()

    yield set_mb
    settings.cache_clear()
    cache.runs.cache_clear()


def test_a_side_model_is_loaded_once_and_counted_by_its_weights(budget):
    runs = budget(64)
    first = cache.side_model("tiny@400")
    assert cache.side_model("tiny@400") is first
    weights = sum(p.numel() * p.element_size() for p in first.lm.parameters())
    assert weights <= cache.model_bytes(first) == runs.kept_bytes() < 2 * weights  # parameters and a few buffers


def test_side_models_leave_least_recently_used_when_the_budget_is_full(budget):
    one = cache.model_bytes(cache.side_model("tiny@0"))
    runs = budget(max(1, int(2.5 * one) // 2**20 + 1))  # room for two tiny steps, not three
    cap = runs.budget // one
    names = [f"tiny@{s}" for s in (0, 400, 800, 1000)][: cap + 1]
    first = cache.side_model(names[0])
    for name in names[1:]:
        cache.side_model(name)
    assert runs.kept_bytes() <= runs.budget
    assert cache.side_model(names[0]) is not first  # dropped to make room, loaded again


def test_the_census_control_of_tiny_is_its_twin_as_a_side_model(budget):
    budget(64)
    assert cache.census_control(cache.side_model("tiny@0")) == "destroyed"  # the initialisation has no twin
    twin = cache.census_control(cache.side_model("tiny@400"))
    assert isinstance(twin, Model) and twin.name == "tiny-untrained"
    assert cache.side_model("tiny-untrained") is twin
