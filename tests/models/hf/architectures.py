"""One tiny random model per transformers architecture, built from its Config class and saved as a user's folder
with a small WordPiece tokenizer made here (so no download): what the architecture matrix loads and checks.

Every model has hidden size 64, 3 layers and 4 heads (2 key/value heads where the architecture has grouped-query
attention), sliding windows of 8 where it has them (shorter than the texts, so the window matters), dropout off,
and every 1-D parameter (norm gains and biases) moved off its initial value, so a norm left out shows."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

D, L, H, KV, WINDOW = 64, 3, 4, 2, 8
# Rows of the embedding: more than the WordPiece tokenizer's pieces (about 600), as real models pad theirs, so
# labels of ids past the tokenizer are read too; enough for the byte-level one to merge every census word into one
# token; small, so the LM head costs little.
VOCAB = 4096


@dataclass(frozen=True)
class Arch:
    """An architecture of the matrix: its name in the table, its Config class and model class names in
    transformers, the Config's arguments, and where layer l's attention output projection is (its input is the
    heads' outputs side by side, which the reference hook edits)."""
    name: str
    config: str
    model: str
    args: dict = field(default_factory=dict)
    out_proj: str = ""  # a module name with {l}; "" where the model has none to hook (it does not load)
    # An encoder-decoder row: its key in tests/models/hf/test_seq2seq.py's CONFIGS (2 encoder and 3 decoder layers,
    # 4 heads, d_model 32), checked by matrix_seq2seq.py; "" for one stack.
    seq2seq: str = ""


def _llama(**extra) -> dict:
    return dict(hidden_size=D, intermediate_size=128, num_hidden_layers=L, num_attention_heads=H,
                num_key_value_heads=KV, max_position_embeddings=128, **extra)


def _bert(**extra) -> dict:
    return dict(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=128,
                max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **extra)


_GPT2 = dict(n_embd=D, n_layer=L, n_head=H, n_positions=128, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
_SLIDING = ["sliding_attention", "full_attention", "sliding_attention"]

ARCHS = [
    Arch("GPT-2", "GPT2Config", "GPT2LMHeadModel", _GPT2, "transformer.h.{l}.attn.c_proj"),
    Arch("GPT-J", "GPTJConfig", "GPTJForCausalLM", dict(_GPT2, rotary_dim=8), "transformer.h.{l}.attn.out_proj"),
    Arch("GPT-NeoX", "GPTNeoXConfig", "GPTNeoXForCausalLM",
         dict(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=128,
              max_position_embeddings=128, rotary_pct=0.5), "gpt_neox.layers.{l}.attention.dense"),
    Arch("OPT", "OPTConfig", "OPTForCausalLM",
         dict(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, ffn_dim=128, word_embed_proj_dim=D,
              max_position_embeddings=128, dropout=0.0), "model.decoder.layers.{l}.self_attn.out_proj"),
    Arch("Llama", "LlamaConfig", "LlamaForCausalLM", _llama(), "model.layers.{l}.self_attn.o_proj"),
    Arch("Mistral", "MistralConfig", "MistralForCausalLM", _llama(sliding_window=WINDOW),
         "model.layers.{l}.self_attn.o_proj"),
    Arch("Mixtral", "MixtralConfig", "MixtralForCausalLM",
         _llama(sliding_window=WINDOW, num_local_experts=2, num_experts_per_tok=1),
         "model.layers.{l}.self_attn.o_proj"),
    Arch("Qwen2", "Qwen2Config", "Qwen2ForCausalLM",
         _llama(use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1, layer_types=_SLIDING),
         "model.layers.{l}.self_attn.o_proj"),
    Arch("Qwen3", "Qwen3Config", "Qwen3ForCausalLM", _llama(head_dim=16), "model.layers.{l}.self_attn.o_proj"),
    Arch("Gemma", "GemmaConfig", "GemmaForCausalLM", _llama(head_dim=16), "model.layers.{l}.self_attn.o_proj"),
    Arch("Gemma 2", "Gemma2Config", "Gemma2ForCausalLM",
         _llama(head_dim=16, query_pre_attn_scalar=16, sliding_window=WINDOW, layer_types=_SLIDING,
                attn_logit_softcapping=50.0, final_logit_softcapping=30.0), "model.layers.{l}.self_attn.o_proj"),
    Arch("Gemma 3", "Gemma3TextConfig", "Gemma3ForCausalLM",
         _llama(head_dim=16, query_pre_attn_scalar=16, sliding_window=WINDOW, layer_types=_SLIDING),
         "model.layers.{l}.self_attn.o_proj"),
    Arch("Phi", "PhiConfig", "PhiForCausalLM", _llama(qk_layernorm=True, partial_rotary_factor=0.5, resid_pdrop=0.0,
                                                      embd_pdrop=0.0), "model.layers.{l}.self_attn.dense"),
    Arch("Phi-3", "Phi3Config", "Phi3ForCausalLM", _llama(pad_token_id=0, bos_token_id=1, eos_token_id=2),
         "model.layers.{l}.self_attn.o_proj"),
    Arch("StableLM", "StableLmConfig", "StableLmForCausalLM", _llama(qk_layernorm=True, use_qkv_bias=True),
         "model.layers.{l}.self_attn.o_proj"),
    Arch("OLMo", "OlmoConfig", "OlmoForCausalLM", _llama(clip_qkv=0.05), "model.layers.{l}.self_attn.o_proj"),
    Arch("OLMo 2", "Olmo2Config", "Olmo2ForCausalLM", _llama(), "model.layers.{l}.self_attn.o_proj"),
    Arch("Starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", _llama(sliding_window=WINDOW, residual_dropout=0.0),
         "model.layers.{l}.self_attn.o_proj"),
    Arch("CodeGen", "CodeGenConfig", "CodeGenForCausalLM", dict(_GPT2, n_ctx=128, rotary_dim=8),
         "transformer.h.{l}.attn.out_proj"),
    Arch("Granite", "GraniteConfig", "GraniteForCausalLM",
         _llama(attention_multiplier=0.2, residual_multiplier=0.5, embedding_multiplier=2.0, logits_scaling=4.0),
         "model.layers.{l}.self_attn.o_proj"),
    Arch("Cohere", "CohereConfig", "CohereForCausalLM", _llama(use_qk_norm=True, pad_token_id=0, bos_token_id=1,
                                                               eos_token_id=2), "model.layers.{l}.self_attn.o_proj"),
    Arch("GPTBigCode", "GPTBigCodeConfig", "GPTBigCodeForCausalLM", dict(_GPT2, multi_query=True),
         "transformer.h.{l}.attn.c_proj"),
    Arch("BERT", "BertConfig", "BertForMaskedLM", _bert(), "bert.encoder.layer.{l}.attention.output.dense"),
    Arch("RoBERTa", "RobertaConfig", "RobertaForMaskedLM", _bert(pad_token_id=0, bos_token_id=101, eos_token_id=102),
         "roberta.encoder.layer.{l}.attention.output.dense"),
    Arch("DistilBERT", "DistilBertConfig", "DistilBertForMaskedLM",
         dict(dim=D, n_layers=L, n_heads=H, hidden_dim=128, max_position_embeddings=128, dropout=0.0,
              attention_dropout=0.0), "distilbert.transformer.layer.{l}.attention.out_lin"),
    Arch("ELECTRA", "ElectraConfig", "ElectraForMaskedLM", _bert(embedding_size=32),
         "electra.encoder.layer.{l}.attention.output.dense"),
    Arch("XLM-RoBERTa", "XLMRobertaConfig", "XLMRobertaForMaskedLM",
         _bert(pad_token_id=0, bos_token_id=101, eos_token_id=102), "roberta.encoder.layer.{l}.attention.output.dense"),
    Arch("ModernBERT", "ModernBertConfig", "ModernBertForMaskedLM",
         dict(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=128,
              max_position_embeddings=128, local_attention=WINDOW, global_attn_every_n_layers=2, pad_token_id=0,
              bos_token_id=101, eos_token_id=102, cls_token_id=101, sep_token_id=102),
         "model.layers.{l}.attn.Wo"),
    Arch("GPT-Neo", "GPTNeoConfig", "GPTNeoForCausalLM",
         dict(hidden_size=D, num_layers=L, num_heads=H, max_position_embeddings=128, window_size=WINDOW,
              attention_types=[[["global", "local"], 1], [["global"], 1]], embed_dropout=0.0, resid_dropout=0.0,
              attention_dropout=0.0), "transformer.h.{l}.attn.attention.out_proj"),
    Arch("Bloom", "BloomConfig", "BloomForCausalLM", dict(hidden_size=D, n_layer=L, n_head=H),
         "transformer.h.{l}.self_attention.dense"),
    Arch("Falcon", "FalconConfig", "FalconForCausalLM",
         dict(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_kv_heads=KV, new_decoder_architecture=True,
              max_position_embeddings=128), "transformer.h.{l}.self_attention.dense"),
    Arch("MPT", "MptConfig", "MptForCausalLM", dict(d_model=D, n_heads=H, n_layers=L, max_seq_len=128),
         "transformer.blocks.{l}.attn.out_proj"),
    # As DeBERTa-v3's checkpoints are configured (shared position keys, normed relative embeddings, no absolute
    # positions), with 16 position buckets: the texts (about 22 tokens) reach the log-spaced ones past 8.
    Arch("DeBERTa-v2", "DebertaV2Config", "DebertaV2ForMaskedLM",
         _bert(relative_attention=True, position_buckets=16, max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
               share_att_key=True, norm_rel_ebd="layer_norm", position_biased_input=False),
         "deberta.encoder.layer.{l}.attention.output.dense"),
    Arch("MPNet", "MPNetConfig", "MPNetForMaskedLM", _bert(pad_token_id=0, bos_token_id=101, eos_token_id=102),
         "mpnet.encoder.layer.{l}.attention.attn.o"),
    Arch("ALBERT", "AlbertConfig", "AlbertForMaskedLM", _bert(embedding_size=32),
         "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.dense"),
    Arch("T5", "T5Config", "T5ForConditionalGeneration", seq2seq="t5"),
    Arch("BART", "BartConfig", "BartForConditionalGeneration", seq2seq="bart"),
    Arch("Marian", "MarianConfig", "MarianMTModel", seq2seq="marian"),
]
BY_NAME = {a.name: a for a in ARCHS}
# Architectures mha-viz refuses from their config, before any weights load (test_architectures.py checks it): not
# rows of the matrix, which lists what loads.
REFUSED = [
    Arch("DeBERTa", "DebertaConfig", "DebertaForMaskedLM", _bert(relative_attention=True, pos_att_type=["p2c", "c2p"])),
]


def build(arch: Arch, folder: Path, texts: tuple[str, ...] = (), seed: int = 0) -> Path:
    """`arch` with random weights (seeded) and its 1-D parameters perturbed, saved to `folder` as a user's model with
    a tokenizer that reads `texts` and the census's words (see OWN_TOKENIZER)."""
    import transformers

    if arch.seq2seq:  # test_seq2seq.py's config, with the WordPiece tokenizer's ids and the census's lengths
        from tests.models.hf.test_seq2seq import CONFIGS

        config = CONFIGS[arch.seq2seq]()
        config.vocab_size = VOCAB
        if hasattr(config, "max_position_embeddings"):
            config.max_position_embeddings = 128
    else:
        config = getattr(transformers, arch.config)(vocab_size=VOCAB, **arch.args)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = getattr(transformers, arch.model)(config).eval()
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 1:  # norm gains and biases: off 1 and 0, so a norm or bias left out shows
                    p.add_(0.2 * torch.randn_like(p))
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    if arch.name in OWN_TOKENIZER:
        byte_level_tokenizer(folder, texts)
    else:
        word_piece_tokenizer(folder, texts)
    return folder


def _words(texts: tuple[str, ...]) -> list[str]:
    """The census's English words (models/lexicon.py) and the words of `texts`, lower case, each once."""
    import re

    from mha_viz.models import lexicon

    groups = (lexicon.NOUNS, lexicon.ADJECTIVES, lexicon.PREPOSITIONS, lexicon.TRANSITIVE, lexicon.OTHER_WORDS)
    words = ["the", "a", "and"] + [w for group in groups for item in group
                                   for w in ((item,) if isinstance(item, str) else item)]
    words += re.findall(r"[a-z]+", " ".join(texts).lower())
    return list(dict.fromkeys(words))


def word_piece_tokenizer(folder: Path, texts: tuple[str, ...]) -> None:
    """A BERT-style WordPiece tokenizer ([CLS] text [SEP], lower case) over the census's words and those of
    `texts`, single letters and punctuation beside them."""
    import string

    from transformers import BertTokenizer

    pieces = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *pieces, *(f"##{c}" for c in pieces), *_words(texts)]
    vocab = list(dict.fromkeys(vocab))
    assert len(vocab) <= VOCAB, f"{len(vocab)} pieces do not fit the embedding's {VOCAB} rows"
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    # `vocab=`, not `vocab_file=`: transformers 5 ignores the latter without a word and keeps its 5 special tokens,
    # so every text of the matrix became [UNK]s. The check below fails if a release does that again.
    tokenizer = BertTokenizer(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    pieces_of = [tokenizer.tokenize(text) for text in texts]
    unknown = sum(p == tokenizer.unk_token for ps in pieces_of for p in ps)
    assert len(tokenizer) == len(vocab) and unknown == 0, (
        f"the matrix's WordPiece tokenizer has {len(tokenizer)} of {len(vocab)} pieces and reads {unknown} [UNK] "
        "in the matrix's texts: the BertTokenizer arguments changed")
    tokenizer.save_pretrained(folder)


# transformers gives some model types their own tokenizer class whatever the folder's tokenizer_config says (its
# MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS): Qwen2's reads WordPiece files letter by letter. Such a
# folder gets a small byte-level BPE, trained here on the matrix's texts and the census's words, as its own
# tokenizer would be; the others get the WordPiece one.
OWN_TOKENIZER = {"Qwen2"}


def byte_level_tokenizer(folder: Path, texts: tuple[str, ...]) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    words = _words(texts)
    corpus = list(texts) * 20 + [" ".join(words)] * 50 + [w for w in words for _ in range(20)]  # " w" and "w"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=VOCAB - 24, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>") \
        .save_pretrained(folder)
