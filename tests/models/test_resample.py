"""Resample ablation (Chan et al. 2022, causal scrubbing): a switched-off head outputs, position by position, its
output on another text of the reference set. Checked against an independent copy of the model whose output
projections' inputs are recorded and overwritten by forward pre-hooks (tests/reference.py: transformers' own
BertModel for MiniLM, a deep copy with plain eager attention for the GPT-2-style folder built here), and the fast
paths (batched importance, gradients, the census's batch) against one `Model.run` at a time."""
import random

import pytest
import torch

from mha_viz import InputError, load_model
from mha_viz.analysis import cosine_change, next_token_kl
from mha_viz.analysis.importance import head_importance
from mha_viz.contract import Ablation, ResampleAblation, line_up

from helpers import loaded
from reference import HookedReference

TEXT = "When Mary and John went to the store, John gave a drink to"
LONGER = "The cat sat on the mat while the old dog slept by the warm fire in the small house all day long."
SHORTER = "Harry met Sally."
HEADS = {"minilm": [(1, 4), (4, 7)], "gpt2": [(0, 1), (2, 3)]}


def _gpt2(folder):
    import transformers

    from tests.models.conftest import save_user_folder

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=30522, n_embd=32, n_layer=3, n_head=4,
                                                                  n_positions=64))
    return load_model(str(save_user_folder(lm, folder)))


@pytest.fixture(scope="module", params=["minilm", "gpt2"])
def case(request, tmp_path_factory):
    name = request.param
    model = loaded("minilm") if name == "minilm" else _gpt2(tmp_path_factory.mktemp("resample") / "gpt2")
    return name, model, HookedReference(model)


def _final(run):
    return run.logits if run.logits is not None else run.output  # (T, V) or (T, D)


def _clipped(outputs: torch.Tensor, n: int) -> torch.Tensor:
    """(P, dh) -> (n, dh) by hand: the first n positions, the last one repeated past the end."""
    if outputs.shape[0] >= n:
        return outputs[:n]
    return torch.cat([outputs, outputs[-1:].expand(n - outputs.shape[0], -1)])  # (n, dh)


@pytest.mark.parametrize("other", [LONGER, SHORTER])
def test_resample_equals_hooks_setting_the_other_texts_outputs(case, other):
    name, model, ref = case
    n = model.token_count(TEXT)
    assert (model.token_count(other) > n) == (other == LONGER), "precondition: one longer, one shorter reference"
    theirs, _ = ref.forward(other)  # (L, H, P, dh): recorded by the hooks, all heads on
    heads = HEADS[name]
    _, expected = ref.forward(TEXT, {h: _clipped(theirs[h], n) for h in heads})
    run = model.run(TEXT, ablate=heads, ablation="resample", reference=[other])
    assert run.ablation == "resample" and isinstance(run.ablation, ResampleAblation)
    assert run.ablated == frozenset(heads) and not run.patched
    assert torch.allclose(_final(run), expected, atol=1e-4)
    mean = model.run(TEXT, ablate=heads, ablation="mean", reference=[other])
    assert (_final(mean) - _final(run)).abs().max() > 1e-3, "resample and mean must differ to be tested"


def test_the_seed_picks_another_text_and_never_the_one_run(case):
    _, model, _ = case
    texts = [TEXT, LONGER, SHORTER, "A bird sang in the tree."]
    picked = ResampleAblation().chosen(model, texts, TEXT)
    assert picked == random.Random(ResampleAblation.seed).choice(texts[1:])
    assert ResampleAblation().chosen(model, texts, TEXT) == picked, "the same pick on every run"
    heads = HEADS["minilm" if model.n_layers == 6 else "gpt2"]
    one = model.run(TEXT, ablate=heads, ablation="resample", reference=texts)
    again = model.run(TEXT, ablate=heads, ablation="resample", reference=[picked])
    assert torch.equal(_final(one), _final(again))
    with pytest.raises(InputError, match="reference=\\[other texts\\]"):
        model.run(TEXT, ablate=heads, ablation="resample", reference=[TEXT])
    default = ResampleAblation().chosen(model, None, TEXT)
    assert default in [t for _, t, _ in model.examples()], "reference=None: the model's example sentences"


def test_every_path_takes_the_resampled_outputs(case):
    """Gradients (attribution patching's and the importance estimate's run), inside a head and the norm view read
    the same replaced outputs as `run`."""
    name, model, ref = case
    (layer, head), other = HEADS[name][1], LONGER
    n = model.token_count(TEXT)
    theirs = _clipped(ref.forward(other)[0][layer, head], n)  # (T, dh)
    outputs, _ = model.head_gradients(TEXT, lambda out, logits: out.sum(), ablate={(layer, head)},
                                      ablation="resample", reference=[other])  # (L, H, T, dh)
    assert torch.allclose(outputs[layer, head], theirs, atol=1e-4)
    inside = model.inside(TEXT, layer, head, ablate={(layer, head)}, ablation="resample", reference=[other])
    w_o = model._w_o(layer)[0][head]  # (dh, D)
    assert inside.ablated and torch.allclose(inside.contribution, theirs @ w_o, atol=1e-4)
    values, _ = model.norm_inputs(TEXT, {(layer, head)}, "resample", [other])
    assert float(values[layer, head].abs().max()) == 0.0, "a switched-off head's values carry nothing"


def test_batched_importance_equals_one_run_per_head(case):
    """head_importance under resample goes through run_batch_keep's fast paths (resumed layers, growing batches,
    and on the GPT-2 folder the tail after the positions where the resampled outputs equal the run's own)."""
    _, model, _ = case
    fast = head_importance(model, TEXT, ablation="resample")  # (L, H)
    base = model.run(TEXT)
    slow = torch.zeros(model.n_layers, model.n_heads)  # (L, H)
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            run = model.run(TEXT, ablate={(layer, head)}, ablation="resample")
            slow[layer, head] = max(next_token_kl(base.logits, run.logits, -1) if base.logits is not None
                                    else 1.0 - cosine_change(base.output, run.output), 0.0)
    assert torch.allclose(fast, slow, atol=1e-4)
    zero = head_importance(model, TEXT)
    assert (zero - fast).abs().max() > 1e-5, "zero and resample must differ to be tested"


def test_line_up_clips_and_the_words_come_from_the_class():
    outputs = torch.arange(2 * 3 * 4 * 1, dtype=torch.float32).view(2, 3, 4, 1)  # (L, H, P, dh)
    assert torch.equal(line_up(outputs, 2), outputs[:, :, :2])
    assert torch.equal(line_up(outputs, 6)[:, :, 4:], outputs[:, :, 3:].expand(2, 3, 2, 1))
    off = Ablation.of("resample")
    assert off in Ablation.kinds() and off.label and off.help and off.source.startswith("Chan et al. 2022")


def test_a_link_with_resample_reaches_the_picker_the_effects_and_patchings_baseline():
    """?ablation=resample through the page (AppTest): the sidebar picks it with its own words, the heads-off panel
    measures the run `Model.run` gives, and Ablation effects and Patching's baseline take it."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from tests.app.page_steps import open_view

    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=300)
    at.query_params.update({"model": "minilm", "text": TEXT, "off": "L0H3", "ablation": "resample"})
    at.run()
    assert not at.exception, at.exception
    picker = at.sidebar.radio(key="ablation")
    assert picker.value == "resample" and ResampleAblation.help in picker.help
    assert any(c.value.startswith("Off means resample") for c in at.caption)
    model = loaded("minilm")
    run = model.run(TEXT, ablate={(0, 3)}, ablation="resample")
    shown = [float(m.value) for m in at.metric if m.label.startswith("Cosine similarity")]
    assert shown and shown[0] == pytest.approx(cosine_change(model.run(TEXT).output, run.output), abs=1e-5)
    open_view(at, "Ablation effects")
    assert any("resample" in c.value for c in at.caption), "the importance map says what off means"
    open_view(at, "Patching")
    assert any(m.label == "Baseline: the same head(s) resample-ablated" for m in at.metric)


def test_the_pick_is_what_the_class_docstring_says():
    """ResampleAblation's pick, claim by claim (its docstring): the reference's order, the run's text left out by
    stripped-string equality however often it is listed, duplicates weighing the pick, random.Random(seed).choice
    over what is left, and the model's example sentences in their order when reference is None. Random(0).choice
    takes index 1 of two or three candidates, so each claim changes which text is picked."""
    model = load_model("tiny")
    run_text = "anna berg went to the market ."
    a, b = "tom lind saw anna berg .", "the keys to the cabinet are on the table ."

    def pick(reference):
        return ResampleAblation().chosen(model, reference, run_text)

    def choice(others):
        return random.Random(ResampleAblation.seed).choice(others)

    assert pick([a, b]) == choice([a, b]) == b and pick([b, a]) == a, "the reference's order"
    assert pick([run_text, a, b]) == b and pick([a, f"  {run_text}\n", run_text, b]) == b, "the run's text left out"
    assert pick([a, run_text.upper()]) == run_text.upper(), "no case folding: another case is another text"
    assert pick([a, a, b]) == a and pick([a, b]) == b, "a text listed twice weighs twice"
    with pytest.raises(InputError, match="other texts"):
        pick([run_text, f" {run_text} "])
    examples = [t for _, t, _ in model.examples()]
    others = [t for t in examples if t.strip() != examples[0].strip()]
    assert ResampleAblation().chosen(model, None, examples[0]) == choice(others), "the examples, in their order"
    # The page's path: a run with the reference set takes the picked text's outputs.
    heads = {(0, 0), (1, 1)}
    one = model.run(run_text, ablate=heads, ablation="resample", reference=[a, run_text, a, b])
    assert torch.equal(one.output, model.run(run_text, ablate=heads, ablation="resample", reference=[a]).output)
