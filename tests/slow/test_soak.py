"""Soak: hundreds of reruns with random text and random heads off; no exception, no memory creep.

Resident memory is read after a warm-up and again at the end (after gc and malloc_trim); it must grow by less
than 10%.
Inputs come from a seeded generator (reproducible) plus a short hypothesis run for text nobody thought of.
Run with `-s` to see the figures.
"""
from __future__ import annotations

import gc
import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest

from mha_viz import InputError

from helpers import _rss_mb, assert_valid, loaded


def _settled_rss_mb() -> float:
    """RSS after gc and glibc's malloc_trim: memory that is still in use, not freed pages the allocator keeps
    (torch's intra-op threads each get a malloc arena, whose freed pages otherwise stay resident)."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return _rss_mb()

APP = str(Path(__file__).resolve().parents[2] / "app.py")
N_RUNS, WARM_UP = 300, 30
ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz     ", "ABCDEFGHIJ0123456789.,;:!?'\"()[]{}<>$#*_`~|\\/",
    "我爱自然语言处理日本語한국어", "مرحبابالعالمשלוםעולם", "\u0301\u0336\u200b\u200d\ufeff\u202e",
    "😀👍🏽🇩🇪🤖👨\u200d👩", "\x00\x07\x1b\t\n\r\x7f",
]
WORDS = "the cat sat on mat keys cabinet table anna gave ben dog ran to a and of".split()


def _random_text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:  # sentences of real words, so the models see ordinary input too
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) + rng.choice([".", "?", ""])
    if kind < 0.98:
        alphabet = "".join(rng.sample(ALPHABETS, rng.randint(1, 3)))
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120)))
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(600, 1200)))  # past the token cap


def _random_heads(rng: random.Random, model) -> set:
    n = rng.choice([0, 0, 1, 2, 5, model.n_heads, model.n_layers * model.n_heads])
    every = [(l, h) for l in range(model.n_layers) for h in range(model.n_heads)]
    return set(rng.sample(every, min(n, len(every))))


@pytest.mark.parametrize("name", ["minilm", "tiny"])
def test_model_run_soak(name):
    model = loaded(name)
    rng = random.Random(f"soak-{name}")
    counts = {"runs": 0, "input errors": 0, "truncated": 0}

    def one() -> None:
        text, heads = _random_text(rng), _random_heads(rng, model)
        try:
            run = model.run(text, ablate=heads)
        except InputError:
            counts["input errors"] += 1
            return
        counts["runs"] += 1
        counts["truncated"] += run.truncated > 0
        assert run.ablated == frozenset(heads)
        assert_valid(model, run)

    # Warm-up includes the largest input (the token cap), so the allocator's high-water mark is reached before
    # the baseline is read: growth after that is creep, not the first big tensor.
    longest = " ".join(WORDS * 100)
    model.run(longest)
    model.run(longest, ablate={(0, 0)})
    for _ in range(WARM_UP):
        one()
    before = _settled_rss_mb()
    t0 = time.monotonic()
    for _ in range(N_RUNS):
        one()
    elapsed = time.monotonic() - t0
    after = _settled_rss_mb()
    growth = (after - before) / before
    print(f"\n[soak] {name}: {N_RUNS} runs after {WARM_UP} warm-up in {elapsed:.1f} s ({counts}); "
          f"RSS {before:.0f} -> {after:.0f} MB ({growth:+.1%})")
    assert counts["runs"] > N_RUNS // 2
    assert growth < 0.10, f"resident memory grew {growth:.1%} over {N_RUNS} runs"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(text=st.text(max_size=200), layer=st.integers(-2, 8), head=st.integers(-2, 14))
def test_any_text_and_any_head_is_a_run_or_an_input_error(text, layer, head):
    for name in ("minilm", "tiny-untrained"):
        model = loaded(name)
        try:
            run = model.run(text, ablate={(layer, head)})
        except InputError as err:
            assert "empty" in str(err) or "does not exist" in str(err) or "no words" in str(err), err
            continue
        assert_valid(model, run)


def test_app_rerun_soak():
    """A shorter loop through the page: random sentences, heads toggled, layers switched; never an exception."""
    rng = random.Random("app-soak")
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    assert not at.exception

    def step(i: int) -> None:
        action = i % 3
        if action == 0:
            at.text_area(key="text_box").input(_random_text(rng)[:400] or "x")
            at.button[0].click()
        elif action == 1 and at.toggle:
            toggle = rng.choice(list(at.toggle))
            toggle.set_value(not toggle.value)
        else:
            at.session_state["layer|minilm"] = rng.randrange(6)  # what the grid's layer tabs set
        at.run()
        assert not at.exception, f"step {i}: {at.exception}"

    for i in range(6):
        step(i)
    before = _settled_rss_mb()
    t0 = time.monotonic()
    n = 30
    for i in range(6, 6 + n):
        step(i)
    after = _settled_rss_mb()
    growth = (after - before) / before
    print(f"\n[soak] AppTest: {n} reruns in {time.monotonic() - t0:.1f} s; RSS {before:.0f} -> {after:.0f} MB "
          f"({growth:+.1%}); the run cache holds up to 64 runs by design")
    assert growth < 0.10
