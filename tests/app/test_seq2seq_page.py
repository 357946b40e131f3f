"""An encoder-decoder folder on the page: the Layer view shows the encoder's heads, a switch reads the decoder's
prediction along the target, and every view either works or says what it cannot do, never a traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import app_at

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

VIEWS = ("Ablation effects", "Rollout & norms", "Inside a head", "Census", "Circuits", "Patching", "Layer")


def test_t5_folder_switches_a_head_and_opens_every_view(tmp_path: Path):
    from tests.models.hf.test_seq2seq import CONFIGS, _tokenizer

    torch.manual_seed(0)
    transformers.T5ForConditionalGeneration(CONFIGS["t5"]()).save_pretrained(tmp_path)
    _tokenizer(tmp_path)
    at = app_at()
    at.sidebar.selectbox(key="model_choice").set_value("custom").run()
    at.sidebar.text_input(key="custom_id").input(str(tmp_path)).run()
    assert not at.exception, at.exception
    assert len(at.toggle) == 4  # one encoder layer's heads
    at.toggle[1].set_value(False).run()
    assert not at.exception, at.exception
    for view in VIEWS:
        at.session_state["view"] = view
        at.run()
        assert not at.exception, (view, at.exception)
