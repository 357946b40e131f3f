"""Activation patching on encoder-decoder models (BART, Marian, T5) from tiny random local folders: an encoder head,
a decoder self-attention head and a cross-attention head patched from a second source each equal transformers' own
model with a forward pre-hook putting that head's output, captured on the second source reading the same target,
at its slice of the output projection's input."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mha_viz.contract import InputError  # noqa: E402
from mha_viz.models.hf.loading import load_custom  # noqa: E402
from tests.models.hf.test_seq2seq import (  # noqa: E402
    CONFIGS,
    L_ENC,
    OTHER,
    SOURCE,
    TARGET,
    _cross_o,
    _self_o,
    _set_slice,
    _theirs,
    seq2seq_folder,
)


def strong_config(arch: str):
    """test_seq2seq's tiny config, with BART's and Marian's weights drawn at std 0.3 (their default 0.02 leaves a
    patched head moving the logits by about 1e-6, under the tolerance the reference is held to; T5's own
    initialisation already moves them by about 0.4)."""
    config = CONFIGS[arch]()
    if hasattr(config, "init_std"):
        config.init_std = 0.3
    return config


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    """(our model, transformers' own eager model) from one tiny random folder per architecture."""
    arch = request.param
    path = seq2seq_folder(tmp_path_factory.mktemp(f"{arch}-patch"), strong_config(arch), arch=arch)
    theirs = transformers.AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager").eval()
    return load_custom(str(path)), theirs


def _captured(theirs, module, head: int, dh: int, source_ids: list[int], target_ids: list[int]) -> torch.Tensor:
    """Head `head`'s output at `module` (its slice of the projection's input) in transformers' forward -> (P, dh)."""
    seen = []
    handle = module.register_forward_pre_hook(lambda m, args: seen.append(args[0][0].clone()))
    try:
        with torch.no_grad():
            theirs(input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([target_ids]),
                   use_cache=False)
    finally:
        handle.remove()
    return seen[0][:, head * dh:(head + 1) * dh]  # (P, dh)


def _module(theirs, kind: str, layer: int):
    return _cross_o(theirs, layer) if kind == "cross" else _self_o(theirs, layer, kind == "decoder")


# (kind, transformers' layer, head, what model.run takes)
CASES = [("encoder", 0, 1, dict(patch={(0, 1)})),
         ("decoder", 1, 2, dict(patch={(L_ENC + 1, 2)})),
         ("cross", 1, 3, dict(patch_cross={(1, 3)}))]


@pytest.mark.parametrize("kind,layer,head,args", CASES, ids=[c[0] for c in CASES])
def test_a_patched_head_equals_a_hook_with_its_output_on_the_second_source(pair, kind, layer, head, args):
    model, theirs = pair
    base = model.run(SOURCE, target=TARGET)
    run = model.run(SOURCE, target=TARGET, source=OTHER, **args)
    other = model._source_ids(OTHER)
    module = _module(theirs, kind, layer)
    value = _captured(theirs, module, head, model.dh, other, run.target_ids)  # (P, dh), the same target
    out = _theirs(theirs, run, [(module, _set_slice(head, model.dh, value))])
    assert float((run.output - out.decoder_hidden_states[-1][0]).abs().max()) < 1e-4
    assert float((run.logits - out.logits[0]).abs().max()) < 1e-4
    assert float((run.logits - base.logits).abs().max()) > 1e-2  # the patch reached the prediction
    assert run.patched == frozenset(args.get("patch", ())) and run.patched_cross == frozenset(
        args.get("patch_cross", ()))
    assert run.target_ids == base.target_ids and run.token_ids == base.token_ids


def test_decoder_and_cross_heads_line_up_on_the_target_whatever_the_sources_lengths(pair):
    model, theirs = pair
    short = "the cat sat"
    assert len(model._source_ids(short)) != len(model._source_ids(SOURCE))
    run = model.run(SOURCE, target=TARGET, source=short, patch={(L_ENC, 0)}, patch_cross={(0, 2)})
    hooks = []
    for kind, layer, head in (("decoder", 0, 0), ("cross", 0, 2)):
        module = _module(theirs, kind, layer)
        value = _captured(theirs, module, head, model.dh, model._source_ids(short), run.target_ids)
        hooks.append((module, _set_slice(head, model.dh, value)))
    out = _theirs(theirs, run, hooks)
    assert float((run.logits - out.logits[0]).abs().max()) < 1e-4


def test_no_target_patches_on_this_sources_greedy_continuation(pair):
    model, _ = pair
    run = model.run(SOURCE, source=OTHER, patch_cross={(0, 0)})
    assert run.target_ids == model.run(SOURCE).target_ids


def test_patching_with_ablation_follows_the_one_stack_engine(pair):
    model, theirs = pair
    run = model.run(SOURCE, target=TARGET, ablate={(1, 0)}, patch={(0, 1)}, source=OTHER)
    value = _captured(theirs, _module(theirs, "encoder", 0), 1, model.dh, model._source_ids(OTHER), run.target_ids)
    out = _theirs(theirs, run, [(_module(theirs, "encoder", 0), _set_slice(1, model.dh, value)),
                                (_module(theirs, "encoder", 1), _set_slice(0, model.dh, 0.0))])
    assert float((run.logits - out.logits[0]).abs().max()) < 1e-4
    assert run.ablated == frozenset({(1, 0)}) and run.patched == frozenset({(0, 1)})
    with pytest.raises(InputError, match="both ablated and patched"):
        model.run(SOURCE, target=TARGET, ablate_cross={(0, 1)}, patch_cross={(0, 1)}, source=OTHER)


def test_bad_patching_input_says_why(pair):
    model, _ = pair
    with pytest.raises(InputError, match=r"second source has 4 tokens and the source has 7.*same number of tokens"):
        model.run(SOURCE, target=TARGET, patch={(0, 1)}, source="the cat sat")
    with pytest.raises(InputError, match="patch_cross needs source="):
        model.run(SOURCE, target=TARGET, patch_cross={(0, 1)})
    with pytest.raises(InputError, match="patch needs source="):
        model.run(SOURCE, target=TARGET, patch={(L_ENC, 1)})
    with pytest.raises(InputError, match="does not exist"):
        model.run(SOURCE, target=TARGET, patch_cross={(9, 1)}, source=OTHER)


def test_patch_cross_on_a_one_text_model_says_why():
    from mha_viz.models.registry import load_model

    with pytest.raises(InputError, match="patch_cross .*no cross-attention|no cross-attention.*patch_cross"):
        load_model("tiny").run("the cat sat", patch_cross={(0, 0)})
