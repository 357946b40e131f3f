"""Encoder-decoder transformers models (BART, Marian, T5) behind the mha-viz contract: their three kinds of attention
(encoder self-attention, decoder self-attention, cross-attention) read from transformers' own eager
`output_attentions`, and any head of any kind switched off by a forward pre-hook on its output projection.

T5 computes attention in its own modules (relative position bias), not through transformers' attention interface,
so heads are switched off at the one place every family shares: the output projection's input, whose slice
[h * dh, (h + 1) * dh) is head h's output (the contract's definition of a head's output).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import torch

from mha_viz.contract import (
    Ablation,
    AttentionRun,
    Encoded,
    EncodedText,
    InputError,
    Model,
    ModelInfo,
    ModelLoadError,
    UnavailableError,
    check_text,
)
from mha_viz.models.hf import seq2seq_circuits, seq2seq_inside, seq2seq_patch, seq2seq_rows
from mha_viz.settings import settings, torch_device

# How many tokens the model's own greedy continuation runs to when no target is given (fewer where it ends
# with its end-of-sequence token first).
GREEDY_TOKENS = 20

_WHY_NOT = ("{what} is not available for encoder-decoder models yet: it is defined on one self-attention stack "
            "over one text, and here a head reads either the source, the target, or (cross-attention) both. The "
            "three attention kinds, switching heads off (ablate, ablate_cross), patching them from a second source "
            "(patch, patch_cross), batched rows of both (run_batch_keep over every kind), opening a head of any kind "
            "(inside, inside_layer), circuits per kind (circuits(model, kind=...)) and run.output are available.")


@dataclass(frozen=True)
class Seq2SeqRun(AttentionRun):
    """An encoder-decoder run. The inherited fields describe the encoder over the source (`tokens`, `token_ids`,
    `attentions` (L_enc, H, S, S)); `output` is the decoder's last hidden state (T, D) and `logits` its next-token
    logits (T, V). The decoder's own:

        target_tokens       list[str]  len T   the decoder's input: its start token, then the target's ids
        target_ids          list[int]  len T
        decoder_attentions  (L_dec, H, T, T)   decoder self-attention (causal)
        cross_attentions    (L_dec, H, T, S)   target positions (rows) reading source positions (columns)
        ablated_cross       cross-attention heads switched off, (decoder layer, head)
        patched_cross       cross-attention heads patched from a second source, (decoder layer, head)
        target_special      positions of the tokenizer's special tokens among target_ids (its start token)
    """
    decoder_attentions: torch.Tensor | None = None
    cross_attentions: torch.Tensor | None = None
    target_tokens: list[str] = field(default_factory=list)
    target_ids: list[int] = field(default_factory=list)
    ablated_cross: frozenset = frozenset()
    patched_cross: frozenset = frozenset()
    target_special: tuple[int, ...] = ()  # positions of special tokens in the target (the decoder's start token)


def _out_projections(model) -> tuple[list, list, list]:
    """(encoder self, decoder self, cross) output projections, in layer order, for BART/Marian-style and T5-style
    stacks; ModelLoadError for a layout we do not know."""
    base = model.get_encoder(), model.get_decoder()
    enc, dec = base
    if hasattr(enc, "block"):  # T5: block[i].layer[0] self-attention, decoder layer[1] cross-attention
        return ([b.layer[0].SelfAttention.o for b in enc.block], [b.layer[0].SelfAttention.o for b in dec.block],
                [b.layer[1].EncDecAttention.o for b in dec.block])
    if hasattr(enc, "layers") and hasattr(dec, "layers"):  # BART, Marian, mBART, Pegasus, ...
        try:
            return ([layer.self_attn.out_proj for layer in enc.layers],
                    [layer.self_attn.out_proj for layer in dec.layers],
                    [layer.encoder_attn.out_proj for layer in dec.layers])
        except AttributeError:
            pass
    raise ModelLoadError(f"'{model.config.model_type}' is an encoder-decoder model whose layers mha-viz does not "
                         "know how to find; BART, Marian and T5 are supported.")


class Seq2SeqModel(Model):
    """A transformers encoder-decoder model (AutoModelForSeq2SeqLM) loaded with eager attention.

    Layer numbering of `ablate` (self-attention heads): 0 .. L_enc - 1 are the encoder's layers (as in
    `run.attentions`), L_enc .. L_enc + L_dec - 1 the decoder's (decoder layer l is L_enc + l, as in
    `run.decoder_attentions[l]`). `ablate_cross` numbers the decoder's layers from 0 (as `run.cross_attentions`)."""

    def __init__(self, info: ModelInfo, model, tokenizer, device: torch.device):
        self.info = info
        self._model = model
        self._tokenizer = tokenizer
        self._device = device
        self._enc, self._dec, self._cross = _out_projections(model)
        config = model.config
        self.n_enc, self.n_dec = len(self._enc), len(self._dec)
        self.dh = self._enc[0].in_features // self.n_heads
        start = getattr(config, "decoder_start_token_id", None)
        if start is None:
            start = getattr(model.generation_config, "decoder_start_token_id", None)
        if start is None:
            raise ModelLoadError(f"'{info.name}' config has no decoder_start_token_id: the decoder has no first "
                                 "token to start from.")
        self._start = int(start)
        self._eos = getattr(config, "eos_token_id", None)
        # How many decoder positions the model accepts: learned positions cap it; T5's relative bias does not.
        self._greedy: dict[tuple, tuple[int, ...]] = {}  # (source ids, n) -> its greedy decoder input
        self.max_target = int(getattr(config, "max_position_embeddings", 0) or settings().max_tokens)

    has_cross_attention = True
    # As `head_means` computes it: not the one-text engine's (which leaves special tokens out, each text first).
    mean_over = ("every position of the example sentences (each as a source, its greedy continuation as the target), "
                 "special tokens included, each token weighted equally, so a longer sentence weighs more")

    def decoder_layers(self) -> int:
        return self.n_dec

    def examples(self) -> list[tuple[str, str, str]]:
        from mha_viz.models.examples import shipped_examples

        return shipped_examples()

    def example_pairs(self) -> list[tuple[str, str, str]]:
        from mha_viz.models.examples import shipped_pairs

        return shipped_pairs()

    # -- encoding ------------------------------------------------------------------------------------------------
    def _source_ids(self, source: str) -> list[int]:
        if not isinstance(source, str) or not source.strip():
            raise InputError("The source text is empty: type a sentence for the encoder to read.")
        ids = self._tokenizer(source, add_special_tokens=True)["input_ids"]
        if len(ids) > self.info.max_tokens:
            raise InputError(f"The source is {len(ids)} tokens; {self.info.name} reads at most "
                             f"{self.info.max_tokens}. Shorten it.")
        return list(ids)

    def _target_ids(self, target: str) -> list[int]:
        if not isinstance(target, str) or not target.strip():
            raise InputError("The target text is empty: type the decoder's text, or leave target out (None) for "
                             "the model's own greedy continuation.")
        ids = [self._start, *self._tokenizer(target, add_special_tokens=False)["input_ids"]]
        if len(ids) > self.max_target:
            raise InputError(f"The target is {len(ids)} decoder tokens (with the start token); {self.info.name}'s "
                             f"decoder accepts at most {self.max_target}. Shorten the target.")
        return ids

    def greedy_target(self, source_ids: list[int], n: int = GREEDY_TOKENS) -> list[int]:
        """The decoder's input for no given target: its start token, then up to `n` tokens the model picks greedily
        (all heads on), stopping after its end-of-sequence token."""
        key = (tuple(source_ids), n)
        if key in self._greedy:
            return list(self._greedy[key])
        ids = [self._start]
        src = torch.tensor([source_ids], device=self._device)
        with torch.no_grad():
            for _ in range(min(n, self.max_target - 1)):
                out = self._model(input_ids=src, decoder_input_ids=torch.tensor([ids], device=self._device),
                                  use_cache=False)
                ids.append(int(out.logits[0, -1].argmax()))
                if ids[-1] == self._eos:
                    break
        if len(self._greedy) >= 64:  # a few recent sources: a page toggling heads reruns the same one
            self._greedy.pop(next(iter(self._greedy)))
        self._greedy[key] = tuple(ids)
        return ids

    def _labels(self, ids: list[int]) -> list[str]:
        return [self._tokenizer.decode([i]) for i in ids]

    def encode_text(self, text: str | EncodedText) -> EncodedText:
        """The source text, encoded as the encoder reads it."""
        if isinstance(text, EncodedText) and text.model == self.name:
            return text
        text = check_text(text.text if isinstance(text, EncodedText) else text)
        ids = self._source_ids(text)
        special = set(self._tokenizer.all_special_ids)
        encoded = Encoded(ids=ids, labels=self._labels(ids), dropped=0,
                          special=tuple(i for i, t in enumerate(ids) if t in special), unknown=())
        return EncodedText(text=text, encoded=encoded, model=self.name)

    def token_id(self, piece: str) -> int:
        ids = self._tokenizer(piece, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            raise InputError(f"{piece!r} is {len(ids)} tokens for {self.name}, not one.")
        return int(ids[0])

    def decode(self, token_id: int) -> str:
        return self._tokenizer.decode([int(token_id)])

    # -- interventions -------------------------------------------------------------------------------------------
    def _heads(self, heads: Iterable, n_layers: int, what: str) -> frozenset:
        out = set()
        for item in heads:
            try:
                layer, head = (int(x) for x in item)
            except (TypeError, ValueError):
                raise InputError(f"{what} takes (layer, head) pairs; got {item!r}.") from None
            if not (0 <= layer < n_layers and 0 <= head < self.n_heads):
                raise InputError(f"{what}: head ({layer}, {head}) does not exist; layers are 0..{n_layers - 1}, "
                                 f"heads 0..{self.n_heads - 1}.")
            out.add((layer, head))
        return frozenset(out)

    def _modules(self) -> list:
        """Every output projection in the order of the `outputs` tensors: encoder, decoder self, cross."""
        return [*self._enc, *self._dec, *self._cross]

    def _forward(self, src: list[int], tgt: list[int], replace: dict, record: list | None = None):
        """One forward of `src` reading `tgt`, the heads in `replace` edited ({(projection index, head): None for
        zero, or the head's output (P, dh) or (dh,)}) by the batched rows' hook, as one row (seq2seq_rows.masks);
        `record`: a list that receives every projection's input (1, P, H * dh)."""
        keep, values = seq2seq_rows.one_row(self, replace, len(src), len(tgt))
        with torch.no_grad(), seq2seq_rows.masks(self, keep, values, record):
            return self._model(input_ids=torch.tensor([src], device=self._device),
                               decoder_input_ids=torch.tensor([tgt], device=self._device),
                               output_attentions=True, output_hidden_states=True, use_cache=False)

    def head_outputs_all(self, source: str, target: str | None = None) -> list[torch.Tensor]:
        """Every head's output with all heads on, per output projection (encoder, decoder self, cross, in layer
        order): a list of (H, P, dh) float32 tensors, P the source (encoder) or target (decoder) length."""
        src = self._source_ids(source)
        tgt = self.greedy_target(src) if target is None else self._target_ids(target)
        record: list = [None] * len(self._modules())
        self._forward(src, tgt, {}, record)
        return [x[0].float().view(x.shape[1], self.n_heads, self.dh).transpose(0, 1).cpu() for x in record]

    def layer_outputs(self, text: str | EncodedText) -> list[torch.Tensor]:
        """See `Model.layer_outputs`: `head_outputs_all` of `text` as a source, on its greedy continuation."""
        return self.head_outputs_all(text.text if isinstance(text, EncodedText) else text)

    def head_means(self, reference: Iterable[str] | None = None) -> torch.Tensor:
        """Each head's mean output per output projection (encoder, decoder self, cross) -> (L_enc + 2 L_dec, H, dh):
        over every position of every reference source (None: `examples()`) run with all heads on, each with its
        greedy continuation as target. Every token weighs the same, so longer texts weigh more (`mean_over`)."""
        from mha_viz.contract.ablation import reference_texts

        sums, counts = None, None
        for text in reference_texts(self, reference):
            outs = self.head_outputs_all(text)  # per projection (H, P, dh)
            if sums is None:
                sums, counts = [o.sum(1) for o in outs], [o.shape[1] for o in outs]
            else:
                sums = [s + o.sum(1) for s, o in zip(sums, outs)]
                counts = [c + o.shape[1] for c, o in zip(counts, outs)]
        return torch.stack([s / c for s, c in zip(sums, counts)])  # (L_enc + 2 L_dec, H, dh)

    def _replacements(self, ablation, reference, source: str, n_target: int, n_source: int) -> list:
        """Per output projection, the (H, P, dh) or (H, dh) value a switched-off head takes, None for zero: what
        the contract's `Ablation` of that meaning gives, per layer of each kind (contract/ablation.py)."""
        lengths = [n_source] * self.n_enc + [n_target] * (2 * self.n_dec)
        parts = Ablation.of(ablation).replacements(self, reference, source, lengths)
        return [None if p is None else p[:, 0] if p.shape[1] == 1 else p for p in parts]  # (H, dh) or (H, P, dh)

    # -- the run -------------------------------------------------------------------------------------------------
    def run(self, text: str | EncodedText, ablate: Iterable = (), ablation: str = "zero",
            reference: Iterable[str] | None = None, patch: Iterable = (), source: str | None = None,
            logits_at: Sequence[int] | None = None, target: str | None = None, ablate_cross: Iterable = (),
            patch_cross: Iterable = (), on_layer: Callable[[int, torch.Tensor], None] | None = None) -> Seq2SeqRun:
        """One teacher-forced forward of `target` (the decoder start token, then the tokenizer's ids of `target`
        without special tokens) reading `source`; with `target` None, the model's own greedy continuation of up to
        GREEDY_TOKENS tokens (all heads on). Heads in `ablate` (encoder then decoder layers, see the class) and
        `ablate_cross` are switched off: their slice of the output projection's input is set to 0 ("zero"), to its
        mean over `reference` ("mean"; see `head_means`), or to its output on another reference source
        ("resample"). `reference`: source texts; None means the example sentences (`examples()`). `text` is the
        source (the encoder's input); `logits_at` is ignored (every target position's logits are computed);
        `on_layer` is handed each encoder layer's attention (`run.attentions`) once the forward is done.

        Patching: heads in `patch` (numbered as `ablate`) and `patch_cross` (as `ablate_cross`) take their output,
        position by position, from a run on `source`, a second source text, with all heads on, reading the same
        decoder input as this run (`target`, or this source's greedy continuation). Encoder heads need the two
        sources to have one token count; decoder and cross-attention heads line up on the target. A head is
        ablated or patched, not both (seq2seq_patch.py)."""
        second = source.text if isinstance(source, EncodedText) else source
        source = text.text if isinstance(text, EncodedText) else text
        ablation = Ablation.of(ablation)
        src = self._source_ids(source)
        tgt = self.greedy_target(src) if target is None else self._target_ids(target)
        self_heads = self._heads(ablate, self.n_enc + self.n_dec, "ablate")
        cross_heads = self._heads(ablate_cross, self.n_dec, "ablate_cross")
        patched = self._heads(patch, self.n_enc + self.n_dec, "patch")
        patched_cross = self._heads(patch_cross, self.n_dec, "patch_cross")
        seq2seq_patch.check(self_heads, cross_heads, patched, patched_cross, second)
        replace = {}
        if self_heads or cross_heads:
            values = self._replacements(ablation, reference, source, len(tgt), len(src))
            for layer, head in self_heads:
                value = values[layer]
                replace[(layer, head)] = None if value is None else value[head].to(self._device)
            for layer, head in cross_heads:
                value = values[self.n_enc + self.n_dec + layer]
                replace[(self.n_enc + self.n_dec + layer, head)] = None if value is None else \
                    value[head].to(self._device)
        if patched or patched_cross:
            replace.update(seq2seq_patch.replacements(self, src, tgt, patched, patched_cross,
                                                      self._source_ids(second)))
        run = self._run_ids(src, tgt, self_heads, cross_heads, ablation, replace, patched, patched_cross)
        for layer in range(run.attentions.shape[0]) if on_layer is not None else ():
            on_layer(layer, run.attentions[layer])  # (H, S, S)
        return run

    def _run_ids(self, src: list[int], tgt: list[int], self_heads: frozenset, cross_heads: frozenset,
                 ablation: str, replace: dict, patched: frozenset = frozenset(),
                 patched_cross: frozenset = frozenset()) -> Seq2SeqRun:
        out = self._forward(src, tgt, replace)
        specials = set(self._tokenizer.all_special_ids)
        stack = lambda maps: torch.stack([a[0] for a in maps]).float().cpu()  # noqa: E731  (L, H, Q, K)
        return Seq2SeqRun(
            tokens=self._labels(src),
            attentions=stack(out.encoder_attentions),  # (L_enc, H, S, S)
            ablated=self_heads,
            output=out.decoder_hidden_states[-1][0].float().cpu(),  # (T, D)
            logits=out.logits[0].float().cpu(),  # (T, V)
            token_ids=src,
            special=tuple(i for i, t in enumerate(src) if t in specials),
            target_special=tuple(i for i, t in enumerate(tgt) if t in specials),
            ablation=ablation if (self_heads or cross_heads) else Ablation.of("zero"),
            decoder_attentions=stack(out.decoder_attentions),  # (L_dec, H, T, T)
            cross_attentions=stack(out.cross_attentions),  # (L_dec, H, T, S)
            target_tokens=self._labels(tgt),
            target_ids=tgt,
            ablated_cross=cross_heads,
            patched=patched,
            patched_cross=patched_cross,
        )

    # -- what does not hold here ---------------------------------------------------------------------------------
    def head_outputs(self, text: str | EncodedText) -> torch.Tensor:
        """The encoder's head outputs over the source (L_enc, H, S, dh), target the greedy continuation; every
        kind's: `head_outputs_all`."""
        source = text.text if isinstance(text, EncodedText) else text
        return torch.stack(self.head_outputs_all(source)[:self.n_enc])

    def inside_layer(self, text, layer: int, ablate: Iterable = (), ablation: str = "zero",
                     reference: Iterable[str] | None = None, kind: str = "Encoder", target: str | None = None,
                     ablate_cross: Iterable = ()) -> list:
        """Every head of `kind`'s layer `layer` (numbered within the kind) opened up on `text` (the source) and
        `target` (models/hf/seq2seq_inside.py)."""
        return seq2seq_inside.inside_layer(self, text, layer, kind, target=target, ablate=ablate,
                                           ablate_cross=ablate_cross, ablation=ablation, reference=reference)

    def inside(self, text, layer: int, head: int, ablate: Iterable = (), ablation: str = "zero",
               reference: Iterable[str] | None = None, kind: str = "Encoder", target: str | None = None,
               ablate_cross: Iterable = ()):
        return seq2seq_inside.inside(self, text, layer, head, kind, target=target, ablate=ablate,
                                     ablate_cross=ablate_cross, ablation=ablation, reference=reference)

    def head_gradients(self, *args, **kwargs):
        return None  # the contract's "unavailable": attribution over one stack over one text

    def norm_inputs(self, *args, **kwargs):
        return None  # the contract's "unavailable": value-weighted norms over one stack over one text

    def census(self, *args, **kwargs):
        raise UnavailableError(_WHY_NOT.format(what="The head census"))

    def readout(self, *args, **kwargs):
        return None

    def lexicon(self):
        """English words this tokenizer reads as one token (`models.lexicon.english_lexicon`): the census's inputs,
        read as sources; the census then measures the encoder's self-attention heads."""
        from mha_viz.models.lexicon import english_lexicon

        return english_lexicon(self)

    def prediction_position(self, run) -> int | None:
        """The decoder's next-token prediction after its last target token (the logits are over the target)."""
        return None if run.logits is None else run.logits.shape[0] - 1

    # -- weights per head, for circuits (models/hf/seq2seq_circuits.py) ---------------------------------------------
    def head_weights(self, layer: int, kind: str = "Encoder"):
        """Layer `layer` (numbered within `kind`: Encoder, Decoder or Cross) split per head; Cross's w_q reads the
        decoder's stream, its w_k and w_v the encoder's output."""
        return seq2seq_circuits.head_weights(self, layer, kind)

    def weights_leave_out(self, kind: str = "Encoder") -> tuple[str, ...]:
        return seq2seq_circuits.weights_leave_out(self, kind)

    def embeddings(self, kind: str = "Encoder"):
        return seq2seq_circuits.embeddings(self, kind)

    def composition_modes(self, kind: str = "Encoder") -> tuple[tuple[str, ...], str]:
        """(the composition modes that hold between `kind`'s heads, why the others are left out: "" for none)."""
        return seq2seq_circuits.composition_modes(kind)

    def run_many(self, texts, reduce, logits: bool = False, progress=None) -> list:
        """Each text as a source, its decoder reading only its start token (what a measure over one text reads
        is the encoder's self-attention, `run.attentions`; a greedy continuation would cost a forward per
        token). `run.logits`: the prediction after the start token, when `logits` is True."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        out = []
        for i, text in enumerate(texts):
            enc = self.encode_text(text)
            run = self._run_ids(enc.ids, [self._start], frozenset(), frozenset(), "zero", {})
            if not logits:
                run = dataclasses.replace(run, logits=None)
            out.append(reduce(i, run))
            if progress is not None:
                progress(i + 1)
        return out

    @property
    def keep_layers(self) -> int:
        """How many output projections a row of `run_batch_keep` sets heads of: L_enc + 2 * L_dec."""
        return seq2seq_rows.keep_layers(self)

    def run_batch_keep(self, text, keep, replace=None, positions=None, target: str | None = None,
                       source: str | None = None, ablation: str = "zero", reference=None):
        """B rows of `text` reading `target` in one forward, each with its own heads off, over every kind: keep
        (B, keep_layers, H) in `_modules()` order; `replace` one entry per projection, `source` a second source
        the heads off are patched from, or `ablation` what "off" means (models/hf/seq2seq_rows.py)."""
        return seq2seq_rows.run_batch_keep(self, text, keep, replace, positions, target, source, ablation, reference)



def build_seq2seq_model(name: str, title: str, source: str, config) -> Seq2SeqModel:
    """Load an encoder-decoder `source` (folder or hub id) with eager attention, safetensors only, no remote code."""
    import transformers

    from mha_viz.models.hf import policy

    n_heads = getattr(config, "num_attention_heads", None) or getattr(config, "num_heads", None) or \
        getattr(config, "encoder_attention_heads", None)
    if not n_heads:
        raise ModelLoadError(f"'{config.model_type}' config has no attention head count.")
    device = torch_device()
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(
            source, attn_implementation="eager", trust_remote_code=False, use_safetensors=True,
            dtype=torch.float32).to(device)
    except (OSError, ValueError, EnvironmentError) as err:
        raise ModelLoadError(policy.explain_load_failure(name, err)) from None
    model.eval()
    max_pos = int(getattr(config, "max_position_embeddings", 0) or 10**9)
    enc, dec, _ = _out_projections(model)
    info = ModelInfo(name=name, title=title, kind="encoder-decoder", n_layers=len(enc), n_heads=int(n_heads),
                     max_tokens=min(max_pos, settings().max_tokens), causal=False)
    return Seq2SeqModel(info, model, tokenizer, model.device)
