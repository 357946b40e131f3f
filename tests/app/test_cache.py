"""The shared run cache is bounded by bytes, keeps recent runs, and never returns another key's run."""
import torch

from mha_viz.contract import AttentionRun
from mha_viz.app.cache import RunCache as _RunCache


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


def test_a_run_larger_than_the_budget_is_still_returned():
    cache = _RunCache(budget_bytes=10)
    run = cache.get(("big",), lambda: _run(50))
    assert run.attentions.shape == (1, 1, 50, 50)
