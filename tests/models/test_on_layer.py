"""A run hands each layer's attention on as soon as it is known (`run(..., on_layer=...)`, models/interventions.py):
once per layer, in layer order, equal to `run.attentions[layer]`; a computed layer while the forward has not yet
run the layer above it (counted by hooks on the attention modules, as test_incremental counts them), a layer taken
over from an earlier run before any layer runs. On every adapter that resumes, and on one that does not (after its
forward)."""
from __future__ import annotations

import pytest
import test_incremental as inc
import torch

from mha_viz.models import interventions

ADAPTERS, counting, _texts = inc.ADAPTERS, inc.counting, inc._texts
models = inc.models  # the same fixture: the adapters' loaded models, one per name


@pytest.fixture(autouse=True)
def _no_earlier_runs():
    interventions._EARLIER.clear()
    yield
    interventions._EARLIER.clear()


def _recorder(calls):
    """on_layer that keeps (layer, weights, how many times each layer's attention had run by then)."""
    seen = []
    return seen, lambda layer, weights: seen.append((layer, weights.clone(), list(calls)))


@pytest.mark.parametrize("name", ADAPTERS)
def test_each_layer_is_handed_on_while_the_forward_goes_on(models, name):
    model = models(name)
    text, L = _texts(name)[0], model.n_layers
    with counting(model) as calls:
        seen, on_layer = _recorder(calls)
        run = model.run(text, on_layer=on_layer)
    assert [layer for layer, _, _ in seen] == list(range(L))
    for layer, weights, ran in seen:
        assert weights.dtype == torch.float32 and weights.device.type == "cpu"
        assert torch.equal(weights, run.attentions[layer]), layer
        # The layers below have run and this one's attention module is still going (its hook counts on return);
        # the layers above have not started: the page has the layer while they compute.
        assert ran == [1] * layer + [0] * (L - layer), (layer, ran)


@pytest.mark.parametrize("name", ADAPTERS)
def test_layers_taken_over_are_handed_on_before_any_layer_runs(models, name):
    model = models(name)
    text, L, H = _texts(name)[0], model.n_layers, model.n_heads
    model.run(text)  # kept: a toggle in the top layer takes layers 0..L-2 over
    with counting(model) as calls:
        seen, on_layer = _recorder(calls)
        run = model.run(text, ablate={(L - 1, H - 1)}, on_layer=on_layer)
    assert [layer for layer, _, _ in seen] == list(range(L))
    for layer, weights, ran in seen:
        assert torch.equal(weights, run.attentions[layer]), layer
        assert ran == [0] * L, (layer, ran)  # the top layer's module is still going when it hands it on


def test_an_adapter_that_cannot_resume_hands_every_layer_on_after_its_forward(models, monkeypatch):
    model = models("gpt2")
    monkeypatch.setattr(model, "can_resume", False)
    with counting(model) as calls:
        seen, on_layer = _recorder(calls)
        run = model.run(_texts("gpt2")[0], on_layer=on_layer)
    assert [layer for layer, _, _ in seen] == list(range(model.n_layers))
    for layer, weights, ran in seen:
        assert torch.equal(weights, run.attentions[layer]) and ran == [1] * model.n_layers


def test_what_on_layer_raises_ends_the_run(models):
    model = models("tiny")

    def fails(layer, weights):
        raise RuntimeError(f"stop at {layer}")

    with pytest.raises(RuntimeError, match="stop at 0"):
        model.run(_texts("tiny")[0], on_layer=fails)
