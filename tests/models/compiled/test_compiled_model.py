"""The shipped written models behind the contract, with torch alone: tokenising and its errors, the program's
output before and after a head is switched off, inside a head, patching, circuits, and the census naming every
written head as its program wrote it."""
from __future__ import annotations

import pytest
import torch

import mha_viz
from mha_viz.analysis import circuits as circ
from mha_viz.analysis.census_run import CensusConfig
from mha_viz.analysis.written import NO_PATTERN, written_vs_census
from mha_viz.contract import InputError, ModelLoadError

WRITTEN = ("written-three-heads", "written-induction", "written-histogram")
SMALL = CensusConfig(n_random=12, n_repeated=12, n_templates=0, n_loss=4, n_other_sets=2, n_boot=50)


@pytest.fixture(scope="module", params=WRITTEN)
def written(request):
    return mha_viz.load_model(request.param)


@pytest.fixture(scope="module")
def census(written):
    return mha_viz.head_census(written, config=SMALL)


def test_tokens_are_vocabulary_items_with_bos_and_bad_text_says_the_vocabulary(written):
    cfg = written.config
    text = " ".join(cfg.vocab[:2] * 2)
    run = written.run(text)
    assert run.tokens == [cfg.bos] + text.split() and run.special == (0,) and run.logits is None
    with pytest.raises(InputError, match="vocabulary") as err:
        written.run(text + " zebra")
    assert "zebra" in str(err.value) and all(v in str(err.value) for v in cfg.vocab)
    with pytest.raises(InputError, match=f"max_seq_len {cfg.max_seq_len}"):
        written.run(" ".join([cfg.vocab[0]] * (cfg.max_seq_len + 1)))


def test_every_written_head_is_named_by_the_census_as_written(written, census):
    rows = written_vs_census(written.written_heads(), census)
    assert rows and len(rows) == len(written.written_heads())
    for r in rows:
        assert r.agrees, (written.name, r)
        if r.written:
            assert r.head in {h for h, _ in census.named(r.named)}
        else:
            assert NO_PATTERN in r.words()


def test_switching_the_written_previous_token_head_off_breaks_induction():
    model = mha_viz.load_model("written-induction")
    text = "a b c d a b c d"
    on = model.program_output(model.run(text))
    assert on[5:] == ["b", "c", "d", "a"]  # after each repeated token, the token that followed it before
    off = model.program_output(model.run(text, ablate={(0, 0)}))
    assert off[5:] != on[5:]
    # patching the previous-token head from a text in another order points the induction head elsewhere
    patched = model.program_output(model.run(text, patch={(0, 0)}, source="d c b a e a b c"))
    assert patched[5:] != on[5:]


def test_circuits_find_the_written_k_composition_first():
    model = mha_viz.load_model("written-induction")
    c = mha_viz.circuits(model)
    (first, second, _), = c.top_pairs("k", 1)
    assert (first, second) == ((0, 0), (1, 0))


def test_inside_a_head_recomputes_the_weights(written):
    run = written.run(" ".join(written.config.vocab[:3]))
    layer, head = next(iter(written.written_heads()))
    inside = written.inside(" ".join(written.config.vocab[:3]), layer, head)
    torch.testing.assert_close(inside.weights, run.attentions[layer, head], atol=1e-5, rtol=0)


def test_saved_and_loaded_without_jax(tmp_path, written):
    folder = mha_viz.save_compiled(written, tmp_path / "copy")
    again = mha_viz.load_model(folder)
    text = " ".join(written.config.vocab[:3])
    assert again.program_output(again.run(text)) == written.program_output(written.run(text))
    assert again.written_heads() == written.written_heads()
    (tmp_path / "copy" / "weights.safetensors").write_bytes(b"broken")
    with pytest.raises(ModelLoadError, match="compile the program again"):
        mha_viz.load_model(folder)
    with pytest.raises(InputError, match="not compiled"):
        mha_viz.save_compiled(mha_viz.load_model("tiny"), tmp_path / "tiny")


def test_measured_scores_name_written_roles_in_the_induction_and_previous_scores_too():
    """The circuits view's pattern scores (the registry's previous and induction) find the written pair."""
    model = mha_viz.load_model("written-induction")
    texts = ("a b c d a b c d", "e d c b e d c b", "b e a b e a")  # distinct items said twice
    induction, previous = circ.induction_and_previous(model, texts)
    assert float(previous[0, 0]) > 0.99 and float(induction[1, 0]) > 0.99
