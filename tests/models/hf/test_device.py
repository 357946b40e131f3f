"""The device a transformers model runs on is chosen in one place (MHA_VIZ_DEVICE, `settings.torch_device`), and
what a run returns is on the CPU whatever it is. Only the CPU path runs here; the CUDA path is the same code."""
import pytest
import torch

from mha_viz import load_model
from mha_viz.settings import Settings, SettingsError, settings, torch_device


@pytest.fixture
def device_env(monkeypatch):
    def set_device(value):
        monkeypatch.setenv("MHA_VIZ_DEVICE", value)
        settings.cache_clear()
    yield set_device
    monkeypatch.delenv("MHA_VIZ_DEVICE", raising=False)
    settings.cache_clear()


def test_a_bad_value_names_the_variable_and_the_choices():
    with pytest.raises(SettingsError, match="MHA_VIZ_DEVICE='tpu' is not one of auto, cpu, cuda"):
        Settings.from_env({"MHA_VIZ_DEVICE": "tpu"})
    assert Settings.from_env({}).device == "auto"


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for CUDA where there is none")
def test_cuda_without_a_gpu_says_what_to_use(device_env):
    device_env("cuda")
    with pytest.raises(SettingsError, match="MHA_VIZ_DEVICE=cpu"):
        torch_device()


def test_a_folder_model_runs_where_the_setting_says_and_returns_cpu_tensors(device_env, user_folders):
    device_env("cpu")
    model = load_model(str(user_folders["llama"]))
    assert next(model._model.parameters()).device == torch_device() == torch.device("cpu")
    run = model.run("A small model reads this.", ablate={(0, 1)})
    assert run.attentions.device.type == "cpu" and run.output.device.type == "cpu"
