"""MHA_VIZ_DTYPE and MHA_VIZ_DEVICE parsed as every setting is (mha_viz/settings.py): a bad value names the variable,
its value and one that works; float16 on the CPU is an error, not a silent fallback. The engine's batch budget on a
CUDA device is read from its memory (models/schedule.py), checked here with a faked reading."""
import pytest
import torch

from mha_viz.models import schedule
from mha_viz.settings import Settings, SettingsError, settings, torch_dtype


@pytest.fixture
def env(monkeypatch):
    def set_env(**values):
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        settings.cache_clear()
    yield set_env
    settings.cache_clear()


def test_dtype_defaults_to_float32_and_takes_each_format():
    assert Settings.from_env({}).dtype == "float32"
    for value in ("float32", "bfloat16", "float16", " BFloat16 "):
        env = {"MHA_VIZ_DTYPE": value, "MHA_VIZ_DEVICE": "cuda" if "16" in value else "auto"}
        assert Settings.from_env(env).dtype == value.strip().lower()


def test_a_bad_dtype_names_the_variable_the_value_and_one_that_works():
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"MHA_VIZ_DTYPE": "fp8"})
    (problem,) = err.value.problems
    assert problem == "MHA_VIZ_DTYPE='fp8' is not one of float32, bfloat16, float16 (e.g. MHA_VIZ_DTYPE=float32)."


def test_float16_on_the_cpu_is_refused_with_what_to_use_instead():
    with pytest.raises(SettingsError, match="MHA_VIZ_DTYPE=float16 needs a CUDA device.*MHA_VIZ_DTYPE=bfloat16"):
        Settings.from_env({"MHA_VIZ_DTYPE": "float16", "MHA_VIZ_DEVICE": "cpu"})


def test_bfloat16_on_the_cpu_works_with_a_warning_that_it_is_slower():
    found = Settings.from_env({"MHA_VIZ_DTYPE": "bfloat16", "MHA_VIZ_DEVICE": "cpu"})
    (warning,) = found.warnings
    assert found.dtype == "bfloat16" and "slower than float32" in warning and "MHA_VIZ_DTYPE=float32" in warning
    assert Settings.from_env({"MHA_VIZ_DTYPE": "bfloat16", "MHA_VIZ_DEVICE": "cuda"}).warnings == ()


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto is a GPU here, where float16 works")
def test_float16_with_auto_and_no_gpu_is_refused_when_models_are_placed(env):
    env(MHA_VIZ_DTYPE="float16", MHA_VIZ_DEVICE="auto")  # auto may be a GPU: only torch can tell
    Settings.from_env()  # the variables alone are fine
    with pytest.raises(SettingsError, match="needs a CUDA device"):
        settings()  # what the page reads first: it shows this as "This server's settings are wrong"
    with pytest.raises(SettingsError, match="needs a CUDA device"):
        torch_dtype()


def test_torch_dtype_is_the_setting(env):
    env(MHA_VIZ_DTYPE="bfloat16", MHA_VIZ_DEVICE="cpu")
    assert torch_dtype() == torch.bfloat16
    env(MHA_VIZ_DTYPE="float32")
    assert torch_dtype() == torch.float32


def test_both_are_documented_for_the_readme():
    documented = dict(Settings.documented())
    assert "the in-repo ones included" in documented["MHA_VIZ_DEVICE"]
    assert "stay float32" in documented["MHA_VIZ_DTYPE"]


def test_the_cpu_budget_is_the_fixed_one():
    assert schedule.budget("cpu") == schedule.budget(None) == schedule.CPU_BUDGET
    assert schedule.CPU_BUDGET == schedule.Budget(schedule.BATCH_TOKENS, schedule.BATCH_ATTENTION,
                                                  schedule.WAVE_TOKENS)


def test_the_cuda_budget_is_a_share_of_the_memory_this_process_may_still_use():
    gib = 2**30
    # 40 GiB free on the device, plus 2 of the 6 GiB torch's allocator holds that no tensor uses: 42 GiB.
    room = schedule.cuda_budget(free=40 * gib, reserved=6 * gib, allocated=4 * gib)
    assert room.attention == int(42 * gib * schedule.CUDA_MEMORY_SHARE) // 4  # float32 weights, 4 bytes each
    assert room.tokens == room.wave_tokens == schedule.CUDA_BATCH_TOKENS
    # A nearly full device still gets a batch of one small head's weights; odd readings are not negative.
    assert schedule.cuda_budget(free=0, reserved=0, allocated=0).attention == 128 * 128
    assert schedule.cuda_budget(free=-1, reserved=1, allocated=5).attention == 128 * 128


def test_budget_on_a_cuda_device_reads_its_memory(monkeypatch):
    gib = 2**30
    asked = []

    def mem_get_info(device):
        asked.append(device)
        return 8 * gib, 80 * gib  # (free, total) as torch.cuda gives them

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: 3 * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: 1 * gib)
    room = schedule.budget(torch.device("cuda", 0))
    assert asked == [torch.device("cuda", 0)]
    assert room == schedule.cuda_budget(8 * gib, 3 * gib, 1 * gib)
    assert room.attention == int(10 * gib * schedule.CUDA_MEMORY_SHARE) // 4
