"""The batches behind the long maps (head importance, the exact patching map): `run_batch_keep` grows one batch
layer by layer (each row joins at the first layer it edits) and, on causal models, runs only the positions where
a patched text differs from the source, on the unedited run's keys and values before them. Both must give what one
`Model.run` per row gives, for every model kind: the shipped ones and users' folders (Llama-style with grouped-query
attention, GPT-2-style, BERT masked LM and encoder)."""
import pytest
import torch

from helpers import loaded

TEXT = "When Mary and John went to the store, John gave a drink to"
SOURCE = "When Mary and John went to the store, Mary gave a drink to"  # differs from TEXT at one token
TINY_TEXT = "anna berg met tom lind at the market and tom lind gave the keys to anna berg"
TINY_SOURCE = "anna berg met tom lind at the market and anna berg gave the keys to anna berg"
KINDS = ["tiny", "minilm", "smollm2", "llama", "gpt2", "masked", "encoder"]


def _texts(kind):
    return (TINY_TEXT, TINY_SOURCE) if kind == "tiny" else (TEXT, SOURCE)


def _rows(model, per_layer):
    """Single-head rows (as the maps make them): `per_layer` heads of each of a few layers, first, second, a middle
    one and the last, so rows join a growing batch at four different layers."""
    L, H = model.n_layers, model.n_heads
    layers = sorted({0, 1 % L, L // 2, L - 1})
    heads = [(layer, head) for layer in layers for head in range(min(per_layer, H))]
    keep = torch.ones(len(heads), L, H)  # (B, L, H)
    for row, (layer, head) in enumerate(heads):
        keep[row, layer, head] = 0.0
    return heads, keep


def _final(run):
    return run.logits if run.logits is not None else run.output  # (T, V) or (T, D)


def _close(batched, one):
    # Batches of other sizes add in other orders: float32 drifts by about 1e-5 of the largest value through 30
    # layers (SmolLM2); a wrong head, position or row moves a value by far more.
    torch.testing.assert_close(batched, one, atol=2e-5 * float(one.abs().max()) + 1e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_zero_ablation_rows_equal_one_run_each(kind, model_of):
    model = model_of(kind)
    text, _ = _texts(kind)
    heads, keep = _rows(model, per_layer=3)
    out, logits = model.run_batch_keep(text, keep)  # (B, T, D), (B, T, V) or None
    last = model.run_batch_keep(text, keep, positions=[-1])[1]  # (B, 1, V) or None
    for row, head in enumerate(heads):
        run = model.run(text, ablate={head})
        _close(out[row], run.output)
        if run.logits is not None:
            _close(logits[row], run.logits)
            _close(last[row, 0], run.logits[-1])


@pytest.mark.parametrize("kind", KINDS)
def test_patched_rows_equal_one_run_each(kind, model_of):
    model = model_of(kind)
    text, source = _texts(kind)
    heads, keep = _rows(model, per_layer=2)
    src = model.head_outputs(source)[None]  # (1, L, H, T, dh)
    out, logits = model.run_batch_keep(text, keep, src)
    last = model.run_batch_keep(text, keep, src, positions=[-1])[1]
    for row, head in enumerate(heads):
        run = model.run(text, patch={head}, source=source)
        _close(out[row], run.output)
        if run.logits is not None:
            _close(logits[row], run.logits)
            _close(last[row, 0], run.logits[-1])


@pytest.mark.parametrize("kind", ["smollm2", "llama", "gpt2"])
def test_causal_transformers_models_recompute_only_where_the_texts_differ(kind, model_of):
    """The path above is the one taken: these models run a tail, from the first token where TEXT and SOURCE
    differ; a zero ablation changes every position, so it runs them all."""
    model = model_of(kind)
    assert model.tails and model.grows
    text = model.encode_text(TEXT)
    differ = next(i for i, (a, b) in enumerate(zip(text.ids, model.encode_text(SOURCE).ids)) if a != b)
    heads, keep = _rows(model, per_layer=2)
    src = model.head_outputs(SOURCE)[None]
    assert model._same_until(text, keep, src, None) == differ
    assert model._same_until(text, keep, src, [differ - 1]) == differ - 1  # capped at the first position read
    assert model._same_until(text, keep, None, None) == 0
    assert model._same_until(text, keep, model.head_outputs(TEXT)[None], None) == text.n_tokens


def test_encoders_and_the_tiny_stack_never_run_a_tail():
    for name in ("minilm", "tiny"):
        assert not loaded(name).tails


def test_patching_from_the_same_text_returns_the_unedited_run(model_of):
    model = model_of("smollm2")
    heads, keep = _rows(model, per_layer=2)
    same = model.head_outputs(TEXT)[None]
    out, logits = model.run_batch_keep(TEXT, keep, same, positions=[-1])
    base = model.run(TEXT)
    for row in range(len(heads)):
        _close(logits[row, 0], base.logits[-1])
        _close(out[row], base.output)


@pytest.mark.parametrize("kind", ["tiny", "minilm", "smollm2"])
def test_a_growing_batch_holds_many_rows_on_short_texts_and_few_on_long_ones(kind):
    model = loaded(kind)
    assert model.wave_rows(16) > model.n_heads  # several layers' rows in one batch
    assert model.wave_rows(16) > model.wave_rows(120) >= 1


@pytest.mark.parametrize("kind", ["tiny", "smollm2"])
def test_the_maps_equal_their_one_run_per_head_loop(kind):
    """head_importance and patching_map (the page's calls) against a plain loop of Model.run, on the heads of the
    first and last layer (a full loop over SmolLM2's 270 heads would take minutes)."""
    from mha_viz.analysis.importance import head_importance
    from mha_viz.analysis.patching import Metric, patching_map

    model = loaded(kind)
    text, source = _texts(kind)
    n = model.token_count(text)
    scores = head_importance(model, text)
    if kind == "tiny":
        answer, other = model.token_id("anna"), model.token_id("tom")
    else:
        answer, other = model.token_id(" Mary"), model.token_id(" John")
    metric = Metric("logit_diff", position=n - 1, answer=answer, other=other)
    patched = patching_map(model, text, source, metric).patched
    base = model.run(text).logits[-1]
    for layer in (0, model.n_layers - 1):
        for head in range(model.n_heads):
            off = model.run(text, ablate={(layer, head)}).logits
            p, q = torch.log_softmax(base.double(), -1), torch.log_softmax(off[-1].double(), -1)
            expected = float((p.exp() * (p - q)).sum())  # KL(before || after) of the next token
            assert scores[layer, head] == pytest.approx(max(expected, 0.0), abs=2e-5 + 1e-4 * expected)
            moved = model.run(text, patch={(layer, head)}, source=source).logits
            assert float(patched[layer, head]) == pytest.approx(float(metric(None, moved)), abs=1e-4)


@pytest.mark.parametrize("kind", ["tiny", "minilm", "smollm2"])
def test_the_cost_shown_before_a_map_counts_what_the_batches_recompute(kind):
    """Model.single_head_work (the page's "about N s" is a measured forward times it): half the layers per head
    where the model resumes; a patch on a model that runs tails only the positions from the first difference."""
    model = loaded(kind)
    text, source = _texts(kind)
    L, H = model.n_layers, model.n_heads
    n = model.token_count(text)
    assert model.single_head_work(text) == pytest.approx(H * (L + 1) / 2)
    enc, src = model.encoding(text).ids, model.encoding(source).ids
    differ = next(i for i, (a, b) in enumerate(zip(enc, src)) if a != b)
    expected = H * (L + 1) / 2 * ((n - differ) / n if model.tails else 1.0)
    assert model.single_head_work(text, source) == pytest.approx(expected)
