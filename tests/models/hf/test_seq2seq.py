"""Encoder-decoder models (BART, Marian, T5) from tiny random local folders: the three kinds of attention against
transformers' own eager output_attentions, and heads of every kind switched off against a hook written here."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mha_viz.contract import InputError  # noqa: E402
from mha_viz.models.hf.loading import load_custom  # noqa: E402

SOURCE = "the cat sat on the mat"
TARGET = "a dog ran in the park"
OTHER = "the bird flew over the house"
VOCAB = 300
L_ENC, L_DEC, H = 2, 3, 4

SMALL = dict(vocab_size=VOCAB, d_model=32, encoder_layers=L_ENC, decoder_layers=L_DEC, encoder_attention_heads=H,
             decoder_attention_heads=H, encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=24,
             pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=None)
CONFIGS = {
    "bart": lambda: transformers.BartConfig(**SMALL),
    "marian": lambda: transformers.MarianConfig(**{**SMALL, "decoder_start_token_id": 1}),
    "t5": lambda: transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=L_ENC,
                                        num_decoder_layers=L_DEC, num_heads=H, relative_attention_num_buckets=8,
                                        relative_attention_max_distance=16, pad_token_id=1, eos_token_id=2,
                                        decoder_start_token_id=1),
}
MODEL_CLASS = {"bart": "BartForConditionalGeneration", "marian": "MarianMTModel",
               "t5": "T5ForConditionalGeneration"}


def _tokenizer(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([SOURCE, TARGET, OTHER] * 3, trainers.WordLevelTrainer(
        special_tokens=["<s>", "<pad>", "</s>", "<unk>"]))
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>",
                                         unk_token="<unk>", bos_token="<s>").save_pretrained(folder)


def seq2seq_folder(path, config=None, seed: int = 0, arch: str = "bart"):
    """`path` as a random `arch` folder (a key of CONFIGS) with the tests' word-level tokenizer: `config`
    (CONFIGS[arch]() by default), its weights drawn after torch.manual_seed(`seed`). The models', app's, browser's and
    notebook's tests load it."""
    torch.manual_seed(seed)
    getattr(transformers, MODEL_CLASS[arch])(config or CONFIGS[arch]()).save_pretrained(path)
    _tokenizer(path)
    return path


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def folder(request, tmp_path_factory):
    return seq2seq_folder(tmp_path_factory.mktemp(request.param), arch=request.param)


@pytest.fixture(scope="module")
def pair(folder):
    """(our model, transformers' own eager model) from the same folder."""
    theirs = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()
    return load_custom(str(folder)), theirs


def _theirs(theirs, run, hooks=()):
    handles = [module.register_forward_pre_hook(hook) for module, hook in hooks]
    try:
        with torch.no_grad():
            return theirs(input_ids=torch.tensor([run.token_ids]), decoder_input_ids=torch.tensor([run.target_ids]),
                          output_attentions=True, output_hidden_states=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()


def _close(ours, maps):
    expected = torch.stack([m[0] for m in maps]).float()
    assert ours.shape == expected.shape
    return float((ours - expected).abs().max())


def test_three_kinds_of_attention_equal_transformers(pair):
    model, theirs = pair
    run = model.run(SOURCE, target=TARGET)
    ids = model._tokenizer(TARGET, add_special_tokens=False)["input_ids"]
    assert run.target_ids == [model._start, *ids]  # teacher-forced: start token, then the target's own ids
    S, T = len(run.token_ids), len(run.target_ids)
    assert run.attentions.shape == (L_ENC, H, S, S)
    assert run.decoder_attentions.shape == (L_DEC, H, T, T)
    assert run.cross_attentions.shape == (L_DEC, H, T, S)
    out = _theirs(theirs, run)
    assert _close(run.attentions, out.encoder_attentions) < 1e-4
    assert _close(run.decoder_attentions, out.decoder_attentions) < 1e-4
    assert _close(run.cross_attentions, out.cross_attentions) < 1e-4
    assert torch.allclose(run.output, out.decoder_hidden_states[-1][0], atol=1e-4)


def test_no_target_runs_the_greedy_continuation(pair):
    model, _ = pair
    run = model.run(SOURCE)
    assert run.target_ids[0] == model._start and 1 < len(run.target_ids) <= 21
    assert run.decoder_attentions.shape[2] == len(run.target_ids)


def _cross_o(theirs, layer):
    dec = theirs.get_decoder()
    if hasattr(dec, "block"):  # T5
        return dec.block[layer].layer[1].EncDecAttention.o
    return dec.layers[layer].encoder_attn.out_proj


def _self_o(theirs, layer, decoder):
    stack = theirs.get_decoder() if decoder else theirs.get_encoder()
    if hasattr(stack, "block"):  # T5
        return stack.block[layer].layer[0].SelfAttention.o
    return stack.layers[layer].self_attn.out_proj


def _set_slice(head, dh, value):
    def hook(module, args):
        x = args[0].clone()
        x[..., head * dh:(head + 1) * dh] = value
        return (x, *args[1:])
    return hook


def test_cross_head_switched_off_equals_a_hook(pair):
    model, theirs = pair
    base = model.run(SOURCE, target=TARGET)
    run = model.run(SOURCE, target=TARGET, ablate_cross={(1, 2)})
    dh = model.dh
    out = _theirs(theirs, run, [(_cross_o(theirs, 1), _set_slice(2, dh, 0.0))])
    assert float((run.output - out.decoder_hidden_states[-1][0]).abs().max()) < 1e-4
    assert _close(run.cross_attentions, out.cross_attentions) < 1e-4
    assert not torch.allclose(run.output, base.output, atol=1e-4)  # the edit reached the output
    assert run.ablated_cross == frozenset({(1, 2)})


def test_self_heads_of_encoder_and_decoder_switched_off_equal_hooks(pair):
    model, theirs = pair
    dh = model.dh
    run = model.run(SOURCE, target=TARGET, ablate={(0, 1), (L_ENC + 2, 3)})
    out = _theirs(theirs, run, [(_self_o(theirs, 0, False), _set_slice(1, dh, 0.0)),
                                (_self_o(theirs, 2, True), _set_slice(3, dh, 0.0))])
    assert float((run.output - out.decoder_hidden_states[-1][0]).abs().max()) < 1e-4
    assert _close(run.attentions, out.encoder_attentions) < 1e-4


def test_mean_and_resample_of_a_cross_head(pair):
    model, theirs = pair
    dh = model.dh
    cross = model.n_enc + model.n_dec + 0  # the first cross projection in head_outputs' order
    mean = torch.cat([model.head_outputs_all(t)[cross][3] for t in (SOURCE, OTHER)]).mean(0)  # (dh,)
    run = model.run(SOURCE, target=TARGET, ablate_cross={(0, 3)}, ablation="mean", reference=[SOURCE, OTHER])
    out = _theirs(theirs, run, [(_cross_o(theirs, 0), _set_slice(3, dh, mean))])
    assert float((run.output - out.decoder_hidden_states[-1][0]).abs().max()) < 1e-4

    other = model.head_outputs_all(OTHER)[cross][3]  # (P, dh): the only other reference source
    T = len(run.target_ids)
    lined = other[torch.arange(T).clamp_max(other.shape[0] - 1)]  # (T, dh)
    run = model.run(SOURCE, target=TARGET, ablate_cross={(0, 3)}, ablation="resample", reference=[SOURCE, OTHER])
    out = _theirs(theirs, run, [(_cross_o(theirs, 0), _set_slice(3, dh, lined))])
    assert float((run.output - out.decoder_hidden_states[-1][0]).abs().max()) < 1e-4


def test_bad_input_says_why(pair):
    model, _ = pair
    with pytest.raises(InputError, match="at most"):
        model.run(SOURCE, target=" ".join(["cat"] * 5000))
    with pytest.raises(InputError, match="does not exist"):
        model.run(SOURCE, target=TARGET, ablate_cross={(L_DEC, 0)})
    with pytest.raises(InputError, match="resample"):
        model.run(SOURCE, target=TARGET, ablate_cross={(0, 0)}, ablation="resample", reference=[SOURCE])
    with pytest.raises(InputError, match="kind"):
        model.inside(SOURCE, 0, 0, kind="Sideways")


def test_a_target_or_cross_heads_on_a_one_text_model_say_why():
    from mha_viz.models.registry import load_model

    tiny = load_model("tiny")
    with pytest.raises(InputError, match="target text does not apply"):
        tiny.run("the cat sat", target="a dog")
    with pytest.raises(InputError, match="no cross-attention"):
        tiny.run("the cat sat", ablate_cross={(0, 0)})


def test_census_reads_the_encoder_heads(tmp_path):
    """The census's inputs are read as sources: its scores are the encoder's self-attention heads; the weights per
    head default to the encoder's too (test_seq2seq_circuits.py checks every kind); a head of each kind opens
    (test_seq2seq_inside.py checks how)."""
    from mha_viz.analysis import circuits
    from mha_viz.analysis.census_run import head_census
    from tests.models.hf.architectures import word_piece_tokenizer

    torch.manual_seed(0)
    config = CONFIGS["bart"]()
    config.vocab_size, config.max_position_embeddings = 4096, 128  # the WordPiece tokenizer's ids; census lengths
    transformers.BartForConditionalGeneration(config).save_pretrained(tmp_path)
    word_piece_tokenizer(tmp_path, (SOURCE, TARGET, OTHER))
    model = load_custom(str(tmp_path))
    made = head_census(model, texts=[SOURCE, TARGET, OTHER])
    assert (made.n_layers, made.n_heads) == (L_ENC, H)
    [encoder] = model.run_many([SOURCE], lambda i, run: run.attentions)
    assert torch.allclose(encoder, model.run(SOURCE, target=TARGET).attentions, atol=1e-6)
    assert circuits.head_weights(model)[0].shape[:2] == (L_ENC, H)
    assert len(model.inside_layer(SOURCE, 0)) == H


def test_notebook_widget_shows_the_encoder_and_reads_the_decoders_prediction(pair):
    pytest.importorskip("anywidget")
    import mha_viz

    model, _ = pair
    widget = mha_viz.show(model, SOURCE, display=False)
    assert widget.run.attentions.shape[0] == L_ENC
    assert widget.readout["token"] == widget.base.target_tokens[-1]  # the decoder's last position, not the source's
    widget.toggle(0, 1)
    assert widget.heads_off == frozenset({(0, 1)}) and widget.readout["off"] == 1


def test_mean_with_no_reference_reads_the_example_sentences(pair):
    model, _ = pair
    texts = [text for _, text, _ in model.examples()]
    assert texts
    cross = model.n_enc + model.n_dec + 1
    mean = torch.cat([model.head_outputs_all(t)[cross][0] for t in texts]).mean(0)  # (dh,)
    run = model.run(SOURCE, target=TARGET, ablate_cross={(1, 0)}, ablation="mean")
    _, theirs = pair
    out = _theirs(theirs, run, [(_cross_o(theirs, 1), _set_slice(0, model.dh, mean))])
    assert float((run.output - out.decoder_hidden_states[-1][0]).abs().max()) < 1e-4
