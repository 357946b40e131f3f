"""A BERT encoder (Devlin et al. 2019) written out in torch, to run all-MiniLM-L6-v2 without importing transformers.

Why: importing transformers' modeling code pulls in torch.distributed, torch._dynamo, sympy and scipy (about 1.4 s
of a cold start, measured in benchmarks/RESULTS.md) before a single weight loads; this file needs torch alone.
The attention is the in-repo `MultiHeadSelfAttention` (bidirectional here), so heads are switched off, replaced
and recorded through the same `edit` argument as the tiny model's. tests/models/bert/ checks every output against
transformers' BertModel on the same weights.

Axis letters as in mha_viz/models/attention.py: B batch, T tokens, H heads, dh head size, D d_model.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mha_viz.models.attention import MultiHeadSelfAttention, run_stack
from mha_viz.models.points import HeadEdit


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_mlp: int
    max_len: int
    type_vocab_size: int
    eps: float

    @classmethod
    def from_hf(cls, path: str | Path) -> "BertConfig":
        """The fields of a transformers `config.json` this encoder needs; refuses what it does not implement."""
        cfg = json.loads(Path(path).read_text())
        if cfg.get("model_type") != "bert" or cfg.get("hidden_act", "gelu") != "gelu" \
                or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: not a BERT encoder with GELU and absolute positions; load it through "
                             "transformers instead")
        return cls(vocab_size=cfg["vocab_size"], d_model=cfg["hidden_size"], n_layers=cfg["num_hidden_layers"],
                   n_heads=cfg["num_attention_heads"], d_mlp=cfg["intermediate_size"],
                   max_len=cfg["max_position_embeddings"], type_vocab_size=cfg.get("type_vocab_size", 2),
                   eps=cfg.get("layer_norm_eps", 1e-12))


class BertLayer(nn.Module):
    """Post-LN block, as in BERT: x = LN(x + attn(x)), then x = LN(x + W2 gelu(W1 x))."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.attn = MultiHeadSelfAttention(cfg.d_model, cfg.n_heads, cfg.max_len, causal=False)
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.up = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.down = nn.Linear(cfg.d_mlp, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.eps)

    def forward(self, x: torch.Tensor, edit: HeadEdit | None = None, layer: int = 0,
                keys: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        a, weights = self.attn(x, None, edit, layer, keys)  # (B, T, D), (B, H, T, T)
        x = self.ln1(x + a)  # (B, T, D)
        # BERT's "gelu" is the exact, erf-based one (transformers' ACT2FN["gelu"]).
        x = self.ln2(x + self.down(nn.functional.gelu(self.up(x))))  # (B, T, D)
        return x, weights


class BertEncoder(nn.Module):
    """Embeddings (word + position + token type 0, then LayerNorm) and L post-LN layers; no pooler, no LM head.

    forward(ids (B, T), head_keep (B, L, H) or (L, H) or None, edit (models/points.HeadEdit) or None,
            lengths (B,) or None) -> hidden (B, T, D) after the last layer, attentions (B, L, H, T, T).
    `lengths`: row b is a text of lengths[b] tokens, right-padded; no position attends to the padding, and every
    other part of a layer works per position, so a text's positions come out as when it runs alone.
    Dropout is left out: the model is only ever evaluated.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.typ = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        self.ln_emb = nn.LayerNorm(cfg.d_model, eps=cfg.eps)
        self.layers = nn.ModuleList(BertLayer(cfg) for _ in range(cfg.n_layers))

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> the first layer's input (B, T, D)."""
        T = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(T, device=ids.device)) + self.typ.weight[0]  # (B, T, D)
        return self.ln_emb(x)  # (B, T, D)

    def forward(self, ids: torch.Tensor, head_keep: torch.Tensor | None = None, edit: HeadEdit | None = None,
                lengths=None, patterns: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        keys = None
        if lengths is not None:
            keys = torch.arange(ids.shape[1], device=ids.device)[None] < torch.as_tensor(
                list(lengths), device=ids.device)[:, None]  # (B, T): the real positions of each row
        x, _, attentions = run_stack(self.layers, ids, head_keep, edit, lambda: self.embed(ids), self.cfg.max_len,
                                     keys, patterns)  # (B, T, D), the edit in use, (B, L, H, T, T) or None
        return x, attentions


def load_bert(folder: str | Path) -> BertEncoder:
    """A BERT encoder with the weights of a transformers `BertModel` folder (config.json, model.safetensors):
    q, k and v are stacked into the one qkv projection, in that order."""
    from safetensors.torch import load_file

    folder = Path(folder)
    cfg = BertConfig.from_hf(folder / "config.json")
    w = load_file(str(folder / "model.safetensors"))
    w = {k.removeprefix("bert."): v.float() for k, v in w.items()}
    state = {"tok.weight": w["embeddings.word_embeddings.weight"],
             "pos.weight": w["embeddings.position_embeddings.weight"],
             "typ.weight": w["embeddings.token_type_embeddings.weight"],
             "ln_emb.weight": w["embeddings.LayerNorm.weight"], "ln_emb.bias": w["embeddings.LayerNorm.bias"]}
    for i in range(cfg.n_layers):
        p = f"encoder.layer.{i}."
        for part in ("weight", "bias"):
            state[f"layers.{i}.attn.qkv.{part}"] = torch.cat(
                [w[f"{p}attention.self.{n}.{part}"] for n in ("query", "key", "value")])  # (3D, D) or (3D,)
            state[f"layers.{i}.attn.out.{part}"] = w[f"{p}attention.output.dense.{part}"]
            state[f"layers.{i}.ln1.{part}"] = w[f"{p}attention.output.LayerNorm.{part}"]
            state[f"layers.{i}.up.{part}"] = w[f"{p}intermediate.dense.{part}"]
            state[f"layers.{i}.down.{part}"] = w[f"{p}output.dense.{part}"]
            state[f"layers.{i}.ln2.{part}"] = w[f"{p}output.LayerNorm.{part}"]
    model = BertEncoder(cfg)
    model.load_state_dict(state, strict=True)
    return model.eval()
