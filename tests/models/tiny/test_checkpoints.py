"""Saved training steps: `checkpoints(name)` lists them, `load_model("tiny@N")` loads one through the contract,
step 0 is the seeded initialisation and the last step is the shipped `tiny`."""
import pytest
import torch

from mha_viz import checkpoints, load_model
from mha_viz.contract import ModelLoadError
from mha_viz.models.tiny.adapter import checkpoint_steps, load_tiny
from mha_viz.models.tiny.architecture import TinyConfig
from mha_viz.models.tiny.train import TrainConfig, train

from helpers import assert_valid

SMALL = TinyConfig(n_layers=2, n_heads=4, d_model=32, max_len=32, d_mlp=64)
TEXT = "the keys to the cabinet are on the table ."
FP16 = dict(atol=2e-3, rtol=0)  # float16 checkpoints against float32 weights: patterns agree to ~1e-3


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny")
    train(out, SMALL, TrainConfig(steps=12, batch_size=8, random_share=0.3, checkpoints=(0, 5, 10)), quiet=True)
    return out


def test_steps_of_a_short_run_load_and_keep_the_contract(short_run):
    assert checkpoint_steps(short_run) == [0, 5, 10, 12]
    for step in checkpoint_steps(short_run):
        model = load_tiny(folder=short_run, step=step)
        assert model.info.name == f"tiny@{step}"
        assert_valid(model, model.run(TEXT))
    first, untrained = load_tiny(folder=short_run, step=0), load_tiny(trained=False, folder=short_run)
    torch.testing.assert_close(first.run(TEXT).attentions, untrained.run(TEXT).attentions, **FP16)
    last, trained = load_tiny(folder=short_run, step=12), load_tiny(folder=short_run)
    torch.testing.assert_close(last.run(TEXT).attentions, trained.run(TEXT).attentions, **FP16)
    # Training moved the patterns between the first and the last step.
    assert not torch.allclose(first.run(TEXT).attentions, last.run(TEXT).attentions, atol=1e-3)


def test_a_step_that_was_not_saved_says_which_were(short_run):
    with pytest.raises(ModelLoadError, match="0, 5, 10, 12"):
        load_tiny(folder=short_run, step=7)


def test_models_without_checkpoints_have_none(tmp_path):
    assert checkpoint_steps(tmp_path) == []
    assert checkpoints("minilm") == [] and checkpoints("some/hub-model") == []


def test_every_shipped_step_loads_by_name_and_runs():
    """The registry path the page and links use: `load_model("tiny@N")` for every saved step of the shipped run."""
    steps = checkpoints("tiny")
    assert len(steps) >= 6 and steps[0] == 0
    text = "the keys to the cabinet are on the table"
    last = load_model("tiny").run(text)
    for step in steps:
        model = load_model(f"tiny@{step}")
        run = model.run(text)
        assert_valid(model, run)
        assert model.info.name == f"tiny@{step}"
    # The last step is the shipped model (stored in float16, so equal to that precision), the first is not.
    assert torch.allclose(load_model(f"tiny@{steps[-1]}").run(text).attentions, last.attentions, atol=2e-2)
    assert not torch.allclose(load_model("tiny@0").run(text).attentions, last.attentions, atol=2e-2)
