"""Models loaded beside the user's (training steps, other seeds, the census's untrained twin) live in the run cache,
under its memory budget, counted by the bytes of their weights, and leave it least recently used like a run."""
import pytest

import mha_viz.app.cache as cache
import mha_viz.app.run_cache as run_cache
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
    assert weights <= run_cache.model_bytes(first) == runs.kept_bytes() < 2 * weights  # parameters and a few buffers


def test_side_models_leave_least_recently_used_when_the_budget_is_full(budget):
    one = run_cache.model_bytes(cache.side_model("tiny@0"))
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


def test_a_training_steps_circuits_are_a_side_result_beside_its_side_model(budget):
    from mha_viz.app.views.circuits import step_circuits

    runs = budget(64)
    first = step_circuits("tiny@400")
    assert step_circuits("tiny@400") is first  # measured once
    model = runs.peek(("side-model", "tiny@400"))
    assert model is not None  # loaded through side_model, not beside the budget
    held = run_cache.tensor_bytes(first)
    assert held >= sum(first.composition[m].numel() * 4 for m in "qkv")  # its (L, H, L, H) maps at least
    assert runs.kept_bytes() == run_cache.model_bytes(model) + held


def test_a_timeline_of_steps_keeps_only_what_fits(budget):
    """Every step's model and circuits go into one budget and leave least recently used, as runs do."""
    from mha_viz.app.views.circuits import step_circuits

    one = run_cache.model_bytes(cache.side_model("tiny@0"))
    runs = budget(max(1, int(2.5 * one) // 2**20 + 1))  # room for two steps' models, not four
    steps = [f"tiny@{s}" for s in (0, 400, 800, 1000)]
    assert 4 * one > runs.budget
    first = step_circuits(steps[0])
    for name in steps[1:]:
        step_circuits(name)
    assert runs.kept_bytes() <= runs.budget
    assert runs.peek(("side-model", steps[0])) is None  # the first step's model was dropped to make room
    assert step_circuits(steps[0]) is not first  # and its circuits: measured again


def test_the_census_loads_other_seeds_as_side_models(budget):
    from mha_viz.app.views import census

    runs = budget(64)
    seed = census._seed_model("tiny", "tiny#seed1")
    assert seed is cache.side_model("tiny#seed1")
    assert runs.kept_bytes() == run_cache.model_bytes(seed)
