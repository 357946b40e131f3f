"""Compiled models against Tracr itself: every shipped program, and one this project does not ship, compiled by
Tracr's own `compile_rasp_to_model`, then run in torch (models/compiled/architecture.py) on random valid inputs:
per-head attention equals softmax of Tracr's attn_logits, and the decoded outputs are equal."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

if not os.environ.get("CI"):  # in CI (make test installs requirements-compile.txt) a missing Tracr must fail
    pytest.importorskip("tracr", reason="the parity tests need requirements-compile.txt (make test installs it)")

from tracr.compiler import compiling, lib  # noqa: E402
from tracr.rasp import rasp  # noqa: E402

from mha_viz.contract import InputError, ModelLoadError  # noqa: E402
from mha_viz.models.compiled import architecture as A  # noqa: E402
from mha_viz.models.compiled import config as C  # noqa: E402
from mha_viz.models.compiled import tracr_bridge as B  # noqa: E402

PROGRAMS = sorted((Path(__file__).resolve().parents[3] / "assets" / "compiled" / "programs").glob("*.py"))
N_INPUTS = 12


def _inputs(vocab, max_seq_len, seed=0):
    rng = random.Random(seed)
    vocab = sorted(vocab, key=str)
    return [[rng.choice(vocab) for _ in range(rng.randint(1, max_seq_len))] for _ in range(N_INPUTS)]


def _assert_parity(assembled, config, tensors, vocab, max_seq_len):
    for items in _inputs(vocab, max_seq_len):
        ref = assembled.apply([B.BOS] + items)
        ids = torch.tensor([config.encoding[str(x)] for x in [B.BOS] + items])
        ours = A.forward(config, tensors, ids)
        for layer, logits in enumerate(ref.attn_logits):
            want = torch.softmax(torch.tensor(logits.tolist())[0], -1)  # (H, T, T)
            torch.testing.assert_close(ours.attentions[layer], want, atol=1e-5, rtol=0)
        got = A.decode(config, ours.output)
        if config.categorical:
            assert got == ref.decoded, (items, got, ref.decoded)
        else:
            assert got[1:] == pytest.approx(ref.decoded[1:], abs=1e-4), (items, got, ref.decoded)


@pytest.fixture(scope="module", params=[p.stem for p in PROGRAMS])
def shipped(request):
    spec = B.load_program_file(PROGRAMS[[p.stem for p in PROGRAMS].index(request.param)])
    assembled = compiling.compile_rasp_to_model(spec["program"], spec["vocab"], spec["max_seq_len"],
                                                causal=spec["causal"], compiler_bos=B.BOS)
    return spec, assembled


def test_every_shipped_program_equals_tracr(shipped):
    spec, assembled = shipped
    config, tensors = B.compile_program(spec["program"], spec["vocab"], spec["max_seq_len"], spec["causal"],
                                        spec["name"], spec["source"])
    _assert_parity(assembled, config, tensors, spec["vocab"], spec["max_seq_len"])
    # Tracr's own model, converted, is the same model
    config2, tensors2 = B.from_assembled(assembled, spec["name"], spec["program"], spec["source"])
    assert config2 == config and tensors2.keys() == tensors.keys()
    assert all(torch.equal(tensors[k], tensors2[k]) for k in tensors)


def test_a_program_not_shipped_is_converted_saved_loaded_and_named(tmp_path):
    """shift_by(2) beside make_frac_prevs: a fixed offset of 2, and a running mean that no census pattern names."""
    shifted = lib.shift_by(2, rasp.tokens).named("two_back")
    frac = lib.make_frac_prevs(rasp.tokens == "x").named("frac_x")
    program = rasp.SequenceMap(lambda a, b: f"{a}:{round(b, 1)}", shifted, rasp.categorical(
        rasp.Map(lambda f: round(f, 1), frac))).named("both")
    vocab, n = {"x", "y", "z"}, 6
    assembled = compiling.compile_rasp_to_model(program, vocab, n, causal=True, compiler_bos=B.BOS)
    config, tensors = B.from_assembled(assembled, "two back and a fraction", program)
    patterns = {h.expr.rsplit("_", 1)[0]: h.pattern for h in config.heads}
    assert patterns["two_back"] == "offset -2"
    assert patterns["frac_x"] == ""  # every earlier position: no census measure is that
    folder = C.save(tmp_path / "m", config, tensors)
    config2, tensors2 = C.load(folder)
    assert config2 == config
    _assert_parity(assembled, config2, tensors2, vocab, n)


def test_bad_programs_and_folders_say_what_to_do(tmp_path):
    both = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    anded = rasp.selector_and(both, rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LT))
    with pytest.raises(InputError, match="(?i)tracr"):
        B.compile_program(rasp.numerical(rasp.Aggregate(anded, rasp.numerical(rasp.Map(lambda t: 1, rasp.tokens)),
                                                        default=0)), {"a", "b"}, 4, True, "anded")
    with pytest.raises(InputError, match="RASP SOp"):
        B.compile_program("not a program", {"a"}, 4, True, "text")
    with pytest.raises(InputError, match="BOS"):
        B.compile_program(lib.make_length(), {"a", "BOS"}, 4, True, "bos in vocab")
    config, tensors = B.compile_program(lib.make_length(), {"a", "b"}, 4, False, "length")
    folder = C.save(tmp_path / "ok", config, tensors)
    (folder / C.WEIGHTS_FILE).write_bytes(b"not safetensors")
    with pytest.raises(ModelLoadError, match="compile the program again"):
        C.load(folder)
    (folder / C.WEIGHTS_FILE).unlink()
    with pytest.raises(ModelLoadError, match="mha-viz compile"):
        C.load(folder)
    broken = C.save(tmp_path / "json", config, tensors)
    (broken / C.CONFIG_FILE).write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        C.load(broken)
    missing = tmp_path / "missing.py"
    missing.write_text("vocab = {'a'}\n")
    with pytest.raises(InputError, match="must define program"):
        B.load_program_file(missing)
