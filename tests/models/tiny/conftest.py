"""Shared fixtures of the tiny model's tests."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Many tiny forwards: one thread avoids oversubscription when other processes share the 2 cores. Modules that
    want it say `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
