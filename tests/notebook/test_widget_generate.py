"""`mha_viz.show(model, text, generate=N, seed=...)`: the grid covers the text and what the model wrote (the
written tokens marked), equal to `Model.generate` with the same settings; a switch writes it again with the head
off; a model that cannot write, or a seed without generate=, is refused before anything runs."""
from __future__ import annotations

import pytest
import torch

import mha_viz
from mha_viz.contract import InputError, UnavailableError
from mha_viz.contract.records import GenerationSettings

TEXT = "anna berg went to the market . tom lind saw"


@pytest.fixture(scope="module")
def tiny():
    return mha_viz.load_model("tiny")


def test_show_draws_the_written_continuation(tiny):
    w = mha_viz.show(tiny, TEXT, generate=6, display=False)
    want = tiny.generate(TEXT, GenerationSettings(tokens=6))
    assert torch.equal(w.run.attentions, want.run.attentions)
    labels = w.grid["tokens"]
    assert len(labels) == want.n_prompt + 6
    assert [t.endswith("✎") for t in labels] == [i >= want.n_prompt for i in range(len(labels))]


def test_a_seed_samples_the_same_continuation_again(tiny):
    w = mha_viz.show(tiny, TEXT, generate=6, seed=4, temperature=1.5, display=False)
    want = tiny.generate(TEXT, GenerationSettings(tokens=6, sampling=True, temperature=1.5, seed=4))
    assert w.run.token_ids == want.run.token_ids


def test_a_switch_writes_it_again_with_the_head_off(tiny):
    w = mha_viz.show(tiny, TEXT, generate=6, display=False)
    w.heads_off = {(1, 0), (2, 1)}
    want = tiny.generate(TEXT, GenerationSettings(tokens=6), ablate={(1, 0), (2, 1)})
    assert torch.equal(w.run.attentions, want.run.attentions) and w.run.ablated == {(1, 0), (2, 1)}
    base = tiny.generate(TEXT, GenerationSettings(tokens=6))
    r = w.readout  # the first written token, chosen after the same prompt with and without the heads
    assert r["position"] == want.n_prompt - 1
    from mha_viz import analysis

    assert r["kl"] == pytest.approx(analysis.next_token_kl(base.run.logits[0], want.run.logits[0]), rel=1e-5)


def test_refusals_come_before_anything_runs(tiny):
    with pytest.raises(UnavailableError, match="not a causal language model"):
        mha_viz.show("minilm", "Dogs chase cats.", generate=4, display=False)
    with pytest.raises(InputError, match="give generate=N"):
        mha_viz.show(tiny, TEXT, seed=3, display=False)
    with pytest.raises(InputError, match="do not fit"):
        mha_viz.show(tiny, TEXT, generate=1000, display=False)
