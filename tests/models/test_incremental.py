"""Incremental runs (models/schedule.EarlierRuns): a run of the same text whose interventions agree with a recent
run's below layer l takes layers 0..l-1 over and computes layers l.. only. On every adapter that resumes and for
every intervention kind: the reused run equals the same request made fresh, a run whose interventions differ
below l does not reuse those layers, and a toggle in the last layer runs that one layer, counted by hooks on the
attention modules (the layers that run call them; the skipped ones do not). Also: logits only where asked."""
from __future__ import annotations

import contextlib

import pytest
import torch

import mha_viz
from mha_viz.contract import ResampleAblation
from mha_viz.models import interventions
from mha_viz.models.schedule import EarlierRuns, kept_layer, layer_steps

from helpers import loaded

TEXT = "When Mary and John went to the store, John gave a drink to"
SOURCE = "When Mary and John went to the store, Mary gave a drink to"
TINY_TEXT = "the keys to the old cabinet are on the table"
TINY_SOURCE = "the key to the old cabinets is on the table"
PROGRAM_TEXT, PROGRAM_SOURCE = "b c b b a c", "c b a b b c"
OTHER = {"tiny": "the cat near the doors is small", "program": "a a b c"}
# tiny, the in-repo BERT (MiniLM), a compiled program, and transformers models (Llama-style with grouped-query
# attention, GPT-2) from the random-weight folders of tests/models/conftest.py.
ADAPTERS = ["tiny", "minilm", "written-induction", "llama", "gpt2"]
KINDS = ["zero", "mean", "resample", "patch"]


@pytest.fixture(scope="module")
def models(user_folders):
    made = {}

    def model(name):
        if name not in made:
            made[name] = mha_viz.load_model(str(user_folders[name])) if name in user_folders else loaded(name)
        return made[name]

    return model


@pytest.fixture(autouse=True)
def _no_earlier_runs():
    """Each test starts with nothing kept, so what it reuses is what it ran itself."""
    interventions._EARLIER.clear()
    yield
    interventions._EARLIER.clear()


def _texts(name: str) -> tuple[str, str, str]:
    if name.startswith("tiny"):
        return TINY_TEXT, TINY_SOURCE, OTHER["tiny"]
    if name.startswith("written"):
        return PROGRAM_TEXT, PROGRAM_SOURCE, OTHER["program"]
    return TEXT, SOURCE, "The cat sat on the mat."


def _attention_modules(model) -> list[torch.nn.Module]:
    """Each layer's attention module: it runs exactly when its layer runs."""
    if hasattr(model, "lm"):  # tiny
        return [block.attn for block in model.lm.blocks]
    if hasattr(model, "encoder"):  # the in-repo BERT
        return [layer.attn for layer in model.encoder.layers]
    if hasattr(model, "stack"):  # a compiled program
        return [block.attn for block in model.stack.blocks]
    return list(model._layers.modules)  # transformers


@contextlib.contextmanager
def counting(model):
    """Counts the layers that run while the block runs: calls[l] is how often layer l's attention ran."""
    calls = [0] * model.n_layers
    handles = [module.register_forward_hook(lambda *_, layer=layer: calls.__setitem__(layer, calls[layer] + 1))
               for layer, module in enumerate(_attention_modules(model))]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def _request(name, model, kind, heads) -> dict:
    text, source, _ = _texts(name)
    if kind == "patch":
        return dict(patch=heads, source=source)
    return dict(ablate=heads, ablation=kind)


def _warm(model, text, ablate=(), ablation="zero", patch=(), source=None, reference=None) -> None:
    """Make the replacement a request needs (head means, another text's head outputs: forwards of their own,
    kept per model), so a count of the layers that run sees only the run's own."""
    if ablate and ablation == "mean":
        model.head_means(reference)
    if ablate and ablation == "resample":
        model.head_outputs(ResampleAblation().chosen(model, reference, text))
    if patch:
        model.head_outputs(source)


def _same(reused, fresh) -> None:
    assert reused.tokens == fresh.tokens and reused.ablated == fresh.ablated and reused.patched == fresh.patched
    assert (reused.attentions - fresh.attentions).abs().max() <= 1e-6
    assert (reused.output - fresh.output).abs().max() <= 1e-6
    assert (reused.logits is None) == (fresh.logits is None)
    if fresh.logits is not None:
        assert (reused.logits - fresh.logits).abs().max() <= 1e-6


def _fresh(model, text, **request):
    interventions._EARLIER.clear()
    return model.run(text, **request)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ADAPTERS)
def test_a_reused_run_equals_the_same_request_made_fresh(models, name, kind):
    model = models(name)
    assert model.can_resume
    text = _texts(name)[0]
    L, H = model.n_layers, model.n_heads
    top, mid = (L - 1, H - 1), ((L - 1) // 2, 0)  # mid: below the top layer
    model.run(text)  # every head on: kept
    before: set = set()
    for heads in [{top}, {top, mid}, {mid}]:  # each from the run before it
        first = min(layer for layer, _ in before ^ heads)  # the first layer whose heads differ
        before = heads
        request = _request(name, model, kind, heads)
        _warm(model, text, **request)
        with counting(model) as calls:
            reused = model.run(text, **request)
        assert calls == [0] * first + [1] * (L - first), (heads, calls)  # resumed at the first layer that differs
        _same(reused, _fresh(model, text, **request))
        model.run(text, **request)  # kept again, for the next step


@pytest.mark.parametrize("name", ADAPTERS)
def test_a_different_head_set_below_l_does_not_reuse(models, name):
    model = models(name)
    text, source, _ = _texts(name)
    L, H = model.n_layers, model.n_heads
    model.run(text, ablate={(0, 0), (L - 1, 0)})
    # Layer 0 differs (its head is back on): every layer runs again, and the numbers are the fresh run's.
    for request in [dict(ablate={(L - 1, 0)}), dict(ablate={(0, 0), (L - 1, 0)}, ablation="mean"),
                    dict(patch={(0, 0), (L - 1, 0)}, source=source), dict(ablate={(0, H - 1), (L - 1, 0)})]:
        if H == 1 and request.get("ablate") == {(0, H - 1), (L - 1, 0)}:
            continue  # one head per layer: the same set
        _warm(model, text, **request)
        with counting(model) as calls:
            reused = model.run(text, **request)
        # Steps compare values: a head whose mean output is 0 (a compiled program's) is zero-ablated either way.
        same_values = request.get("ablation") == "mean" and not model.head_means()[[0, L - 1], 0].any()
        assert calls == ([0] * L if same_values else [1] * L), (request, calls)
        _same(reused, _fresh(model, text, **request))
        model.run(text, ablate={(0, 0), (L - 1, 0)})
    # A different head set in the same layer l still takes layers 0..l-1 over.
    if H > 1:
        with counting(model) as calls:
            reused = model.run(text, ablate={(0, 0), (L - 1, 1)})
        assert calls == [0] * (L - 1) + [1]
        _same(reused, _fresh(model, text, ablate={(0, 0), (L - 1, 1)}))
    # Another text with the same heads off shares nothing.
    other = _texts(name)[2]
    with counting(model) as calls:
        model.run(other, ablate={(0, 0), (L - 1, 0)})
    assert calls == [1] * L


@pytest.mark.parametrize("name", ADAPTERS)
def test_a_toggle_in_the_last_layer_runs_only_that_layer(models, name):
    model = models(name)
    text = _texts(name)[0]
    L = model.n_layers
    with counting(model) as new_sentence:
        model.run(text)
    with counting(model) as toggle:
        run = model.run(text, ablate={(L - 1, 0)})
    with counting(model) as again:
        same = model.run(text, ablate={(L - 1, 0)})
    assert new_sentence == [1] * L
    assert toggle == [0] * (L - 1) + [1]
    assert again == [0] * L  # the same request: only the final norm and LM head run
    _same(same, run)


def test_resample_takes_the_same_text_so_a_different_reference_does_not_reuse(models):
    model = models("tiny")
    L = model.n_layers
    first = ["the cat near the doors is small", "a dog on the roof is old"]
    second = ["the doors near the cat are small", "the roofs on the dog are old"]
    model.run(TINY_TEXT, ablate={(0, 1), (L - 1, 0)}, ablation="resample", reference=first)
    _warm(model, TINY_TEXT, ablate={(0, 1)}, ablation="resample", reference=second)
    with counting(model) as calls:
        reused = model.run(TINY_TEXT, ablate={(0, 1), (L - 1, 0)}, ablation="resample", reference=second)
    assert calls == [1] * L
    _same(reused, _fresh(model, TINY_TEXT, ablate={(0, 1), (L - 1, 0)}, ablation="resample", reference=second))


def test_kept_runs_are_bounded_and_share_the_layers_they_took_over(models, monkeypatch):
    model = models("tiny")
    L = model.n_layers
    run = model.run(TINY_TEXT)
    whole = interventions.reuse_bytes()  # what the run cache counts
    assert whole == interventions._EARLIER.held_bytes() > 0
    per_layer = run.attentions[0].numel() * 4
    assert whole >= run.attentions.numel() * 4  # every layer's weights at least
    model.run(TINY_TEXT, ablate={(L - 1, 0)})  # shares layers 0..L-2 with the first
    assert whole < interventions._EARLIER.held_bytes() < whole + 2 * whole / L + per_layer
    # A budget of one run's worth: the older runs go, least recently used first.
    small = EarlierRuns(per_model=2, budget_bytes=lambda: int(whole * 1.5))
    monkeypatch.setattr(interventions, "_EARLIER", small)
    for text in [TINY_TEXT, TINY_SOURCE, OTHER["tiny"]]:
        model.run(text)
        assert small.held_bytes() <= whole * 1.5
    with counting(model) as calls:
        model.run(OTHER["tiny"])  # the newest is kept
    assert calls == [0] * L
    with counting(model) as calls:
        model.run(TINY_TEXT)  # the oldest went
    assert calls == [1] * L
    # A run bigger than the budget alone is not kept.
    tight = EarlierRuns(budget_bytes=lambda: whole // 2)
    monkeypatch.setattr(interventions, "_EARLIER", tight)
    model.run(TINY_TEXT)
    assert tight.held_bytes() == 0


def test_steps_compare_values_not_the_words_that_asked_for_them():
    """A mean given once for every position equals it repeated per position (a patch elsewhere makes the
    replacement per position); zero ablation equals a replacement of zeros."""
    L, H, T, dh = 2, 3, 4, 5
    keep = torch.ones(1, L, H)
    keep[0, 1, 2] = 0
    mean = torch.randn(dh)
    once, per_position = torch.zeros(1, L, H, 1, dh), torch.zeros(1, L, H, T, dh)
    once[0, 1, 2, 0], per_position[0, 1, 2] = mean, mean
    a, b = layer_steps(keep, once, L, H), layer_steps(keep, per_position, L, H)
    zero, zeros = layer_steps(keep, None, L, H), layer_steps(keep, torch.zeros(1, L, H, T, dh), L, H)
    kept = [kept_layer(step, torch.zeros(1, T, 8), torch.zeros(1, H, T, T)) for step in a]
    runs = EarlierRuns(budget_bytes=lambda: 1 << 20)
    owner = torch.nn.Linear(1, 1)  # stands for a model: anything weakly referable
    runs.keep(owner, (1, 2), kept)
    assert len(runs.resume(owner, (1, 2), b)) == L
    assert len(runs.resume(owner, (1, 2), zero)) == 1 and len(runs.resume(owner, (1, 2), zeros)) == 1
    runs.keep(owner, (1, 2), [kept_layer(step, torch.zeros(1, T, 8), torch.zeros(1, H, T, T)) for step in zero])
    assert len(runs.resume(owner, (1, 2), zeros)) == L
    assert runs.resume(owner, (1, 3), a) == [] and runs.resume(torch.nn.Linear(1, 1), (1, 2), a) == []


@pytest.mark.parametrize("name", ["tiny", "llama", "gpt2"])
def test_logits_only_where_asked(models, name):
    model = models(name)
    text = _texts(name)[0]
    full = model.run(text)
    assert full.logits_at is None and full.logits.shape[0] == len(full.tokens)
    n = len(full.tokens)
    part = model.run(text, ablate={(0, 0)}, logits_at=[-1, 2])
    assert part.logits_at == (n - 1, 2) and part.logits.shape == (2, full.logits.shape[1])
    fresh = _fresh(model, text, ablate={(0, 0)})
    # The LM head over 2 rows rounds as a matrix product of another shape does: float32's tolerance, not equality.
    assert torch.allclose(part.logits, fresh.logits[[n - 1, 2]], rtol=1e-5, atol=1e-5)
    assert (part.attentions - fresh.attentions).abs().max() <= 1e-6
    with pytest.raises(mha_viz.InputError, match="position"):
        model.run(text, logits_at=[n])


def test_an_encoder_has_no_logits_wherever_asked(models):
    run = models("minilm").run(TEXT, logits_at=[0])
    assert run.logits is None and run.logits_at is None
