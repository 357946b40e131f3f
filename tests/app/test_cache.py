"""The shared run cache is bounded by bytes, keeps recent runs, and never returns another key's run; runs in
flight count against the same budget."""
import threading

import pytest
import torch

from mha_viz.app.memory import attention_bytes
from mha_viz.app.run_cache import RunBudgetError
from mha_viz.app.run_cache import RunCache as _RunCache
from mha_viz.contract import AttentionRun


def _run(n_tokens: int) -> AttentionRun:
    att = torch.full((1, 1, n_tokens, n_tokens), 1.0 / n_tokens)  # (L, H, Q, K)
    return AttentionRun(tokens=["t"] * n_tokens, attentions=att, ablated=frozenset(), output=torch.zeros(n_tokens, 4))


def test_cache_evicts_least_recently_used_past_its_byte_budget():
    one = _run(100)  # 40,000 B of attention + 1,600 B of output
    cache = _RunCache(budget_bytes=100_000)
    made = []

    def make(key):
        made.append(key)
        return _run(100)

    for key in ["a", "b"]:
        cache.get((key,), lambda key=key: make(key))
    cache.get(("a",), lambda: make("a-again"))  # a hit: "a" becomes the most recent
    cache.get(("c",), lambda: make("c"))  # 3 runs > budget: "b", the least recent, goes
    assert made == ["a", "b", "c"]
    cache.get(("a",), lambda: make("a-again"))
    cache.get(("b",), lambda: make("b-again"))
    assert made == ["a", "b", "c", "b-again"]
    assert one.attentions.numel() * 4 == 40_000


def test_the_engines_kept_layers_count_against_the_same_budget():
    """The layers the engine keeps for incremental runs (`interventions.reuse_bytes`) are held beside the cache's
    runs: with 60,000 B of them, two 41,600 B runs no longer fit a 100,000 B budget, and the older one goes."""
    held = [0]
    cache = _RunCache(budget_bytes=100_000, beside=lambda: held[0])
    cache.get(("a",), lambda: _run(100))
    assert cache.peek(("a",)) is not None
    held[0] = 60_000
    cache.get(("b",), lambda: _run(100))
    assert cache.peek(("a",)) is None and cache.peek(("b",)) is not None
    # A run that needs the engine's memory gets it: waiting would free nothing, so the kept layers are dropped.
    dropped = []
    cache = _RunCache(budget_bytes=100_000, beside=lambda: held[0], drop_beside=lambda: (dropped.append(1),
                                                                                        held.__setitem__(0, 0)))
    cache.get(("c",), lambda: _run(100), need=50_000)
    assert dropped and cache.peek(("c",)) is not None
    # the page's own cache counts the engine's
    from mha_viz.app import cache as page_cache
    from mha_viz.models import interventions
    assert page_cache.runs()._beside is interventions.reuse_bytes


def test_a_run_larger_than_the_budget_is_still_returned():
    cache = _RunCache(budget_bytes=10)
    run = cache.get(("big",), lambda: _run(50))
    assert run.attentions.shape == (1, 1, 50, 50)


# -- runs in flight share the budget ---------------------------------------------------------------------------


def test_a_run_that_alone_exceeds_the_budget_is_refused_before_it_starts():
    cache = _RunCache(budget_bytes=1000)
    made = []
    with pytest.raises(RunBudgetError, match="shorter text"):
        cache.get(("big",), lambda: made.append(1), need=40_000)
    assert made == [] and cache.flight_bytes() == 0


def test_a_run_waits_for_others_in_flight_then_starts_and_keeps_within_the_budget():
    """Two runs of 30 kB under a 50 kB budget: the second waits (on_wait says so) until the first is done, so at
    no time do the runs in flight and the kept runs together hold more than the budget."""
    cache = _RunCache(budget_bytes=50_000, wait_s=30)
    first_started, release = threading.Event(), threading.Event()
    held, waited = [], []

    def slow():
        first_started.set()
        release.wait(10)
        held.append(cache.flight_bytes())
        return _run(50)  # 10 kB of attention kept

    t = threading.Thread(target=lambda: cache.get(("a",), slow, need=30_000))
    t.start()
    first_started.wait(10)
    second = threading.Thread(target=lambda: cache.get(("b",), lambda: held.append(cache.flight_bytes())
                                                       or _run(50), need=30_000,
                                                       on_wait=lambda flight, n: waited.append((flight, n))))
    second.start()
    second.join(0.3)
    assert second.is_alive() and waited == [(30_000, 1)], "the second run should be queued behind the first"
    release.set()
    t.join(10)
    second.join(10)
    assert not second.is_alive() and held == [30_000, 30_000]
    assert cache.kept_bytes() + cache.flight_bytes() <= 50_000


def test_a_run_that_cannot_fit_in_time_is_refused_with_a_busy_message():
    cache = _RunCache(budget_bytes=50_000, wait_s=0.2)
    release = threading.Event()
    t = threading.Thread(target=lambda: cache.get(("a",), lambda: release.wait(10) and _run(5), need=40_000))
    t.start()
    try:
        while cache.flight_bytes() == 0:
            release.wait(0.01)
        with pytest.raises(RunBudgetError, match="busy"):
            cache.get(("b",), lambda: _run(5), need=40_000)
    finally:
        release.set()
        t.join(10)


def test_sessions_asking_for_the_same_run_at_once_share_one_forward_pass():
    cache = _RunCache(budget_bytes=10**6)
    started, release, made = threading.Event(), threading.Event(), []

    def make():
        made.append(1)
        started.set()
        release.wait(10)
        return _run(10)

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get(("same",), make, need=400)))
               for _ in range(3)]
    threads[0].start()
    started.wait(10)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert made == [1] and len(results) == 3 and all(r is results[0] for r in results)


def test_the_estimate_is_the_attention_the_run_holds():
    from helpers import loaded

    model = loaded("tiny")
    text = "the cat sat on the mat"
    run = model.run(text)
    assert attention_bytes(model, text) == run.attentions.numel() * run.attentions.element_size()


def test_the_page_refuses_a_run_over_the_budget_with_what_to_do(monkeypatch):
    """Through the page: a text whose attention alone exceeds MHA_VIZ_RUN_CACHE_MB is refused before its
    forward pass, with the page's warning (a shorter text), not an exception; a short text still runs."""
    from streamlit.testing.v1 import AppTest

    import mha_viz.app.cache as cache

    from helpers import APP
    from page_steps import send_sentence

    monkeypatch.setenv("MHA_VIZ_RUN_CACHE_MB", "1")
    cache.runs.cache_clear()
    try:
        at = AppTest.from_file(APP, default_timeout=180).run()
        assert not at.exception and len(at.toggle) == 12, at.exception  # MiniLM's default sentence: 0.1 MB
        words = " ".join(["the cat sat on the mat"] * 40)  # 240 words: 6 x 12 x 242² x 4 B = 16 MB of attention
        send_sentence(at, words)
        warnings = [w.value for w in at.warning]
        assert any("shorter text" in w and "MHA_VIZ_RUN_CACHE_MB" in w for w in warnings), warnings
        assert cache.runs().flight_bytes() == 0 and cache.runs().kept_bytes() <= 2**20
    finally:
        cache.runs.cache_clear()


def test_a_reservation_covers_the_runs_made_inside_it_and_holds_back_other_work():
    cache = _RunCache(budget_bytes=100_000, wait_s=0.2)
    with cache.reserve(80_000):
        assert cache.flight_bytes() == 80_000
        cache.get(("inside",), lambda: _run(10), need=80_000)  # covered: no second reservation, no refusal
        other = []
        t = threading.Thread(target=lambda: other.append(pytest.raises(RunBudgetError, cache.get, ("x",),
                                                                       lambda: _run(10), need=40_000)))
        t.start()
        t.join(10)
        assert other and "busy" in str(other[0].value)  # another thread's work does not fit beside it
    assert cache.flight_bytes() == 0
    with pytest.raises(RunBudgetError, match="This page would need about"):
        with cache.reserve(200_000):
            pass


def test_inside_a_page_scope_each_text_holds_its_share_until_the_page_is_drawn():
    """page.main and the heads-and-views fragment run in a memory scope: a run found in the cache still holds
    the page's share (the page copies it), once per text, and the share goes back when the scope ends."""
    from mha_viz.app.memory import memory_scope_of_run

    cache = _RunCache(budget_bytes=100_000)
    cache.get(("kept",), lambda: _run(10))
    with memory_scope_of_run():
        cache.get(("kept",), lambda: _run(10), need=30_000, scope_key="text a")  # found, still held
        assert cache.flight_bytes() == 30_000
        cache.get(("a, head off",), lambda: _run(10), need=30_000, scope_key="text a")  # same text: no more
        assert cache.flight_bytes() == 30_000
        cache.get(("b",), lambda: _run(10), need=20_000, scope_key="text b")
        assert cache.flight_bytes() == 50_000
    assert cache.flight_bytes() == 0


def test_a_long_job_borrows_idle_cores_only_alone_and_gives_them_back():
    """The exact maps may use the idle cores; torch's thread count is process-wide, so only while
    nothing else runs in the process or on the machine, and never past a page run that opens meanwhile."""
    from mha_viz.app.threads import long_job_threads

    assert long_job_threads(others=0.1, pages=1, long_jobs=1, cores=2, base=1) == 2
    assert long_job_threads(others=0.1, pages=2, long_jobs=1, cores=2, base=1) == 1  # another page run is open
    assert long_job_threads(others=0.1, pages=1, long_jobs=2, cores=2, base=1) == 1  # another long job
    assert long_job_threads(others=0.8, pages=1, long_jobs=1, cores=2, base=1) == 1  # the machine is busy
    assert long_job_threads(others=0.0, pages=0, long_jobs=1, cores=1, base=1) == 1  # nothing to borrow


def test_long_job_threads_follow_the_machine_and_other_page_runs(monkeypatch):
    from mha_viz.app import memory, threads
    from mha_viz.settings import settings

    base = settings().torch_threads
    clock = {"t": 0.0, "busy": 0.0, "own": 0.0}
    monkeypatch.setattr(threads, "_cores", lambda: base + 1)
    monkeypatch.setattr(threads, "_cpu_sample", lambda: (clock["t"], clock["busy"], clock["own"]))

    def chunk(own: float, others: float) -> None:  # one second of work: this process's cores, and the rest's
        clock["t"] += 1.0
        clock["own"] += own
        clock["busy"] += own + others

    torch.set_num_threads(base)
    try:
        with memory.memory_scope_of_run(), threads.long_job() as tick:  # as the page runs it: inside its page run
            chunk(1.0, 0.1)
            assert tick() == base + 1 and torch.get_num_threads() == base + 1  # idle machine: borrowed
            opened, release = threading.Event(), threading.Event()

            seen = {}

            def other_page():
                with memory.memory_scope_of_run():  # another session's page run, in its own thread
                    seen["page"] = torch.get_num_threads()
                    opened.set()
                    release.wait(10)

            def later_thread():
                seen["later"] = torch.get_num_threads()

            t = threading.Thread(target=other_page)
            t.start()
            assert opened.wait(10)
            later = threading.Thread(target=later_thread)
            later.start()
            later.join()
            # The opening page run and every thread after it are back on the setting at once ...
            assert seen == {"page": base, "later": base}, seen
            chunk(1.0, 0.0)
            # ... and the job drops its own borrowed threads at its next chunk.
            assert tick() == base  # and the job does not borrow them again while it is open
            release.set()
            t.join()
            chunk(1.0, 0.9)
            assert tick() == base  # another process used most of a core
            chunk(2.0, 0.0)
            assert tick() == base + 1
        assert torch.get_num_threads() == base, "the threads go back when the job ends"
    finally:
        torch.set_num_threads(base)


def test_a_long_job_looks_at_the_machine_before_its_first_chunk(monkeypatch):
    """A short job is one or two chunks: on an idle machine its first chunk borrows the cores already."""
    from mha_viz.app import memory, threads
    from mha_viz.settings import settings

    base = settings().torch_threads
    clock = {"t": 0.0, "busy": 0.0, "own": 0.0, "others": 0.0}
    monkeypatch.setattr(threads, "_cores", lambda: base + 1)
    monkeypatch.setattr(threads, "_cpu_sample", lambda: (clock["t"], clock["busy"], clock["own"]))

    def sleep(seconds: float) -> None:  # the first look: the rest of the machine uses `others` cores meanwhile
        clock["t"] += seconds
        clock["busy"] += seconds * clock["others"]

    monkeypatch.setattr(threads.time, "sleep", sleep)
    torch.set_num_threads(base)
    try:
        for others, wanted in ((0.1, base + 1), (0.9, base)):
            clock["others"] = others
            with memory.memory_scope_of_run(), threads.long_job():
                assert torch.get_num_threads() == wanted, (others, wanted)
            assert torch.get_num_threads() == base
    finally:
        torch.set_num_threads(base)


def test_a_short_texts_exact_map_is_priced_per_token_on_a_longer_forward(monkeypatch):
    """The button's "about N s": a lone forward of a 14-token text is mostly per-call cost the map's batches do not
    pay (SmolLM2: 24 ms a token alone, 5.5 in the map), so a short text is timed on itself said over again to about
    CALIBRATION_TOKENS tokens (cut to the model's max), per token."""
    from mha_viz.app import cache, estimates

    model = cache.get_model("tiny")
    text = "anna berg went to the market ."
    n = model.token_count(text)
    seen = []
    real = model.head_outputs
    monkeypatch.setattr(model, "head_outputs", lambda t, *a, **k: seen.append(model.token_count(t)) or real(t, *a, **k))
    clock = iter([10.0, 12.0])  # the forward takes 2 s
    monkeypatch.setattr(estimates.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(estimates, "_FORWARD_SECONDS", {})
    monkeypatch.setattr(estimates, "_EXACT_FACTOR", {})  # no finished map of another test corrects this estimate
    got = estimates.exact_seconds("tiny", text, model.n_layers * model.n_heads)
    m = min(model.info.max_tokens, estimates.CALIBRATION_TOKENS)
    assert n < m and seen == [m]
    assert got == pytest.approx(2.0 * n / m * model.single_head_work(text))


def test_a_finished_exact_map_corrects_the_next_estimate(monkeypatch):
    """The button's "about N s" learns from the last finished map of the model: a map priced at 10 s that took
    13 s makes the next estimate of the same work 1.3x, whatever it was; other models are not touched; a map that
    took absurdly long moves it by at most EXACT_FACTOR_RANGE."""
    from mha_viz.app import cache, estimates

    model = cache.get_model("tiny")
    text = "anna berg went to the market ."
    monkeypatch.setattr(estimates, "_FORWARD_SECONDS", {("tiny", model.token_count(text)): 0.5})
    monkeypatch.setattr(estimates, "_EXACT_FACTOR", {})
    n = model.n_layers * model.n_heads
    first = estimates.exact_seconds("tiny", text, n)
    estimates.exact_finished("tiny", first, 1.3 * first)
    assert estimates.exact_seconds("tiny", text, n) == pytest.approx(1.3 * first)
    again = estimates.exact_seconds("tiny", text, n)  # priced with the factor: learning from it again is not compounded
    estimates.exact_finished("tiny", again, again)
    assert estimates.exact_seconds("tiny", text, n) == pytest.approx(again)
    assert "tiny-untrained" not in estimates._EXACT_FACTOR
    estimates.exact_finished("tiny", again, 1e6 * again)
    assert estimates.exact_seconds("tiny", text, n) == pytest.approx(first * estimates.EXACT_FACTOR_RANGE[1])
