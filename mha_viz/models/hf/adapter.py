"""`HFModel`: a transformers model behind the mha-viz contract (MiniLM, SmolLM2, or any id / local folder)."""
from __future__ import annotations

import codecs
import functools

import torch

from mha_viz.contract import (AttentionRun, Head, HeadInside, InputError, Model, ModelInfo, ModelLoadError, Readout,
                              UnavailableError, check_text, head_keep_mask)
from mha_viz.models.hf import ablation as _ablation
from mha_viz.models.hf.ablation import _RECORDER, edited, final_norm_io, watch_final_norm
from mha_viz.models.examples import shipped_examples
from mha_viz.models.interventions import HeadEdit
from mha_viz.models.heads import out_proj_per_head, repeat_kv


class HFModel(Model):
    """A transformers model behind the mha-viz contract. Built by `load_hf` and friends."""

    def __init__(self, info: ModelInfo, model, tokenizer, device: torch.device):
        self.info = info
        self._model = model
        self._tokenizer = tokenizer
        self._device = device
        self._layer_of = self._find_attention_layers()
        self._final_norm = self._watch_final_norm()

    # -- loading helpers -------------------------------------------------------------------------------------
    def _find_attention_layers(self) -> dict[int, int]:
        seen: list = []
        token = _RECORDER.set(seen)
        try:
            with torch.no_grad():
                enc = self._encode("a")[0]
                out = self._model(**enc, output_attentions=True)
        finally:
            _RECORDER.reset(token)
        modules = [module for module, _ in seen]
        if not modules:
            raise ModelLoadError(
                f"{self.info.name}: no self-attention layer reported its weights, so there is nothing to show. "
                "The model may not use transformers' attention interface."
            )
        attentions = getattr(out, "attentions", None) or ()
        if len(attentions) != len(modules):
            raise ModelLoadError(
                f"{self.info.name}: expected one attention tensor per layer ({len(modules)}), got {len(attentions)}. "
                "It needs attn_implementation='eager' support."
            )
        self._out_proj = [_find_out_proj(self._model, m, len(modules)) for m in modules]
        return {id(m): i for i, m in enumerate(modules)}

    def norm_inputs(self, text: str, ablate=()) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Per-head value vectors and output-projection slices for the norm view (Kobayashi et al. 2020).

        Returns (values (L, H, K, dh), w_o (L, H, dh, D)), or None when this architecture's output projection
        could not be identified. Key/value heads shared by grouped-query attention are repeated per query head.
        """
        if any(w is None for w in self._out_proj):
            return None
        heads = frozenset(ablate)
        enc, _ = self._encode(text)
        seen: list = []
        token = _RECORDER.set(seen)
        try:
            self._forward(enc, self._keep(heads), want_attentions=False)
        finally:
            _RECORDER.reset(token)
        values, w_o = [], []
        for (module, value), weight in zip(seen, self._out_proj):
            v = value[0].float().cpu()  # (H_kv, K, dh)
            values.append(repeat_kv(v, self.n_heads))  # (H, K, dh)
            w = weight.detach().float().cpu()  # (D, H * dh), as nn.Linear stores it
            w_o.append(out_proj_per_head(w, self.n_heads))  # (H, dh, D)
        keep = head_keep_mask(heads, self.n_layers, self.n_heads)  # (L, H)
        values = torch.stack(values) * keep[:, :, None, None]  # (L, H, K, dh): an ablated head adds 0
        return values, torch.stack(w_o)  # (L, H, K, dh), (L, H, dh, D)

    # -- one head opened up ------------------------------------------------------------------------------------
    def _attention_module(self, layer: int) -> torch.nn.Module:
        return next(m for m in self._model.modules() if self._layer_of.get(id(m)) == layer)

    def _inside_layer(self, text: str, layer: int, ablate: frozenset[Head],
                      replace: torch.Tensor | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up (see `HeadInside`) from one forward with `ablate` applied (outputs 0, or
        `replace`, as in `_run`). q, k, v, the
        mask and the weights are what the model's own eager attention received and returned (captured per call in
        ablation.py); scores are recomputed from them and checked against those weights."""
        module = self._attention_module(layer)
        out_layer = _find_out_layer(self._model, module)
        if out_layer is None:
            raise UnavailableError(
                f"{self.info.title}: the linear map that combines the heads of layer {layer} was not found (looked "
                "for o_proj, out_proj, dense, c_proj and a BERT-style output.dense), so a head's contribution "
                "cannot be computed for this architecture."
            )
        enc, _ = self._encode(text)
        keep = head_keep_mask(ablate, self.n_layers, self.n_heads)[None].to(self._device)  # (1, L, H)
        # What each head hands the output projection, after the intervention (0, or `replace`), recorded per layer.
        edit = HeadEdit(keep, None if replace is None else replace.to(self._device), capture=True)
        with _ablation.inside(module) as found:
            out = self._forward(enc, None, want_attentions=False, edit=edit)
        if not found:
            raise UnavailableError(f"{self.info.title}: layer {layer}'s attention did not run through "
                                   "transformers' attention interface, so its queries and keys cannot be read.")
        q = found["query"][0].float().cpu()  # (H, T, dh)
        k_kv = found["key"][0].float().cpu()  # (H_kv, T, dh)
        v_kv = found["value"][0].float().cpu()  # (H_kv, T, dh)
        weights = found["weights"][0].float().cpu()  # (H, Q, K)
        H, T, dh = q.shape
        group = H // k_kv.shape[0]  # query heads per key/value head; 1 without grouped-query attention
        k, v = repeat_kv(k_kv, H), repeat_kv(v_kv, H)  # (H, K, dh), (H, K, dh)
        scale = float(found["scaling"] if found["scaling"] is not None else dh ** -0.5)
        scores = q @ k.transpose(-2, -1) * scale  # (H, Q, K)
        allowed = _allowed(found["mask"], T)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))  # (H, Q, K)
        gap = float((torch.softmax(scores, dim=-1) - weights).abs().max())
        if gap > 1e-4:
            raise UnavailableError(
                f"{self.info.title}: softmax(q·kᵀ·scale) differs from this model's attention weights by {gap:.2g}: "
                "its attention adds something to the scores (e.g. ALiBi biases or soft-capping), so showing plain "
                "scores would be wrong."
            )
        # Each head's output, as the output projection sees it (weights @ v, or what replaced it), through its slice.
        ctx = edit.outputs[layer][0].float().cpu()  # (H, T, dh)
        weight, bias = _out_weight(out_layer)  # (D, H * dh), (D,) or None
        contribution = ctx @ out_proj_per_head(weight, H)  # (H, T, D)
        resid = out.hidden_states[layer][0].float().cpu()  # (T, D): the input of this layer's block
        labels = self._labels(enc["input_ids"][0].tolist())
        return [
            HeadInside(tokens=labels, layer=layer, head=h, q=q[h], k=k[h], v=v[h], scores=scores[h],
                       weights=weights[h], contribution=contribution[h], scale=scale, bias=bias, resid=resid,
                       kv_head=h // group, ablated=(layer, h) in ablate)
            for h in range(H)
        ]

    def examples(self) -> list[tuple[str, str, str]]:
        return shipped_examples()

    # -- tokenization ------------------------------------------------------------------------------------------
    def _encode(self, text: str) -> tuple[dict, int]:
        """Tokenize, keeping the first `max_tokens`. Returns (model inputs, number of tokens dropped)."""
        tok = self._tokenizer
        enc = tok(text, add_special_tokens=True, verbose=False, return_tensors="pt")
        cap = self.info.max_tokens
        dropped = max(enc["input_ids"].shape[1] - cap, 0)
        if dropped:  # only long texts pay for a second pass; the tokenizer keeps [SEP]-like end tokens
            enc = tok(text, add_special_tokens=True, truncation=True, max_length=cap, return_tensors="pt")
        enc = {k: v.to(self._device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        return enc, dropped

    def _labels(self, ids: list[int]) -> list[str]:
        """Display labels. Byte-level BPE pieces ('Ġkeys', 'Ċ', 'Ã¯ve') are always decoded to their text (' keys',
        newline, 'ïve'); a piece holding only part of a character shows its bytes as `⟨e2⟩`. WordPiece and
        SentencePiece pieces keep their own markers ('##s', '▁the'), which tell where words start."""
        pieces = self._tokenizer.convert_ids_to_tokens(ids)
        if not _byte_level(self._tokenizer):
            return pieces
        special = set(self._tokenizer.all_special_tokens)
        return [p if p in special else _byte_piece_text(p) for p in pieces]

    def decode(self, token_id: int) -> str:
        return self.decode_ids([token_id])

    def decode_ids(self, ids: list[int]) -> str:
        """The text of these ids; with byte-level BPE a character cut off at either end shows as `⟨e6⟩`."""
        ids = [int(i) for i in ids]
        if _byte_level(self._tokenizer):
            return _byte_piece_text("".join(self._tokenizer.convert_ids_to_tokens(ids)))
        return self._tokenizer.decode(ids)

    @property
    def mask_token(self) -> str | None:
        return getattr(self._tokenizer, "mask_token", None)

    # -- running -----------------------------------------------------------------------------------------------
    def _keep(self, ablate: frozenset[Head]) -> torch.Tensor | None:
        """The keep mask (1, L, H) of one forward, or None when every head is on: the attention function then
        leaves every head's output as it is."""
        if not ablate:
            return None
        return head_keep_mask(ablate, self.n_layers, self.n_heads)[None].to(self._device)  # (1, L, H)

    def _forward(self, enc: dict, keep: torch.Tensor | None, want_attentions: bool, edit: HeadEdit | None = None):
        """One forward; heads are switched off through the same HeadEdit that replaces and records them."""
        if edit is None and keep is not None:
            edit = HeadEdit(keep)
        with torch.no_grad(), edited(self._layer_of, edit):
            return self._model(**enc, output_attentions=want_attentions, output_hidden_states=True)

    def _final_hidden(self, out) -> torch.Tensor:
        if getattr(out, "last_hidden_state", None) is not None:
            return out.last_hidden_state  # (B, T, D)
        return out.hidden_states[-1]  # (B, T, D)

    def _run(self, text: str, ablate: frozenset[Head], replace: torch.Tensor | None = None) -> AttentionRun:
        enc, dropped = self._encode(text)
        ids = enc["input_ids"][0].tolist()
        keep, edit = self._keep(ablate), None
        if replace is not None:  # the heads in `ablate` output `replace`, not 0
            keep, edit = None, HeadEdit(keep, replace.to(self._device))
        out = self._forward(enc, keep, want_attentions=True, edit=edit)
        attentions = torch.stack([a[0] for a in out.attentions]).float().cpu()  # (L, H, Q, K)
        logits = getattr(out, "logits", None)
        special_ids = set(self._tokenizer.all_special_ids)
        unk = self._tokenizer.unk_token_id
        return AttentionRun(
            tokens=self._labels(ids),
            attentions=attentions,
            ablated=ablate,
            output=self._final_hidden(out)[0].float().cpu(),  # (T, D)
            logits=None if logits is None else logits[0].float().cpu(),  # (T, V)
            token_ids=ids,
            truncated=dropped,
            unknown=tuple(i for i, t in enumerate(ids) if unk is not None and t == unk),
            special=tuple(i for i, t in enumerate(ids) if t in special_ids),
        )

    def run_batch_keep(self, text: str, keep: torch.Tensor,
                       replace: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        text = check_text(text)
        if keep.ndim != 3 or keep.shape[1:] != (self.n_layers, self.n_heads):
            raise InputError(f"keep must be (B, {self.n_layers}, {self.n_heads}); got {tuple(keep.shape)}")
        enc, _ = self._encode(text)
        batch = keep.shape[0]
        enc = {k: v.expand(batch, -1) for k, v in enc.items()}
        keep, edit = keep.to(self._device), None
        if replace is not None:
            keep, edit = None, HeadEdit(keep, replace.to(self._device))
        out = self._forward(enc, keep, want_attentions=False, edit=edit)
        logits = getattr(out, "logits", None)
        return self._final_hidden(out).float().cpu(), None if logits is None else logits.float().cpu()


    # -- interventions: head outputs, their gradients, the readout for direct effects -----------------------------
    def token_count(self, text: str) -> int:
        return self._encode(check_text(text))[0]["input_ids"].shape[1]

    def token_id(self, piece: str) -> int:
        ids = self._tokenizer(piece, add_special_tokens=False)["input_ids"]
        if len(ids) != 1:
            pieces = self._tokenizer.convert_ids_to_tokens(ids)
            raise InputError(f"{piece!r} is {len(ids)} tokens for this model ({pieces}), not one; pick a word that "
                             "is a single token (for a word after a space, include the space: ' Mary')")
        return int(ids[0])

    def head_outputs(self, text: str) -> torch.Tensor:
        enc, _ = self._encode(check_text(text))
        edit = HeadEdit(capture=True)
        self._forward(enc, None, want_attentions=False, edit=edit)
        return edit.stacked()  # (L, H, T, dh)

    def head_gradients(self, text: str, metric) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs, d metric / d outputs), both (L, H, T, dh). torch.autograd.grad, not backward(): nothing is
        accumulated in the shared model's parameters."""
        enc, _ = self._encode(check_text(text))
        edit = HeadEdit(capture=True, grad=True)
        with torch.enable_grad(), edited(self._layer_of, edit):
            out = self._model(**enc, output_hidden_states=True)
            logits = getattr(out, "logits", None)
            value = metric(self._final_hidden(out)[0].float(), None if logits is None else logits[0].float())
            grads = torch.autograd.grad(value, edit.deltas)  # per layer (1, H, T, dh)
        return edit.stacked(), torch.stack([g[0] for g in grads]).float().cpu()  # (L, H, T, dh) twice

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

    def readout(self, text: str) -> Readout | None:
        """The run on `text` (all heads on) as parts for direct effects (see `Readout`). None when this model has
        no LM head, no recognised final norm or output projection, or when the frozen-scale norm does not
        reproduce the model's own output (e.g. logits soft-capped), so no number shown rests on a guess."""
        norm = self._final_norm
        if norm is None or any(w is None for w in self._out_proj):
            return None
        enc, _ = self._encode(check_text(text))
        edit = HeadEdit(capture=True)
        with final_norm_io() as seen:
            out = self._forward(enc, None, want_attentions=False, edit=edit)
        if len(seen) != 1:
            return None
        residual, normed = (t[0].detach().float().cpu() for t in seen[0])  # (T, D), (T, D)
        gain = norm.weight.detach().float().cpu()  # (D,)
        bias = getattr(norm, "bias", None)
        bias = None if bias is None else bias.detach().float().cpu()  # (D,)
        centered = isinstance(norm, torch.nn.LayerNorm) or "LayerNorm" in type(norm).__name__
        centred_res = residual - residual.mean(-1, keepdim=True) if centered else residual  # (T, D)
        # The scale the norm divided by, read off its own input and output, so any epsilon convention is honoured.
        shifted = normed - (0 if bias is None else bias)  # (T, D)
        scale = (gain * centred_res).norm(dim=-1) / shifted.norm(dim=-1).clamp_min(1e-12)  # (T,)
        rebuilt = gain * centred_res / scale[:, None] + (0 if bias is None else bias)  # (T, D)
        if not torch.allclose(rebuilt, normed, atol=1e-4 * float(normed.abs().max()) + 1e-6):
            return None
        head = self._model.get_output_embeddings()
        unembed = head.weight.detach()  # (V, D), not copied
        unembed_bias = None if getattr(head, "bias", None) is None else head.bias.detach().float().cpu()  # (V,)
        logits = out.logits[0].float().cpu()  # (T, V)
        again = normed @ unembed.float().cpu().T + (0 if unembed_bias is None else unembed_bias)  # (T, V)
        if not torch.allclose(again, logits, atol=1e-3 * float(logits.abs().max()) + 1e-5):
            return None
        w_o = torch.stack([out_proj_per_head(w.detach().float().cpu(), self.n_heads) for w in self._out_proj])
        return Readout(outputs=edit.stacked(), w_o=w_o, residual=residual, scale=scale, centered=centered,
                       gain=gain, bias=bias, unembed=unembed.float().cpu(), unembed_bias=unembed_bias,
                       logits=logits)  # w_o (L, H, dh, D)


def _find_out_proj(model, attention: torch.nn.Module, n_layers: int) -> torch.Tensor | None:
    """The weight (D, H * dh) of the linear map that combines this attention module's heads, if it can be found."""
    layer = _find_out_layer(model, attention)
    return None if layer is None else _out_weight(layer)[0]


def _is_linear(layer) -> bool:
    # GPT-2's Conv1D is a linear layer with its weight stored transposed (in, out).
    return isinstance(layer, torch.nn.Linear) or type(layer).__name__ == "Conv1D"


def _find_out_layer(model, attention: torch.nn.Module) -> torch.nn.Module | None:
    """The linear layer that combines this attention module's heads (o_proj, out_proj, c_proj, BERT's sibling
    output.dense), or None."""
    for name in ("o_proj", "out_proj", "c_proj", "dense"):
        layer = getattr(attention, name, None)
        if _is_linear(layer):
            return layer
    # BERT-style: the self-attention module's sibling `output.dense`.
    for parent in model.modules():
        if any(child is attention for child in parent.children()):
            output = getattr(parent, "output", None)
            dense = getattr(output, "dense", None)
            if _is_linear(dense):
                return dense
    return None


def _out_weight(layer: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight (D, H * dh) as nn.Linear stores it, bias (D,) or None), float32 on the CPU."""
    weight = layer.weight.detach().float().cpu()
    if not isinstance(layer, torch.nn.Linear):  # Conv1D: (H * dh, D)
        weight = weight.T  # (D, H * dh)
    bias = None if getattr(layer, "bias", None) is None else layer.bias.detach().float().cpu()  # (D,)
    return weight, bias


def _allowed(mask: torch.Tensor | None, n_keys: int) -> torch.Tensor | None:
    """Where a query may look, (Q, K) bool, from the mask eager attention adds (additive float: 0 allowed, the
    dtype's minimum forbidden; or boolean); None when there is no mask."""
    if mask is None:
        return None
    m = mask[0]
    while m.dim() > 2:  # (1, Q, K) or (H, Q, K) broadcast over heads: the first is every head's
        m = m[0]
    m = m[..., :n_keys].cpu()  # eager slices a mask longer than the keys the same way
    if m.dtype == torch.bool:
        return m
    return m > torch.finfo(m.dtype).min / 2


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
