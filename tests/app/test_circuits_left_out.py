"""What a model's circuits leave out beyond what every model's do (norms between layers, biases, MLPs): what its
attention does to the projected queries, keys or values that weights per head cannot carry, as the model declares
it (`Model.weights_leave_out`, read from the attention modules and config by hf/projections.py), said on the
Circuits page where the page says what is left out. OLMo's clip_qkv clamps q, k and v (tests/models/hf/expected.py
marks its circuits check xfail for that reason); Qwen3 normalises its queries and keys (qk-norm)."""
from __future__ import annotations

import dataclasses

import pytest

import mha_viz
from mha_viz.app.views.circuits import left_out_words
from tests.models.hf import matrix
from tests.models.hf.architectures import BY_NAME, build

from helpers import app_at
from page_steps import open_view


def _folder(tmp_path_factory, name: str, **args):
    arch = BY_NAME[name]
    if args:
        arch = dataclasses.replace(arch, args={**arch.args, **args})
    with matrix.offline():
        return build(arch, tmp_path_factory.mktemp("left_out") / name.replace(" ", "_"))


@pytest.fixture(scope="module")
def olmo(tmp_path_factory):
    return _folder(tmp_path_factory, "OLMo")  # clip_qkv=0.05 (architectures.py)


def _circuits(folder):
    with matrix.offline():
        model = mha_viz.load_model(str(folder))
        return model, mha_viz.circuits(model)


def test_olmo_declares_its_clip_and_the_words_say_it(olmo):
    model, c = _circuits(olmo)
    assert len(model.weights_leave_out()) == 1 and model.weights_leave_out()[0].startswith("clip_qkv")
    assert c.left_out == model.weights_leave_out()
    words = left_out_words(c)
    assert words.startswith("The norms between heads are left out")  # what every model's circuits leave out first
    assert "clip_qkv: queries, keys and values are clamped to ±0.05 after the projection" in words
    assert "the maps differ from what the model computes" in words


def test_the_note_follows_the_config_not_the_name(tmp_path_factory):
    _, unclipped = _circuits(_folder(tmp_path_factory, "OLMo", clip_qkv=None))
    assert unclipped.left_out == ()
    assert "This model's attention also" not in left_out_words(unclipped)
    _, qwen3 = _circuits(_folder(tmp_path_factory, "Qwen3"))
    assert len(qwen3.left_out) == 1 and qwen3.left_out[0].startswith("qk-norm: a norm on each query and key")
    _, gpt2 = _circuits(_folder(tmp_path_factory, "GPT-2"))
    assert gpt2.left_out == ()
    assert mha_viz.load_model("tiny").weights_leave_out() == ()  # the contract's default: nothing beyond the weights


def test_the_circuits_page_says_it_where_it_says_what_is_left_out(olmo):
    at = app_at("custom")
    at.sidebar.text_input(key="custom_id").input(str(olmo)).run()
    assert not at.exception, at.exception
    open_view(at, "Circuits")
    captions = [c.value for c in at.caption if "left out" in c.value]
    assert len(captions) == 1, captions
    assert "as are biases and MLPs" in captions[0] and "clamped to ±0.05" in captions[0], captions[0]
