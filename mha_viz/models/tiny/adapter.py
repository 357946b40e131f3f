"""The adapter from TinyLM to the data contract: `load_tiny()` -> a `Model` whose `run(text)` is an AttentionRun.

Token labels are the vocabulary's tokens (lowercased words, and the pieces of a word it does not hold whole, e.g.
"zx ##q ##v"), with "<bos>" first. A character no piece reads (an emoji, a letter of another script) is shown as
typed, fed to the model as <unk>, and its position is listed in `run.unknown`.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file

from mha_viz.contract import (
    Embeddings,
    HeadWeights,
    InputError,
    Lexicon,
    ModelInfo,
    ModelLoadError,
    check_index,
)
from mha_viz.models.interventions import EditableModel, Encoded, FinalParts, Forward, HeadEdit
from mha_viz.models.placement import module_device, place
from mha_viz.models.special import added_positions
from mha_viz.models.tiny.architecture import TinyConfig, TinyLM, build_model, saved_state
from mha_viz.models.tiny.vocabulary import (
    ADJECTIVES,
    BOS,
    FIRST_NAMES,
    LAST_NAMES,
    NOUNS,
    PREPOSITIONS,
    Vocab,
    build_vocab,
    example_sentences,
    ground_truth,
    vocabulary_words,
)
from mha_viz.settings import ASSETS
from mha_viz.training_record import TrainingEvidence

TINY_ASSETS = ASSETS / "tiny"


class TinyModel(EditableModel):
    """A TinyLM behind the contract: its tokenizer and one forward; everything else is the engine's
    (models/interventions.py). Read-only after construction, so one instance can serve every session."""

    def __init__(self, lm: TinyLM, vocab: Vocab, info: ModelInfo, folder: str | Path = TINY_ASSETS):
        if lm.cfg.vocab_size != len(vocab):
            raise ModelLoadError(
                f"the model expects {lm.cfg.vocab_size} words but vocab.json has {len(vocab)}; "
                "the two files come from different training runs: rerun `make train`"
            )
        self.lm = lm.eval()
        self._device = module_device(lm)  # where `load_tiny` placed it (MHA_VIZ_DEVICE)
        self.vocab = vocab
        self.info = info
        self.config = lm.cfg
        self.folder = Path(folder)  # its weights, checkpoints, loss log and probe file

    def decode(self, token_id: int) -> str:
        """The vocabulary word of one id (e.g. to label next-token predictions)."""
        return self.vocab.word(int(token_id))

    def encode(self, text: str) -> tuple[list[str], list[int], int]:
        """Text -> (display labels, token ids, how many tokens were cut off); <bos> first, at most max_len."""
        shown, tokens = self.vocab.read(text)
        if not tokens:
            raise InputError("The text has no words the tokenizer can read: type a sentence.")
        labels = [BOS] + shown
        ids = [self.vocab.bos_id] + self.vocab.encode(tokens)
        cut = max(0, len(ids) - self.config.max_len)  # keep the first max_len tokens
        return labels[: self.config.max_len], ids[: self.config.max_len], cut

    def encoding(self, text: str) -> Encoded:
        labels, ids, cut = self.encode(text)
        added = [1] + [0] * (len(ids) - 1)  # the tokenizer adds only <bos>; an <unk> is the text's, in `unknown`
        return Encoded(ids=ids, labels=labels, dropped=cut, special=added_positions(added),
                       unknown=tuple(i for i, t in enumerate(ids) if t == self.vocab.unk_id))

    can_resume = True  # TinyLM.forward resumes at edit.start
    pads = True  # right padding needs no mask here (see `forward`)
    grows = True  # TinyLM.forward appends a growing batch's rows (HeadEdit.grown)

    def forward(self, ids: torch.Tensor, edit: HeadEdit, attentions: bool = False, lengths=None) -> Forward:
        """`lengths` (rows right-padded) needs nothing more: TinyLM is causal, so no position ever attends to a
        later one, padding included; its positions are numbered from 0 and the rest works per position."""
        ids = ids.to(self._device)  # (B, T)
        logits, hidden, att = self.lm(ids, None, edit, patterns=attentions)  # (B, T, V), (B, T, D), (B, L, H, T, T)
        return Forward(hidden=hidden, logits=logits, attentions=att)

    def output_projection(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.lm.blocks[layer].attn.out
        return out.weight.detach().float().cpu(), out.bias.detach().float().cpu()  # (D, H * dh), (D,)

    def final_parts(self) -> FinalParts:
        ln = self.lm.ln_f
        return FinalParts(gain=ln.weight.detach().float().cpu(), bias=ln.bias.detach().float().cpu(), centered=True,
                          unembed=self.lm.head.weight.detach().float().cpu(), unembed_bias=None)

    def head_weights(self, layer: int) -> HeadWeights:
        """Layer `layer`'s per-head maps, sliced from the fused qkv projection (rows [q; k; v]); their input is the
        block's first LayerNorm output."""
        attn = self.lm.blocks[check_index(layer, self.n_layers, "layer")].attn
        w_q, w_k, w_v = attn.qkv.weight.split(attn.d_model)  # 3 x (D, D) as nn.Linear stores them
        b_q, b_k, b_v = attn.qkv.bias.split(attn.d_model)  # 3 x (D,)
        return self.head_weights_from(layer, w_q, w_k, w_v, b_q, b_k, b_v, rotary=False)

    def embeddings(self) -> Embeddings:
        served = self.lm.pos.weight[: self.config.max_len]  # (max_len, D): not the margin trained past it
        return Embeddings(tokens=self.lm.tok.weight.detach().float().cpu(), positions=served.detach().float().cpu(),
                          unembed=self.lm.head.weight.detach().float().cpu(),
                          labels=[self.vocab.word(i) for i in range(len(self.vocab))])

    def training_evidence(self) -> TrainingEvidence:
        """The loss log `make train` wrote and the probe scores `make probe` measured at every saved step (the
        same for every step of this model: it is the record of one training run)."""
        return training_record(self.folder)

    def ground_truth(self, tokens: list[str]):
        """The corpus grammar's subject-verb pairs and repeated words in this text (see `vocabulary.ground_truth`)."""
        return ground_truth(tokens)

    def name_words(self) -> frozenset[str]:
        return frozenset(FIRST_NAMES) | frozenset(LAST_NAMES)  # the corpus's people, in its lowercase words

    def examples(self) -> list[tuple[str, str, str]]:
        return [(f"{e.relation}: {e.label}"[:48], e.text, e.label) for e in example_sentences()]

    def lexicon(self) -> Lexicon:
        """The vocabulary's whole words (each one token) and the corpus's nouns with their plurals, adjectives,
        prepositions and agreeing verb forms."""
        return Lexicon(words=self.vocab.whole_words or vocabulary_words(), nouns=NOUNS, adjectives=ADJECTIVES,
                       prepositions=PREPOSITIONS, verbs=(("has", "have"),), determiner="the", object_determiner="a",
                       period=".",
                       source="the tiny model's corpus vocabulary")

    def token_id(self, piece: str) -> int:
        words = self.vocab.tokenize(piece)
        if len(words) != 1 or words[0] == self.vocab.word(self.vocab.unk_id):
            raise InputError(f"{piece!r} is not one word of the tiny model's vocabulary; pick one it knows "
                             f"(e.g. {self.vocab.word(3)!r})")
        return self.vocab.id(words[0])


CHECKPOINTS = "checkpoints"  # as in train.py, which writes step-NNNNNN.safetensors files there


def checkpoint_steps(folder: str | Path = TINY_ASSETS) -> list[int]:
    """The training steps whose weights `folder` holds, sorted; [] when there are none: one float16 file per step
    in `folder`/checkpoints, and the two steps the trainer derives instead of storing (`train.CHECKPOINTS`), where
    its log lists them: 0, the initialisation, and the last, the final weights rounded to float16."""
    folder = Path(folder)
    found = set()
    for path in (folder / CHECKPOINTS).glob("step-*.safetensors"):
        try:
            found.add(int(path.stem.removeprefix("step-")))
        except ValueError:
            continue  # not a file the trainer wrote
    return sorted(found | _derived_steps(folder))


def _derived_steps(folder: Path) -> set[int]:
    """Step 0 and the last step, where the trainer's log lists them and the final weights are there."""
    log = folder / "train_log.json"
    if not (log.is_file() and (folder / "model.safetensors").is_file()):
        return set()
    try:
        listed = json.loads(log.read_text()).get("checkpoints") or []
    except (OSError, ValueError, AttributeError):
        return set()  # a damaged log: the files alone say which steps there are
    return {s for s in listed if isinstance(s, int) and s in (0, max(listed))}


def _derived_state(folder: Path, cfg: TinyConfig, step: int) -> dict[str, torch.Tensor]:
    """The weights of a step the trainer did not store, as its float16 file would have held them: step 0 is the
    seeded initialisation (`build_model` of the config, which is where training started), the last step the final
    weights. Both rounded to float16 and back, like a stored checkpoint."""
    if step == 0:
        state = saved_state(build_model(cfg), torch.float16)
    else:
        state = {k: v.to(torch.float16) for k, v in load_file(str(folder / "model.safetensors")).items()}
    return {k: v.float() for k, v in state.items()}


def training_record(folder: str | Path = TINY_ASSETS) -> TrainingEvidence:
    """The training record in `folder` (the loss log `make train` wrote, the probe scores `make probe` measured),
    read from disk alone: the model's `training_evidence`, and the registry's for a model it has not loaded."""
    from mha_viz.models.tiny.evidence import load_evidence, typed_evidence
    from mha_viz.models.tiny.train import load_log

    return typed_evidence(load_evidence(folder), load_log(folder))


def load_tiny(trained: bool = True, folder: str | Path = TINY_ASSETS, step: int | None = None) -> TinyModel:
    """The in-repo tiny model: trained weights from `folder`, or (trained=False) the same architecture at its
    seeded initialisation, i.e. exactly where training started. step=N loads the float16 checkpoint the trainer
    saved at training step N (step 0 is the initialisation, rounded to float16; it and the last step are derived,
    not stored: `checkpoint_steps`)."""
    folder = Path(folder)
    config_path, vocab_path, weights_path = (folder / n for n in ("config.json", "vocab.json", "model.safetensors"))
    derived = False
    if step is not None:
        weights_path = folder / CHECKPOINTS / f"step-{step:06d}.safetensors"
        derived = not weights_path.exists() and step in _derived_steps(folder)
        if not weights_path.exists() and not derived:
            saved = checkpoint_steps(folder)
            raise ModelLoadError(
                f"the tiny model has no checkpoint at training step {step}; saved steps: "
                f"{', '.join(map(str, saved)) or 'none (run `make train`)'}"
            )
    if trained and not derived and not weights_path.exists():
        raise ModelLoadError(
            f"no trained tiny model at {weights_path}; run `make train` to create it (3-6 minutes)"
        )
    # The untrained twin needs only the config and vocabulary; without them it falls back to the defaults.
    vocab = Vocab.load(vocab_path) if vocab_path.exists() else build_vocab()
    if config_path.exists():
        cfg = TinyConfig.from_json(config_path.read_text())
    else:
        cfg = TinyConfig(vocab_size=len(vocab))
    lm = build_model(cfg)
    if trained or step is not None:
        # Checkpoints are float16 on disk; the model computes in float32 like the final weights.
        state = (_derived_state(folder, cfg, step) if derived
                 else {k: v.float() for k, v in load_file(str(weights_path)).items()})
        missing, unexpected = lm.load_state_dict(state, strict=False)
        if cfg.tied:  # the LM head is tok.weight, which the file holds once
            missing = [k for k in missing if k != "head.weight"]
        if missing or unexpected:
            raise ModelLoadError(
                f"{weights_path} does not match TinyConfig (missing {missing}, unexpected {unexpected}); "
                "retrain with `make train`"
            )
    if step is not None:
        name, title = f"tiny@{step}", f"tiny at training step {step}" + (" (its initialisation)" if step == 0 else "")
    elif trained:
        name, title = "tiny", "tiny (in-repo, trained)"
    else:
        name, title = "tiny-untrained", "tiny (in-repo, untrained: seeded initialisation)"
    info = ModelInfo(name=name, title=title, kind="causal-lm", n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                     max_tokens=cfg.max_len)
    return TinyModel(place(lm), vocab, info, folder)  # on MHA_VIZ_DEVICE, in MHA_VIZ_DTYPE
