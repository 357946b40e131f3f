"""The meanings of "off": what a switched-off head outputs instead (`Ablation` and one subclass per meaning),
how another text's outputs line up with a run (`line_up`) and which texts mean and resample ablation read
(`reference_texts`). Each meaning computes its replacement through the `Model` interface alone, so the engine
(models/edits.py) and the encoder-decoder models (models/hf/seq2seq.py) apply every meaning the same way. Adding a
meaning of "off" is one subclass here.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, ClassVar, Iterable, Sequence

import torch

from mha_viz.contract.records import EncodedText, InputError, check_text

if TYPE_CHECKING:
    from mha_viz.contract.model import Model


class Ablation(str):
    """What switching a head off sets its output to (its slice of the output projection's input).

    One subclass per meaning, owning its words and the replacement it computes: adding a meaning of "off" is one
    subclass here. The URL parser, the sidebar's picker and help, Inside a head, the notes, the census and every
    intervention read from it. An Ablation is a str equal to its `key` (the value of `?ablation=` in a link), so
    `run.ablation == "mean"` holds and it hashes as that string in caches. `Ablation.of(value)` turns a string (or
    an Ablation) into one, or raises an InputError listing the meanings there are.
    """

    key: ClassVar[str]
    label: ClassVar[str]  # short, for a picker: "zero", "mean"
    describe: ClassVar[str]  # completes "a head switched off has its output ...": "set to zero"
    adjective: ClassVar[str]  # "zero-ablated"
    help: ClassVar[str]  # one or two sentences for the sidebar's help and the notes
    source: ClassVar[str] = ""  # the paper the meaning comes from, where there is one
    _KINDS: ClassVar[dict[str, type["Ablation"]]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        Ablation._KINDS[cls.key] = cls

    def __new__(cls, value: str | None = None):
        if cls is Ablation:
            return Ablation.of(value)
        return super().__new__(cls, cls.key)

    def __reduce__(self):
        return (type(self), ())

    @staticmethod
    def of(value) -> "Ablation":
        if isinstance(value, Ablation):
            return value
        kind = Ablation._KINDS.get(value) if isinstance(value, str) else None
        if kind is None:
            raise InputError(f"ablation must be one of {', '.join(map(repr, Ablation._KINDS))}; "
                             f"got {str(value)[:30]!r}")
        return kind()

    @staticmethod
    def kinds() -> tuple["Ablation", ...]:
        """Every meaning of "off", in the order they were defined (the first is the default)."""
        return tuple(kind() for kind in Ablation._KINDS.values())

    def help_for(self, model: "Model") -> str:
        """`help` as it holds for `model`; a meaning whose words depend on the model (mean: which positions it
        averages) says so here."""
        return self.help

    def outputs(self, model: "Model", reference: Iterable[str] | None) -> torch.Tensor | None:
        """What a switched-off head outputs instead, the same vector at every position -> (L, H, dh), one row per
        layer of heads the model edits (`Model.head_means`' layers), or None for zero (cheaper than a tensor of
        zeros: the edit multiplies by 0 and adds nothing). A meaning whose replacement differs by position
        overrides `replacements` instead."""
        raise NotImplementedError(f"{type(self).__name__} gives one output per position: ask for its "
                                  "replacements(model, reference, text, lengths)")

    def replacements(self, model: "Model", reference: Iterable[str] | None, text: "str | EncodedText",
                     lengths: Sequence[int]) -> list[torch.Tensor | None]:
        """What the switched-off heads output instead in a run on `text`, one entry per layer of heads the model
        edits, in `Model.layer_outputs`' order (one text: its L layers; an encoder-decoder model: its encoder's,
        its decoder's, then its cross-attention layers): (H, 1, dh), one vector for every position, or
        (H, lengths[i], dh), one per position of that layer's queries; None for zero. `lengths[i]` is how many
        positions layer i's heads have in the run. By default `outputs`, the same at every position.

        This is the one implementation of a meaning of "off" that every model reads: the one-text engine through
        `replacement`, an encoder-decoder model per layer of each kind."""
        out = self.outputs(model, reference)  # (L, H, dh) or None
        return [None] * len(lengths) if out is None else list(out[:, :, None])  # L x (H, 1, dh)

    def replacement(self, model: "Model", reference: Iterable[str] | None,
                    text: "str | EncodedText") -> torch.Tensor | None:
        """`replacements` for a model with one text: (L, H, 1, dh), one vector for every position, or
        (L, H, T, dh), one per position of `text`'s T tokens; None for zero. `text` is the run's `EncodedText`
        when the engine asks (checked once, at the run's entry), or a str from any other caller."""
        text = model.encode_text(text)  # a str is checked and encoded here; a run's EncodedText is taken as it is
        parts = self.replacements(model, reference, text, [text.n_tokens] * model.n_layers)
        return None if all(p is None for p in parts) else torch.stack(parts)  # (L, H, T or 1, dh)


class ZeroAblation(Ablation):
    key = "zero"
    label = "zero"
    describe = "set to 0"
    adjective = "zero-ablated"
    help = ("A head switched off outputs zero: its contribution to the layer's output is removed. Zero is a value "
            "the head never produces, so zero ablation can overstate its role.")

    def outputs(self, model, reference):
        return None


class MeanAblation(Ablation):
    key = "mean"
    label = "mean"
    describe = "set to its average over the example sentences"
    adjective = "mean-ablated"
    help = ("A head switched off outputs its average output instead: its mean over the example sentences run with "
            "every head on, the same vector at every position. It removes what the head says about this input "
            "while keeping its typical output.")
    source = "Wang et al. 2022, IOI (theirs is position by position, over aligned template sentences)"

    def help_for(self, model: "Model") -> str:
        """The help with which positions the mean takes and how sentences weigh, in `model`'s words
        (`Model.mean_over`): the engine's definition differs from an encoder-decoder model's."""
        return (f"A head switched off outputs its average output instead: the mean over {model.mean_over}, with "
                "every head on, the same vector at every position. It removes what the head says about this input "
                "while keeping its typical output.")

    def outputs(self, model, reference):
        return model.head_means(reference)  # (L, H, dh)


class ResampleAblation(Ablation):
    """Each switched-off head's output, position by position, from a run (all heads on) on another text of the
    reference set. The pick, whole:

    - the candidates are the reference texts in their order: `reference` as given (each checked with
      `check_text`), or, when `reference` is None, the sentences of `model.examples()` in the order the model
      lists them (`reference_texts`);
    - a candidate is the same as the text being run when the two are equal after `str.strip()` (stripped-string
      equality on the texts as `check_text` leaves them: no case folding, no comparison of tokens); every such
      candidate is left out, however often the run's text is listed, and the rest keep their order; if no
      candidate is left, the pick fails with an InputError asking for other texts;
    - the pick is `random.Random(seed).choice(others)`, a generator of its own seeded with `ResampleAblation.seed`
      (0) for each pick, so every run with the same reference set and text takes the same text, on every page
      load and in every process; reordering the reference set can change the pick;
    - duplicates are kept: a text listed twice among the others is twice as likely to be picked.

    Position i of the run takes position i of that text (`line_up`); where the text is shorter, the positions
    past its end take its last position's output."""

    key = "resample"
    label = "resample"
    describe = "taken from a run on another example sentence"
    adjective = "resample-ablated"
    help = ("A head switched off outputs, position by position, what it output on another example sentence (one "
            "picked by a fixed seed, run with every head on): an output the head really produces, just not for "
            "this input (causal scrubbing's resampling). Positions past the end of the other sentence take its "
            "last position's output.")
    source = "Chan et al. 2022, causal scrubbing"
    seed = 0  # which reference text is picked; fixed, so a run is the same on every page load

    def chosen(self, model: "Model", reference: Iterable[str] | None, text: "str | EncodedText") -> str:
        """The reference text whose head outputs a run on `text` takes (see the class docstring for the pick), or
        an InputError when there is no other."""
        run_text = text.text if isinstance(text, EncodedText) else check_text(text)
        others = [t for t in reference_texts(model, reference) if t.strip() != run_text.strip()]
        if not others:
            raise InputError("resample ablation takes each head's output from another text, and the reference set "
                             "holds only this one: pass reference=[other texts]")
        return random.Random(self.seed).choice(others)

    def replacements(self, model, reference, text, lengths):
        other = model.layer_outputs(self.chosen(model, reference, text))  # per layer (H, P, dh)
        return [line_up(out[None], n)[0] for out, n in zip(other, lengths)]  # per layer (H, lengths[i], dh)


def line_up(outputs: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """Head outputs of another text (L, H, P, dh) -> (L, H, n_tokens, dh) for a run of `n_tokens` positions:
    position i takes position i (the texts are read from their first token on, as patching reads them); where the
    other text is shorter, positions past its end take its last position's output (clipped, not cycled: cycling
    would put its first position, often an attention sink with outlier outputs, in the middle of the run)."""
    index = torch.arange(n_tokens).clamp_max(outputs.shape[2] - 1)  # (T,)
    return outputs[:, :, index]  # (L, H, T, dh)


def reference_texts(model: "Model", reference: Iterable[str] | None) -> tuple[str, ...]:
    """The texts mean and resample ablation read: `reference` checked, or the model's example sentences (None)."""
    if reference is None:
        texts = tuple(text for _, text, _ in model.examples())
        if not texts:
            raise InputError(f"{model.name} has no example sentences to take head outputs from; pass "
                             "reference=[some texts] for mean or resample ablation")
        return texts
    if isinstance(reference, str):
        raise InputError("reference must be a list of texts, not one text: wrap it as [text]")
    texts = tuple(check_text(t) for t in reference)
    if not texts:
        raise InputError("reference is empty: give at least one text to take head outputs from")
    return texts


ABLATIONS = tuple(Ablation._KINDS)  # the keys, for URL parsing and pickers: ("zero", "mean", "resample")


def check_ablation(ablation) -> Ablation:
    """What "off" means, as an Ablation (from its key or itself), or an InputError listing the meanings."""
    return Ablation.of(ablation)

