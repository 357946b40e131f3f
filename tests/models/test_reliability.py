"""Reliability of Model.run, for every model kind: heads off in bulk, many threads at once, the same bits every time.

* Several heads off, a whole layer off, every head off: still a valid run (rows sum to 1, finite output). With
  every head off no position can read another one, so a position's output depends on its own token only: that
  is checked, not just stated.
* 8 threads share one model (as Streamlit sessions share `st.cache_resource`) with different ablation sets and
  must get what a single thread gets (to 1e-5).
* The same input gives bit-identical results run after run, also after other ablations ran in between (nothing
  per-call is left on the shared model).
"""
from __future__ import annotations

import threading
import time

import pytest
import torch

from helpers import MODELS, assert_valid, loaded

TEXT = "The keys to the old cabinet are on the table."


def _all_heads(model) -> frozenset:
    return frozenset((l, h) for l in range(model.n_layers) for h in range(model.n_heads))


@pytest.mark.parametrize("name", MODELS)
def test_heads_off_in_bulk_stay_valid(name):
    model = loaded(name)
    base = model.run(TEXT)
    assert_valid(model, base)
    last = model.n_layers - 1
    cases = {
        "several": {(0, 0), (0, model.n_heads - 1), (last, 1 % model.n_heads)},
        "layer 0": {(0, h) for h in range(model.n_heads)},
        "last layer": {(last, h) for h in range(model.n_heads)},
        "half the model": {(l, h) for l in range(model.n_layers) for h in range(model.n_heads) if (l + h) % 2},
        "all": _all_heads(model),
    }
    for label, heads in cases.items():
        run = model.run(TEXT, ablate=heads)
        assert_valid(model, run)
        assert run.ablated == frozenset(heads), label
        assert run.tokens == base.tokens
        moved = float((run.output - base.output).abs().max())
        assert moved > 1e-6, f"{label}: switching heads off changed nothing"
        # The layers up to the first ablated one see exactly the same input, so their patterns are unchanged.
        first = min(l for l, _ in heads)
        assert torch.equal(run.attentions[: first + 1], base.attentions[: first + 1]), label


@pytest.mark.parametrize("name", MODELS)
def test_all_heads_off_means_no_position_reads_another(name):
    model = loaded(name)
    off = _all_heads(model)
    a = model.run("the cat sat on the mat", ablate=off)
    b = model.run("the dog sat on the mat", ablate=off)
    assert len(a.tokens) == len(b.tokens)
    same = [i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x == y]
    differ = [i for i in range(len(a.tokens)) if i not in same]
    assert differ and len(same) >= 3, (a.tokens, b.tokens)
    # Positions holding the same token give the same output, however different the rest of the text is.
    assert torch.allclose(a.output[same], b.output[same], atol=1e-4)
    # With the heads on, the changed word reaches the positions after it (for an encoder, all of them).
    a_on, b_on = model.run("the cat sat on the mat"), model.run("the dog sat on the mat")
    after = [i for i in same if i > differ[0]]
    assert not torch.allclose(a_on.output[after], b_on.output[after], atol=1e-4)


def _ablation_sets(model, n: int = 8) -> list[frozenset]:
    sets = [frozenset()]  # one thread runs with every head on
    for i in range(1, n):
        sets.append(frozenset({(i % model.n_layers, (i * 5) % model.n_heads),
                               ((i * 3) % model.n_layers, (i + 1) % model.n_heads)}))
    sets[-1] = _all_heads(model)  # and one with every head off
    return sets


@pytest.mark.parametrize("name", ["smollm2", "tiny", "tiny-untrained", "minilm"])
def test_threads_get_their_own_results(name):
    model = loaded(name)
    sets = _ablation_sets(model)
    expected = [model.run(TEXT, ablate=s) for s in sets]
    rounds = 1 if name == "smollm2" else 3
    got: list[list] = [[] for _ in sets]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(sets))

    def work(i: int) -> None:
        try:
            barrier.wait(timeout=60)
            for _ in range(rounds):
                got[i].append(model.run(TEXT, ablate=sets[i]))
        except BaseException as err:  # reported below, with the thread it came from
            errors.append(err)

    t0 = time.monotonic()
    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(sets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    elapsed = time.monotonic() - t0
    assert not any(t.is_alive() for t in threads), "a thread did not finish within 180 s"
    assert not errors, errors
    # Not bit equality: matmul kernels may take another path for differently aligned buffers in another thread, and
    # SmolLM2's logits (tens in size) then move by ~1e-4. What must hold is that each thread got its own run: its
    # result is at least 100x closer to the single-threaded run of its own heads-off set than any other set is.
    def gap(a: torch.Tensor, b: torch.Tensor) -> float:
        return float((a - b).abs().max())

    worst = 0.0
    for i, (want, runs) in enumerate(zip(expected, got)):
        nearest_other = min(gap(expected[j].output, want.output) for j in range(len(sets)) if j != i)
        assert nearest_other > 1e-3, f"set {i} barely moves the output, so a mix-up could not be seen"
        assert len(runs) == rounds
        for run in runs:
            assert run.ablated == sets[i]
            err = gap(run.output, want.output)
            worst = max(worst, err / nearest_other)
            assert err * 100 < nearest_other, f"thread {i} ({sorted(sets[i])[:3]}...): {err:.2e} from its own " \
                f"run, {nearest_other:.2e} between sets: it saw another thread's ablation"
            assert torch.allclose(run.attentions, want.attentions, atol=1e-4), f"thread {i}: attentions differ"
            if want.logits is not None:
                assert gap(run.logits, want.logits) * 100 < min(
                    gap(expected[j].logits, want.logits) for j in range(len(sets)) if j != i)
    print(f"\n[threads] {name}: {len(sets)} threads x {rounds} runs in {elapsed:.1f} s; largest difference from "
          f"the single-threaded run: {worst:.1e} of the nearest other set's")


@pytest.mark.parametrize("name", MODELS)
def test_bit_identical_run_after_run(name):
    model = loaded(name)
    first = model.run(TEXT)
    model.run(TEXT, ablate={(0, 0), (model.n_layers - 1, model.n_heads - 1)})
    model.run("Something else entirely, with other words.", ablate=_all_heads(model))
    for _ in range(2):
        again = model.run(TEXT)
        assert again.tokens == first.tokens and again.token_ids == first.token_ids
        assert torch.equal(again.attentions, first.attentions)
        assert torch.equal(again.output, first.output)
        assert (again.logits is None) == (first.logits is None)
        if first.logits is not None:
            assert torch.equal(again.logits, first.logits)
    ablated = [model.run(TEXT, ablate={(0, 1)}) for _ in range(2)]
    assert torch.equal(ablated[0].output, ablated[1].output)
    assert torch.equal(ablated[0].attentions, ablated[1].attentions)
