"""`HFModel`: a transformers model behind the mha-viz contract (MiniLM, SmolLM2, or any id / local folder)."""
from __future__ import annotations

import codecs
import dataclasses
import functools

import torch

from mha_viz.contract import (
    Embeddings,
    HeadWeights,
    InputError,
    ModelInfo,
    ModelLoadError,
    UnavailableError,
    check_index,
)
from mha_viz.models.examples import shipped_examples
from mha_viz.models.hf import projections
from mha_viz.models.hf.ablation import (
    LayerIndex,
    editing,
    make_resumable,
    own_key,
    watch_final_norm,
    wrap_own_attention,
)
from mha_viz.models.interventions import EditableModel, Encoded, FinalParts, Forward, HeadEdit
from mha_viz.models.special import added_positions


class HFModel(EditableModel):
    """A transformers model behind the mha-viz contract: its tokenizer and one forward through the registered
    attention function (hf/ablation.py); everything else is the engine's (models/interventions.py). Built by
    `build_hf_model` and friends; read-only after construction."""

    def __init__(self, info: ModelInfo, model, tokenizer, device: torch.device):
        self._model = model
        self._tokenizer = tokenizer
        self._device = device
        self.info = info
        wrap_own_attention([m for m in model.modules() if own_key(type(m)) is not None])
        layers = self._discover_layers()
        self._layers = LayerIndex(layers.modules)
        if len(layers) != info.n_layers:  # the config's count is a claim; the modules that ran are the fact
            self.info = dataclasses.replace(info, n_layers=len(layers))
        self._out_layers = [_find_out_layer(model, m) for m in self._layers.modules]
        self._final_norm = self._watch_final_norm()
        blocks = _blocks(model, self._layers.modules)
        if blocks is not None:
            make_resumable(blocks)
        self.can_resume = blocks is not None  # set once, here: which layers a batch may skip
        params = _forward_params(model)
        self._keeps_logits = "logits_to_keep" in params
        self._no_cache = {"use_cache": False} if "use_cache" in params else {}  # no key/value cache: one pass
        # The argument a key/value cache goes in ("cache" in transformers 5.2x, "past_key_values" before).
        self._cache_arg = next((a for a in ("cache", "past_key_values") if a in params), None)
        # A tail of a text on the unedited run's keys and values (HeadEdit.past): causal LMs, with blocks to wrap.
        # Not with a sliding window: transformers builds the window's mask and cache layers from the positions it
        # is handed, and a tail resumed past the window no longer lines up with the keys handed to it.
        self.tails = self.can_resume and info.kind == "causal-lm" and self._cache_arg is not None and \
            "use_cache" in params and not _windowed(model.config)
        # The block wrappers append a growing batch's rows (HeadEdit.grown), unless the model's own forward reshapes
        # to the batch it was called with (GPTBigCode): tried once, here.
        self.grows = self.can_resume and self._batch_can_grow()

    # -- loading helpers -------------------------------------------------------------------------------------
    def _discover_layers(self) -> LayerIndex:
        """The attention modules in layer order, numbered by a first forward through the registered function."""
        found = LayerIndex()
        with torch.no_grad(), editing(found, HeadEdit()):
            out = self._model(**self._encode("a")[0], output_attentions=True)
        if not len(found):
            raise ModelLoadError(
                f"{self.info.name}: no self-attention layer reported its weights, so there is nothing to show. "
                "The model may not use transformers' attention interface."
            )
        attentions = getattr(out, "attentions", None) or ()
        if len(attentions) != len(found):
            raise ModelLoadError(
                f"{self.info.name}: expected one attention tensor per layer ({len(found)}), got {len(attentions)}. "
                "It needs attn_implementation='eager' support."
            )
        return found

    def _batch_can_grow(self) -> bool:
        """Whether a forward called with one row carries the rows a growing batch adds at its last layer: a
        two-token forward whose last layer takes one more row, on stand-in earlier states."""
        L, H = self.info.n_layers, self.info.n_heads
        ids = self._encode("a")[0]["input_ids"][:, :2]  # (1, T)
        config = self._model.config.get_text_config()
        width = getattr(config, "hidden_size", None) or self._model.get_input_embeddings().weight.shape[1]
        bases = [torch.zeros(1, ids.shape[1], width, device=self._device)] * L  # (1, T, D) stand-ins
        rows = [1] * (L - 1) + [2]
        edit = HeadEdit(torch.ones(2, L, H), rows=rows, bases=bases)
        try:
            with torch.no_grad():
                out = self.forward(ids, edit)
        except (RuntimeError, ValueError):
            return False
        return out.hidden.shape[0] == 2

    def _watch_final_norm(self) -> torch.nn.Module | None:
        """The norm between the last layer and the LM head of a causal LM (`norm`, `ln_f`, ...), watched so a
        readout can see the residual stream entering it; None when there is no such module."""
        if self.info.kind != "causal-lm" or self._model.get_output_embeddings() is None:
            return None
        base = getattr(self._model, "base_model", self._model)
        for name in ("norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f"):
            module = getattr(base, name, None)
            if isinstance(module, torch.nn.Module) and isinstance(getattr(module, "weight", None), torch.Tensor):
                watch_final_norm(module)
                return module
        return None

    def examples(self) -> list[tuple[str, str, str]]:
        return shipped_examples()

    # -- tokenization ------------------------------------------------------------------------------------------
    def _encode(self, text: str) -> tuple[dict, int, tuple[int, ...]]:
        """Tokenize, keeping the first `max_tokens`. Returns (model inputs, number of tokens dropped, positions the
        tokenizer added: see `mha_viz.models.special`)."""
        tok = self._tokenizer
        enc = tok(text, add_special_tokens=True, verbose=False, return_tensors="pt", return_special_tokens_mask=True)
        cap = self.info.max_tokens
        dropped = max(enc["input_ids"].shape[1] - cap, 0)
        if dropped:  # only long texts pay for a second pass; the tokenizer keeps [SEP]-like end tokens
            enc = tok(text, add_special_tokens=True, truncation=True, max_length=cap, return_tensors="pt",
                      return_special_tokens_mask=True)
        if "special_tokens_mask" not in enc:
            raise ModelLoadError(f"{self.info.name}: its tokenizer ({type(tok).__name__}) gives no special-tokens "
                                 "mask, so the positions it adds cannot be told from the text's; use a transformers "
                                 "tokenizer (tokenizer.json) for this model")
        added = added_positions(enc["special_tokens_mask"][0].tolist())
        enc = {k: v.to(self._device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        return enc, dropped, added

    def encoding(self, text: str) -> Encoded:
        enc, dropped, added = self._encode(text)
        ids = enc["input_ids"][0].tolist()
        unk = self._tokenizer.unk_token_id
        return Encoded(ids=ids, labels=self._labels(ids), dropped=dropped, special=added,
                       unknown=tuple(i for i, t in enumerate(ids) if unk is not None and t == unk))

    def _labels(self, ids: list[int]) -> list[str]:
        """Display labels. Byte-level BPE pieces ('Ġkeys', 'Ċ', 'Ã¯ve') are always decoded to their text (' keys',
        newline, 'ïve'); a piece holding only part of a character shows its bytes as `⟨e2⟩`. WordPiece and
        SentencePiece pieces keep their own markers ('##s', '▁the'), which tell where words start. An id past the
        tokenizer's vocabulary (embedding tables are often padded beyond it) is labelled `⟨id N⟩`."""
        pieces = self._tokenizer.convert_ids_to_tokens(ids)
        pieces = [f"⟨id {i}⟩" if p is None else p for i, p in zip(ids, pieces)]
        if not _byte_level(self._tokenizer):
            return pieces
        special = set(self._tokenizer.all_special_tokens)
        return [p if p in special or p.startswith("⟨id ") else _byte_piece_text(p) for p in pieces]

    def decode(self, token_id: int) -> str:
        return self.decode_ids([token_id])

    def decode_ids(self, ids: list[int]) -> str:
        """The text of these ids; with byte-level BPE a character cut off at either end shows as `⟨e6⟩`, and an id
        past the tokenizer's vocabulary (a model may write one: its embedding rows are padded) as `⟨id N⟩`."""
        ids = [int(i) for i in ids]
        if _byte_level(self._tokenizer):
            pieces = self._tokenizer.convert_ids_to_tokens(ids)
            if None not in pieces:  # joined first: a character may be split over two pieces
                return _byte_piece_text("".join(pieces))
            return "".join(self.decode_ids([i]) if p is not None else f"⟨id {i}⟩" for i, p in zip(ids, pieces))
        return self._tokenizer.decode(ids)

    def end_of_text(self) -> frozenset[int]:
        """The ids transformers' own `generate` stops at: the generation config's eos_token_id (one id or a list),
        else the model config's, else the tokenizer's end-of-text token."""
        for config in (getattr(self._model, "generation_config", None), self._model.config):
            ids = getattr(config, "eos_token_id", None)
            if ids is not None:
                return frozenset(int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids]))
        eos = getattr(self._tokenizer, "eos_token_id", None)
        return frozenset() if eos is None else frozenset([int(eos)])

    @property
    def mask_token(self) -> str | None:
        return getattr(self._tokenizer, "mask_token", None)

    def token_id(self, piece: str) -> int:
        ids = self._tokenizer(piece, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            pieces = self._tokenizer.convert_ids_to_tokens(ids)
            raise InputError(f"{piece!r} is {len(ids)} tokens for this model ({pieces}), not one; pick a word that "
                             "is a single token (for a word after a space, include the space: ' Mary')")
        return int(ids[0])

    # -- the one forward ---------------------------------------------------------------------------------------
    pads = True  # transformers' attention mask keeps every query off the padding; positions count from 0

    def forward(self, ids: torch.Tensor, edit: HeadEdit, attentions: bool = False, lengths=None) -> Forward:
        """One forward of ids (B, T) with `edit` in this context: one text per row, right-padded to T when
        `lengths` says so (the attention mask is 1 on each row's own tokens, 0 on its padding; without `lengths`
        all ones), token type 0 where the model takes types, and no key/value cache."""
        ids = ids.to(self._device)
        mask = torch.ones_like(ids)  # (B, T)
        if lengths is not None:
            mask = (torch.arange(ids.shape[1])[None] < torch.as_tensor(list(lengths))[:, None]).long()  # (B, T)
            mask = mask.to(self._device)
        inputs = self._inputs(ids, mask)
        if edit.past is not None:  # positions offset.. only, after the unedited run's keys and values
            inputs.update(self._tail_inputs(ids, edit))
        if edit.logits_at is not None and self._keeps_logits:  # only these positions' logits: (B, P, V)
            inputs["logits_to_keep"] = torch.tensor(edit.logits_at, dtype=torch.long, device=self._device)
        # Every layer's hidden states only when nothing else gives what is read: L + 1 of them for each row is the
        # largest thing a batch of rows would otherwise hold.
        watched = self._final_norm is not None  # its hook leaves the final hidden states in edit.final_out
        every = (edit.want_inputs and not self.can_resume) or (not watched and self.info.kind != "encoder")
        if edit.want_inputs and not self.can_resume:
            edit.stop_after = None  # the layers' inputs come from the hidden states, which only a whole forward gives
        with editing(self._layers, edit):
            out = self._model(**inputs, output_attentions=attentions, output_hidden_states=every)
        if edit.want_inputs and not self.can_resume:  # no block wrappers: transformers' hidden_states[l]
            for layer in range(self.n_layers):
                edit.entering(layer, out.hidden_states[layer])
        hidden = getattr(out, "last_hidden_state", None)
        if hidden is None and watched:
            hidden = edit.final_out  # (B, T, D): the final norm's output, what the LM head reads
        if hidden is None:
            hidden = out.hidden_states[-1]  # (B, T, D): a causal LM's last entry is after its final norm
        logits = getattr(out, "logits", None)
        if logits is not None and edit.logits_at is not None and not self._keeps_logits:
            logits = logits[:, edit.logits_at]  # (B, P, V)
        att = torch.stack(out.attentions, dim=1) if attentions else None  # (B, L, H, Q, K)
        return Forward(hidden=hidden, logits=logits, attentions=att)

    def _inputs(self, ids: torch.Tensor, mask: torch.Tensor) -> dict:
        """What every forward passes: ids (B, T), mask (B, T), token type 0 where the model takes types (GPT-2
        adds their embedding at every position), no key/value cache."""
        inputs = {"input_ids": ids, "attention_mask": mask, **self._no_cache}
        if "token_type_ids" in getattr(self._tokenizer, "model_input_names", ()):
            inputs["token_type_ids"] = torch.zeros_like(ids)
        return inputs

    def _tail_inputs(self, ids: torch.Tensor, edit: HeadEdit) -> dict:
        """The mask over past and new positions, and a fresh cache holding `edit.past`: each layer's entry repeated
        over the rows that enter that layer (all of them, or a growing batch's count), since attention appends the
        new keys to it row by row. Fresh per call: the forward writes into it."""
        from transformers import DynamicCache

        rows = edit.rows or [ids.shape[0]] * self.n_layers
        entries = [(k.expand(max(r, 1), *k.shape[1:]).contiguous(), v.expand(max(r, 1), *v.shape[1:]).contiguous())
                   for (k, v), r in zip(edit.past, rows)]  # per layer (rows, H_kv, offset, dh) twice
        mask = torch.ones(ids.shape[0], edit.offset + ids.shape[1], dtype=torch.long, device=self._device)
        return {"attention_mask": mask, self._cache_arg: DynamicCache(entries), "use_cache": True}

    def key_values(self, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        ids = ids.to(self._device)
        with torch.no_grad(), editing(self._layers, HeadEdit()):  # the same inputs as `forward`'s, with a cache
            out = self._model(**{**self._inputs(ids, torch.ones_like(ids)), "use_cache": True})
        cache = getattr(out, self._cache_arg, None) or getattr(out, "past_key_values", None)
        layers = getattr(cache, "layers", None)
        if layers is None or len(layers) != self.n_layers:
            raise UnavailableError(f"{self.info.title}: its key/value cache does not have one entry per layer")
        return [(layer.keys, layer.values) for layer in layers]  # per layer (1, H_kv, P, dh) twice

    def output_projection(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        out = self._out_layers[layer]
        return None if out is None else _out_weight(out)  # (D, H * dh), (D,) or None

    def final_parts(self) -> FinalParts | None:
        norm, head = self._final_norm, self._model.get_output_embeddings()
        if norm is None or head is None:
            return None
        bias = getattr(norm, "bias", None)
        return FinalParts(
            gain=norm.weight.detach().float().cpu(), bias=None if bias is None else bias.detach().float().cpu(),
            centered=isinstance(norm, torch.nn.LayerNorm) or "LayerNorm" in type(norm).__name__,
            unembed=head.weight.detach().float().cpu(),
            unembed_bias=None if getattr(head, "bias", None) is None else head.bias.detach().float().cpu())

    def head_weights(self, layer: int) -> HeadWeights:
        """Layer `layer`'s per-head maps from the attention module's own projections, separate or fused, split as
        its forward splits them (hf/projections.py); rotary: q and k are rotated after the projection."""
        layer = check_index(layer, self.n_layers, "layer")
        module = self._layers.modules[layer]
        qkv = projections.split(module, self.n_heads)
        if qkv is None:
            return super().head_weights(layer)
        rotary = "position_embeddings" in _forward_params(module)
        return self.head_weights_from(layer, qkv.w_q, qkv.w_k, qkv.w_v, qkv.b_q, qkv.b_k, qkv.b_v, rotary=rotary)

    def weights_leave_out(self) -> tuple[str, ...]:
        """Every layer's `projections.left_out`, each phrase once, in layer order."""
        return tuple(dict.fromkeys(n for module in self._layers.modules for n in projections.left_out(module)))

    def embeddings(self) -> Embeddings:
        """Token (and learned position) embeddings in the residual stream's width, and the unembedding. Where the
        embeddings are narrower than the stream (ELECTRA's embedding_size, ALBERT's) they are read through the
        model's own projection into it (its norm before that left out); an LM head that reads a narrower transform
        of the stream is not a (V, D) map, so `unembed` is None there (the projected embedding stands in, as the
        head is tied to it)."""
        tokens = self._model.get_input_embeddings()
        head = self._model.get_output_embeddings()
        base = getattr(self._model, "base_model", self._model)
        pos = None
        for holder in (base, getattr(base, "embeddings", None)):
            for name in ("wpe", "position_embeddings", "embed_positions"):
                module = getattr(holder, name, None) if holder is not None else None
                if isinstance(module, torch.nn.Embedding):
                    pos = module.weight.detach().float().cpu()
        weight = tokens.weight.detach().float().cpu()  # (V, E)
        project = _embedding_projection(base, weight.shape[1])
        if project is not None:
            w, b = _out_weight(project)  # (D, E), (D,) or None
            weight = weight @ w.T + (0.0 if b is None else b)  # (V, D)
            pos = None if pos is None else pos @ w.T  # (P, D): the bias is counted once, with the tokens
        unembed = None if head is None else head.weight.detach().float().cpu()  # (V, D)
        if unembed is not None and unembed.shape[1] != weight.shape[1]:
            unembed = None
        labels = self._labels(list(range(weight.shape[0])))
        return Embeddings(tokens=weight, positions=pos, unembed=unembed, labels=labels)


def _embedding_projection(base, width: int) -> torch.nn.Module | None:
    """The linear layer that maps embeddings of `width` into the residual stream (ELECTRA's embeddings_project,
    ALBERT's encoder.embedding_hidden_mapping_in, OPT's project_in), or None where they are already its width."""
    found = [getattr(base, "embeddings_project", None),
             getattr(getattr(base, "encoder", None), "embedding_hidden_mapping_in", None),
             getattr(getattr(base, "decoder", None), "project_in", None), getattr(base, "project_in", None)]
    for layer in found:
        if _is_linear(layer) and _out_weight(layer)[0].shape[1] == width and \
                _out_weight(layer)[0].shape[0] != width:
            return layer
    return None


def _blocks(model, attentions: list[torch.nn.Module]) -> list[torch.nn.Module] | None:
    """The transformer blocks in layer order: the ModuleList whose i-th child holds the i-th attention module
    (Llama's model.layers, GPT-2's h, BERT's encoder.layer); None when there is no such list."""
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == len(attentions):
            if all(any(m is a for m in block.modules()) for block, a in zip(module, attentions)):
                return list(module)
    return None


def _windowed(config) -> bool:
    """Whether some layer attends only to a sliding window of recent keys (Mistral, Qwen2, Gemma 2 and 3, ...)."""
    config = getattr(config, "get_text_config", lambda: config)()
    kinds = getattr(config, "layer_types", None) or ()
    if any("sliding" in str(kind) for kind in kinds):
        return True
    return bool(getattr(config, "sliding_window", None)) and getattr(config, "use_sliding_window", True) is not False


def _forward_params(module) -> tuple[str, ...]:
    import inspect

    return tuple(inspect.signature(module.forward).parameters)


_is_linear = projections.is_linear
_out_weight = projections.linear_weight  # (weight (D, H * dh), bias (D,) or None), float32 on the CPU


def _find_out_layer(model, attention: torch.nn.Module) -> torch.nn.Module | None:
    """The linear layer that combines this attention module's heads (o_proj, out_proj, c_proj, out_lin, Wo, ... on
    the module; BERT's sibling output.dense), or None."""
    layer = projections.output_layer(attention)
    if layer is not None:
        return layer
    # BERT-style: the self-attention module's sibling `output.dense`.
    for parent in model.modules():
        if any(child is attention for child in parent.children()):
            output = getattr(parent, "output", None)
            dense = getattr(output, "dense", None)
            if _is_linear(dense):
                return dense
    return None


# -- byte-level BPE pieces -------------------------------------------------------------------------------------
def _byte_level(tokenizer) -> bool:
    """True for byte-level BPE (GPT-2, SmolLM2): its pieces spell bytes, not text, whether or not they
    hold a space marker."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return type(getattr(backend, "decoder", None)).__name__ == "ByteLevel"


@functools.cache
def _unicode_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-character table: printable bytes stand for themselves, the other 68 are
    shifted to characters from U+0100 on (space is 'Ġ', newline 'Ċ')."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in kept]
    table = {chr(b): b for b in kept}
    table.update({chr(256 + i): b for i, b in enumerate(shifted)})
    return table


def _byte_marker(err: UnicodeDecodeError) -> tuple[str, int]:
    # A piece may end (or start) in the middle of a character: its bytes are shown, not U+FFFD.
    return "".join(f"⟨{b:02x}⟩" for b in err.object[err.start:err.end]), err.end


codecs.register_error("mha_viz_byte_marker", _byte_marker)


def _byte_piece_text(piece: str) -> str:
    """One byte-level piece as text: 'Ã¯ve' -> 'ïve', 'Ġ' -> ' ', the first piece of '😀' -> ' ⟨f0⟩⟨9f⟩⟨98⟩'.
    A character outside the table (an added token's plain text) stands for its own UTF-8 bytes."""
    table = _unicode_to_byte()
    data = b"".join(bytes([table[ch]]) if ch in table else ch.encode("utf-8") for ch in piece)
    return data.decode("utf-8", errors="mha_viz_byte_marker")
