"""An encoder-decoder model reads the contract's meanings of "off": a new meaning is one `Ablation` subclass that
switches off heads of every kind, and resample's seeded pick is the contract's (issue 53, item 1)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mha_viz.contract import Ablation, ResampleAblation  # noqa: E402
from mha_viz.models.hf.loading import load_custom  # noqa: E402
from tests.models.hf.test_seq2seq import OTHER, SOURCE, TARGET, seq2seq_folder  # noqa: E402

REFERENCE = [SOURCE, OTHER, "the cat flew over the park"]
SELF_HEADS = {(0, 1), (3, 2)}  # an encoder head and a decoder self-attention head (encoder layers come first)
CROSS_HEADS = {(1, 2)}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return load_custom(str(seq2seq_folder(tmp_path_factory.mktemp("bart"), arch="bart")))


def test_a_new_meaning_of_off_is_one_class_for_every_kind_of_head(model):
    """A made-up meaning (half the head's mean), one subclass that writes `outputs` only, switches off encoder,
    decoder and cross-attention heads, in a run and in opening a head, with no change to the model."""

    class HalfMean(Ablation):
        key = "half-mean-seq2seq-test"
        label = "half the mean"
        describe = "set to half its mean"
        adjective = "half-mean-ablated"
        help = "for a test"

        def outputs(self, model, reference):
            return 0.5 * model.head_means(reference)  # (L_enc + 2 L_dec, H, dh)

    try:
        run = model.run(SOURCE, target=TARGET, ablate=SELF_HEADS, ablate_cross=CROSS_HEADS,
                        ablation="half-mean-seq2seq-test", reference=REFERENCE)
        assert isinstance(run.ablation, HalfMean)
        means = model.head_means(REFERENCE)  # (L_enc + 2 L_dec, H, dh)
        n_self = model.n_enc + model.n_dec
        replace = {(layer, head): 0.5 * means[layer, head] for layer, head in SELF_HEADS}
        replace.update({(n_self + layer, head): 0.5 * means[n_self + layer, head] for layer, head in CROSS_HEADS})
        src, tgt = model._source_ids(SOURCE), model._target_ids(TARGET)
        by_hand = model._forward(src, tgt, replace)
        assert torch.allclose(run.logits, by_hand.logits[0].float(), atol=1e-5)
        mean = model.run(SOURCE, target=TARGET, ablate=SELF_HEADS, ablate_cross=CROSS_HEADS, ablation="mean",
                         reference=REFERENCE)
        assert (run.logits - mean.logits).abs().max() > 1e-4, "half the mean is not the mean"
        inside = model.inside(SOURCE, 1, 2, kind="Cross", target=TARGET, ablate_cross=CROSS_HEADS,
                              ablation="half-mean-seq2seq-test", reference=REFERENCE)
        assert inside.ablated
    finally:
        Ablation._KINDS.pop("half-mean-seq2seq-test", None)


def test_resample_takes_the_contracts_pick(model, monkeypatch):
    """Which reference source a resampled head reads is `ResampleAblation.chosen`'s answer, the one-text engine's
    pick: whatever it picks, the head takes that source's outputs, position by position."""
    picks = []
    chosen = ResampleAblation.chosen
    monkeypatch.setattr(ResampleAblation, "chosen",
                        lambda self, *args: picks.append(chosen(self, *args)) or picks[-1])
    model.run(SOURCE, target=TARGET, ablate_cross=CROSS_HEADS, ablation="resample", reference=REFERENCE)
    assert picks == [chosen(ResampleAblation(), model, REFERENCE, SOURCE)]
    n_self = model.n_enc + model.n_dec
    src, tgt = model._source_ids(SOURCE), model._target_ids(TARGET)
    for pick in REFERENCE[1:]:
        monkeypatch.setattr(ResampleAblation, "chosen", lambda self, *args, _pick=pick: _pick)
        run = model.run(SOURCE, target=TARGET, ablate_cross=CROSS_HEADS, ablation="resample", reference=REFERENCE)
        outputs = model.head_outputs_all(pick)  # per projection (H, P, dh)
        replace = {}
        for layer, head in CROSS_HEADS:
            other = outputs[n_self + layer][head]  # (P, dh)
            replace[(n_self + layer, head)] = other[torch.arange(len(tgt)).clamp_max(other.shape[0] - 1)]
        assert torch.allclose(run.logits, model._forward(src, tgt, replace).logits[0].float(), atol=1e-5), pick
