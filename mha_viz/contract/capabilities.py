"""What only some models can do: each capability declared with its "not available" answer (None, {}, or an
UnavailableError that says why), which an adapter that can overrides. `Model` derives from these classes, so a
view asks any model and reads the answer, never the model's name or family.

    Capabilities         what several families may have: a mask token, names, weights per head, embeddings,
                         example sentences, a lexicon, the corpus's ground truth, cross-attention (a source and a
                         target, encoder-decoder models), writing a continuation (causal models)
    ProgramCapabilities  a model compiled from a program (or a twin trained on its output): the program's output
                         and the heads the program wrote
    TrainingCapability   a model trained in this repository: its training record
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from mha_viz.contract.records import (
    AttentionRun,
    Continuation,
    Embeddings,
    EncodedText,
    GenerationSettings,
    Head,
    HeadWeights,
    Lexicon,
    ModelInfo,
    UnavailableError,
)

if TYPE_CHECKING:
    from mha_viz.training_record import TrainingEvidence  # the tiny model's record: its own module


class Capabilities:
    """Optional capabilities several model families have; `info` is the model's (see `Model`)."""

    info: ModelInfo
    # Whether the model reads two texts, a source (its encoder's) and a target (its decoder's), with cross-attention
    # heads between them: `run(source, target=..., ablate_cross=...)` and a run's `decoder_attentions` and
    # `cross_attentions` (models/hf/seq2seq.py). False: one self-attention stack over one text.
    has_cross_attention: bool = False

    def decoder_layers(self) -> int:
        """How many decoder layers a model with cross-attention has (each with a self-attention and a
        cross-attention block; `info.n_layers` counts the encoder's); 0 for one stack."""
        return 0

    @property
    def mask_token(self) -> str | None:
        """The token a masked LM predicts at, e.g. "[MASK]"; None for other models."""
        return None

    def name_words(self) -> frozenset[str]:
        """Words this model knows to be parts of people's names, lowercase (the tiny model's first and last names:
        its vocabulary has no capitals, so "anna berg" is a name only because the model says so). Empty for
        models with no such list; the Patching view then takes capitalised words for names."""
        return frozenset()

    def prediction_position(self, run: AttentionRun) -> int | None:
        """Where predictions are read: a causal LM's last position, a masked LM's first mask token; None when
        the model has no LM head or a masked LM's text holds no mask token."""
        if run.logits is None:
            return None
        if self.info.kind == "masked-lm":
            masked = [i for i, t in enumerate(run.tokens) if self.mask_token and t == self.mask_token]
            return masked[0] if masked else None
        return len(run.tokens) - 1

    def head_weights(self, layer: int) -> HeadWeights:
        """One layer's query, key, value and output weights per head (see `HeadWeights`)."""
        raise UnavailableError(f"{self.info.title}: its attention weights per head could not be identified for "
                               "this architecture.")

    def weights_leave_out(self) -> tuple[str, ...]:
        """What this model's attention does to its projected queries, keys or values beyond `head_weights` (a
        qk-norm, OLMo's clip_qkv clamp), one phrase each for the Circuits page: maps read from the weights leave
        it out. () where the weights per head are the whole linear map (the norms between layers, biases and MLPs
        are left out of every model's circuits and not listed here)."""
        return ()

    def embeddings(self) -> Embeddings:
        """The token (and position) embedding and the unembedding (see `Embeddings`)."""
        raise UnavailableError(f"{self.info.title}: its embedding matrices could not be identified for this "
                               "architecture.")

    def ground_truth(self, tokens: list[str]):
        """Where the relations are in this text, when the model's training data defines them (the tiny model's
        corpus grammar); None otherwise."""
        return None

    def examples(self) -> list[tuple[str, str, str]]:
        """(button label, sentence, what to look for) triples offered as one-click examples; [] for none."""
        return []

    def example_pairs(self) -> list[tuple[str, str, str]]:
        """(button label, source, target) triples an encoder-decoder model offers as one-click examples, both of
        its texts at once; [] for a model that reads one text, or has none."""
        return []

    def lexicon(self) -> Lexicon:
        """Whole words this model reads as one token each, sorted by the part they play in a template sentence
        (see `Lexicon`): what the head census builds its inputs from."""
        raise UnavailableError(f"{self.info.title}: no list of single-token words is known for its tokenizer.")

    # -- writing a continuation (causal models; the engine's is models/generation.py) -------------------------
    def cannot_write(self) -> str | None:
        """Why this model cannot write a continuation (`generate`), in one line a page can show before anything
        runs; None where it can."""
        if self.has_cross_attention:
            return (f"{self.info.title} is an encoder-decoder model: its decoder's greedy continuation is what the "
                    "Target box shows when left empty; Continue writes with one-text causal models (tiny, smollm2).")
        return (f"{self.info.title} is not a causal language model (it is a {self.info.kind} model), so it has no "
                "next token to write; load a causal model such as tiny or smollm2 to continue a text.")

    def end_of_text(self) -> frozenset[int]:
        """The token ids that end a continuation (a causal LM's end-of-text token): writing stops after writing
        one. Empty where the model has none (the tiny model): only the token limit stops it."""
        return frozenset()

    def generate(self, text: "str | EncodedText", settings: GenerationSettings = GenerationSettings(),
                 ablate: Iterable[Head] = (), ablation: str = "zero",
                 reference: Iterable[str] | None = None) -> Continuation:
        """Write up to `settings.tokens` tokens after `text` (see `GenerationSettings`), with the heads in `ablate`
        switched off as `run` switches them off while every token is written -> a `Continuation` whose attention
        covers the prompt and the written tokens. An UnavailableError (`cannot_write`) where the model cannot."""
        raise UnavailableError(self.cannot_write() or f"{self.info.title} cannot write a continuation.")


class ProgramCapabilities:
    """What a model compiled from a program (models/compiled) or trained on its output (models/twins) answers."""

    def program_output(self, run: AttentionRun) -> list | None:
        """A compiled program's decoded output at each position of `run` (its readout, with the run's heads off);
        None for a model that was not compiled from a program."""
        return None

    def written_heads(self) -> dict:
        """(layer, head) -> what a program wrote into that head (`models.compiled.config.WrittenHead`: its Select,
        in words and as the program's text); {} for a learned model, whose heads no one wrote."""
        return {}


class TrainingCapability:
    """What a model trained in this repository (models/tiny) answers."""

    info: ModelInfo

    def training_evidence(self) -> "TrainingEvidence":
        """The loss log and measured scores of this model's training (see `mha_viz.training_record`)."""
        raise UnavailableError(f"{self.info.title} was not trained here, so it has no training record.")
