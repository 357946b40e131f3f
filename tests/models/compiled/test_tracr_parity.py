"""Compiled models against Tracr itself: every shipped program, and one this project does not ship, compiled by
Tracr's own `compile_rasp_to_model`, then run in torch (models/compiled/architecture.py) on random valid inputs:
per-head attention equals softmax of Tracr's attn_logits, and the decoded outputs are equal."""
from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest
import torch

if not os.environ.get("CI"):  # in CI (make test installs requirements-compile.txt) a missing Tracr must fail
    pytest.importorskip("tracr", reason="the parity tests need requirements-compile.txt (make test installs it)")

from tracr.compiler import compiling, lib  # noqa: E402
from tracr.rasp import rasp  # noqa: E402

import mha_viz  # noqa: E402
from mha_viz.analysis.census_run import CensusConfig  # noqa: E402
from mha_viz.analysis.written import written_vs_census  # noqa: E402
from mha_viz.contract import InputError, ModelLoadError  # noqa: E402
from mha_viz.models.compiled import architecture as A  # noqa: E402
from mha_viz.models.compiled import config as C  # noqa: E402
from mha_viz.models.compiled import tracr_bridge as B  # noqa: E402

PROGRAMS = sorted((Path(__file__).resolve().parents[3] / "assets" / "compiled").glob("*/program.py"))
N_INPUTS = 12


def _inputs(vocab, max_seq_len, seed=0):
    rng = random.Random(seed)
    vocab = sorted(vocab, key=str)
    return [[rng.choice(vocab) for _ in range(rng.randint(1, max_seq_len))] for _ in range(N_INPUTS)]


def _assert_parity(assembled, config, tensors, vocab, max_seq_len, program):
    """Attention everywhere; the decoded output wherever it is decided: at a position where the program has no value
    (a shift before the text starts) Tracr's argmax picks among tied outputs by float rounding, and two float32
    implementations may pick differently. Such a position is one where RASP's own evaluation gives None, or (where
    RASP cannot evaluate the program, as a Select on a shifted SOp) one whose two best output scores tie."""
    for items in _inputs(vocab, max_seq_len):
        try:
            defined = [i + 1 for i, v in enumerate(rasp.evaluate(program, items)) if v is not None]
        except ValueError:  # RASP's evaluator refuses a comparison with None
            top2 = A.forward(config, tensors, torch.tensor([config.encoding[str(x)] for x in [B.BOS] + items])
                             ).output.topk(min(2, len(config.decoding) or 1), -1).values  # (T, 2)
            defined = [i for i in range(1, len(items) + 1) if top2.shape[-1] < 2 or top2[i, 0] - top2[i, 1] > 1e-3]
        ref = assembled.apply([B.BOS] + items)
        ids = torch.tensor([config.encoding[str(x)] for x in [B.BOS] + items])
        ours = A.forward(config, tensors, ids)
        for layer, logits in enumerate(ref.attn_logits):
            want = torch.softmax(torch.tensor(logits.tolist())[0], -1)  # (H, T, T)
            torch.testing.assert_close(ours.attentions[layer], want, atol=1e-5, rtol=0)
        got = A.decode(config, ours.output)
        got, want = [got[i] for i in defined], [ref.decoded[i] for i in defined]
        if config.categorical:
            assert got == want, (items, got, want)
        else:
            assert got == pytest.approx(want, abs=1e-4), (items, got, want)


@pytest.fixture(scope="module", params=[p.parent.name for p in PROGRAMS])
def shipped(request):
    spec = B.load_program_file(PROGRAMS[[p.parent.name for p in PROGRAMS].index(request.param)])
    assembled = compiling.compile_rasp_to_model(spec["program"], spec["vocab"], spec["max_seq_len"],
                                                causal=spec["causal"], compiler_bos=B.BOS)
    return spec, assembled


def test_every_shipped_program_equals_tracr(shipped):
    spec, assembled = shipped
    config, tensors = B.compile_program(spec["program"], spec["vocab"], spec["max_seq_len"], spec["causal"],
                                        spec["name"], spec["source"])
    _assert_parity(assembled, config, tensors, spec["vocab"], spec["max_seq_len"], spec["program"])
    # Tracr's own model, converted, is the same model
    config2, tensors2 = B.from_assembled(assembled, spec["name"], spec["program"], spec["source"])
    assert config2 == config and tensors2.keys() == tensors.keys()
    assert all(torch.equal(tensors[k], tensors2[k]) for k in tensors)


def test_a_model_converted_without_its_program_is_saved_and_loaded(shipped, tmp_path):
    """from_tracr without program= (optional, its docstring says) -> save_compiled -> load_model: the folder loads,
    the output's label read off the assembled model (the residual space its unembedding reads, which Tracr names
    after the program's output), the same config as with the program but for the heads it names and the source."""
    spec, assembled = shipped
    with_program, _ = B.from_assembled(assembled, spec["name"], spec["program"], spec["source"])
    model = mha_viz.load_model(mha_viz.save_compiled(mha_viz.from_tracr(assembled, spec["name"]), tmp_path / "m"))
    assert model.config.output_label == spec["program"].label
    assert model.config == dataclasses.replace(with_program, heads=(), program="")
    assert model.written_heads() == {}


def test_a_program_not_shipped_is_converted_saved_loaded_and_named(tmp_path):
    """shift_by(2) beside make_frac_prevs: a fixed offset of 2, and a running mean that no census pattern names."""
    shifted = lib.shift_by(2, rasp.tokens).named("two_back")
    frac = lib.make_frac_prevs(rasp.tokens == "x").named("frac_x")
    program = rasp.SequenceMap(lambda a, b: f"{a}:{round(b, 1)}", shifted, rasp.categorical(
        rasp.Map(lambda f: round(f, 1), frac))).named("both")
    # Four items and ten positions: the census's repeated sequences then repeat 4 items, so a head reading two back
    # is not also reading the earlier same token (with 2 items said twice it would be both).
    vocab, n = {"w", "x", "y", "z"}, 10
    assembled = compiling.compile_rasp_to_model(program, vocab, n, causal=True, compiler_bos=B.BOS)
    config, tensors = B.from_assembled(assembled, "two back and a fraction", program)
    patterns = {h.expr.rsplit("_", 1)[0]: h.pattern for h in config.heads}
    assert patterns["two_back"] == "offset"
    assert patterns["frac_x"] == ""  # every earlier position: no census measure is that
    folder = C.save(tmp_path / "m", config, tensors)
    config2, tensors2 = C.load(folder)
    assert config2 == config
    _assert_parity(assembled, config2, tensors2, vocab, n, program)
    # The public path: from_tracr, save_compiled, load_model (no jax on the way back), and the census names it.
    model = mha_viz.load_model(mha_viz.save_compiled(mha_viz.from_tracr(assembled, "not shipped", program),
                                                     tmp_path / "public"))
    census = mha_viz.head_census(model, config=CensusConfig(n_random=12, n_repeated=12, n_loss=2, n_boot=50))
    rows = {r.text.split(" = ")[0].rsplit("_", 1)[0]: r for r in written_vs_census(model.written_heads(), census)}
    assert rows["two_back"].named == "offset" and rows["two_back"].value >= 0.9 and rows["two_back"].agrees
    assert rows["frac_x"].named == "" and rows["frac_x"].agrees  # no measured pattern explains a running mean


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
    with pytest.raises(InputError, match="'a b' holds a space"):  # its folder would be refused, as untypeable
        B.compile_program(lib.make_length(), {"a b", "c"}, 4, True, "spaced")
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
