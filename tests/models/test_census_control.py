"""The census's control is resolved by its callers (analysis/ loads no model): "auto" is the untrained twin where
one ships, else inputs with the relation destroyed."""
from types import SimpleNamespace

import pytest

import mha_viz
from mha_viz.analysis.census_run import head_census
from mha_viz.contract import InputError, Model
from mha_viz.models.registry import census_control


def test_auto_is_the_untrained_twin_where_one_ships():
    loads = []
    got = census_control(SimpleNamespace(name="tiny#seed2"), "auto", load=lambda n: loads.append(n) or n)
    assert loads == ["tiny#seed2@0"] and got == "tiny#seed2@0"
    assert census_control(SimpleNamespace(name="tiny"), load=lambda n: n) == "tiny-untrained"


def test_auto_is_destroyed_inputs_without_a_twin_and_other_controls_pass_through():
    for name in ("minilm", "smollm2", "tiny-untrained", "tiny@0", "/some/folder"):
        assert census_control(SimpleNamespace(name=name), "auto", load=pytest.fail) == "destroyed"
    twin = object()
    assert census_control(SimpleNamespace(name="tiny"), twin, load=pytest.fail) is twin
    assert census_control(SimpleNamespace(name="tiny"), None, load=pytest.fail) is None


def test_the_analysis_census_refuses_auto_and_says_who_resolves_it():
    with pytest.raises(InputError, match="mha_viz.head_census"):
        head_census(SimpleNamespace(name="tiny"), control="auto")


def test_the_public_census_hands_the_twin_to_the_analysis(monkeypatch):
    from mha_viz.analysis import census_run

    seen = {}
    monkeypatch.setattr(census_run, "head_census", lambda model, **kw: seen.update(kw) or "census")
    assert mha_viz.head_census(mha_viz.load_model("tiny"), seed=1) == "census"
    assert isinstance(seen["control"], Model) and seen["control"].name == "tiny-untrained" and seen["seed"] == 1


def test_the_public_census_hands_in_the_texts_and_the_analysis_loads_none(monkeypatch):
    """Without texts the analysis reads the model's own examples through the contract and refuses a model with none,
    naming the fix; mha_viz.head_census hands in the shipped sentences for such a model."""
    from mha_viz.analysis import census_run
    from mha_viz.models.examples import shipped_examples

    bare = SimpleNamespace(name="bare", examples=lambda: [])
    with pytest.raises(InputError, match="texts="):
        census_run.default_texts(bare)
    seen = {}
    monkeypatch.setattr(census_run, "head_census", lambda model, **kw: seen.update(kw) or "census")
    mha_viz.head_census(bare, control=None)
    assert seen["texts"] == tuple(t for _, t, _ in shipped_examples()) and seen["texts"]
    tiny = mha_viz.load_model("tiny")
    mha_viz.head_census(tiny, control=None)
    assert seen["texts"] == tuple(t for _, t, _ in tiny.examples())
    mha_viz.head_census(tiny, texts=["one text."], control=None)
    assert seen["texts"] == ["one text."]
