"""TinyLM: a small causal language model built from `MultiHeadSelfAttention`, small enough to show every head.

Axis letters: B = batch, T = token position, L = layers, H = heads, D = d_model, F = d_mlp, V = vocabulary.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

import torch
from torch import nn
from torch.nn import functional as F

from mha_viz.models.attention import MultiHeadSelfAttention, run_stack
from mha_viz.models.points import HeadEdit


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 5760
    n_layers: int = 3  # induction needs >= 2 (a previous-token head feeding a later head); 3 leaves room for agreement
    n_heads: int = 4
    d_model: int = 64  # 96 trained no better on these relations and took 1.6x as long per step
    max_len: int = 128  # a paragraph; the longest text the app accepts for this model
    # Positions trained past max_len, never served: a position's previous-token attention is trained only where a
    # later query's induction head reads it, so in a 64-position stack positions 62-63 were barely trained (one
    # seed's previous-token head put 0.45 and 0.00 there). With 6 more the served ones all have later
    # queries. The position table holds n_positions = max_len + train_margin rows.
    train_margin: int = 6
    d_mlp: int = 256  # 4 x d_model, as in GPT-2
    # Each query's scores times log(keys it sees) (models/attention.length_scale, Scalable-Softmax): without it a
    # head's previous-token weight faded along the text where the recipe's seed put that head (seed 1: 0.97 at
    # position 20, 0.84-0.89 at 52-63). With it every seed's head holds to the end of the context.
    length_scaled: bool = True
    seed: int = 0  # initialisation seed: the untrained twin is exactly the trained model's starting point
    # tied: the LM head is the token embedding (Press & Wolf 2017). With a vocabulary of thousands the two tables
    # are most of the weights (tied: 2.1 MB float32, 1.06 MB a float16 checkpoint; untied 3.6 and 1.8), but at
    # 5,751 tokens the tied model's previous-token head had not begun to form by step 1,600 (0.10 on random
    # sequences), the untied one's had (0.18, rising): benchmarks/RESULTS.md, issue 51, trials B and C.
    tied: bool = False

    def __post_init__(self):
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        for name in ("vocab_size", "n_layers", "n_heads", "d_model", "max_len", "d_mlp"):
            if getattr(self, name) < 1:
                raise ValueError(f"TinyConfig.{name} must be >= 1; got {getattr(self, name)}")
        if self.train_margin < 0:
            raise ValueError(f"TinyConfig.train_margin must be >= 0; got {self.train_margin}")

    @property
    def n_positions(self) -> int:
        """Rows of the position table, and the longest sequence the stack runs (training uses all of them)."""
        return self.max_len + self.train_margin

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "TinyConfig":
        data = json.loads(text)
        data.setdefault("train_margin", 0)  # a model trained before the margin existed has a table of max_len
        data.setdefault("length_scaled", False)  # and one trained before length scaling has plain softmax
        data.setdefault("tied", False)  # and one trained before issue 51 has its own LM head
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"config.json has keys TinyConfig does not know: {unknown}; retrain with this version")
        return cls(**data)


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x)) (as in GPT-2)."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadSelfAttention(cfg.d_model, cfg.n_heads, cfg.n_positions, causal=True,
                                           length_scaled=cfg.length_scaled)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_mlp), nn.GELU(), nn.Linear(cfg.d_mlp, cfg.d_model))

    def forward(self, x: torch.Tensor, edit: HeadEdit | None = None, layer: int = 0,
                keys: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        a, weights = self.attn(self.ln1(x), None, edit, layer, keys)  # (B, T, D), (B, H, T, T)
        x = x + a  # (B, T, D)
        x = x + self.mlp(self.ln2(x))  # (B, T, D)
        return x, weights


class TinyLM(nn.Module):
    """Token + position embeddings, L pre-LN blocks, a final LayerNorm and an LM head (the token embedding when
    `cfg.tied`). With
    `cfg.length_scaled` each query's attention scores are multiplied by log(keys it sees) (Scalable-Softmax).

    forward(ids (B, T), head_keep (B, L, H) or (L, H) or None, edit (models/points.HeadEdit) or None)
        -> logits (B, T, V), hidden (B, T, D) after the final LayerNorm, attentions (B, L, H, T, T).
    `head_keep` (1 = on, 0 = off) is a shorthand for `edit=HeadEdit.keeping(head_keep)`: one mechanism.
    """

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.n_positions, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)
        if cfg.tied:
            self.head.weight = self.tok.weight  # one (V, D) table; files hold it once, as tok.weight

    @staticmethod
    def _init(module: nn.Module):
        # GPT-2's N(0, 0.02): small logits at the start, so the untrained twin's patterns are near uniform.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self, ids: torch.Tensor, head_keep: torch.Tensor | None = None, edit: HeadEdit | None = None,
        patterns: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        def embed() -> torch.Tensor:
            positions = torch.arange(ids.shape[1], device=ids.device)  # (T,)
            return self.tok(ids) + self.pos(positions)  # (B, T, D)

        x, edit, attentions = run_stack(self.blocks, ids, head_keep, edit, embed, self.cfg.n_positions,
                                        patterns=patterns)  # (B, T, D), the edit in use, (B, L, H, T, T) or None
        hidden = self.ln_f(x)  # (B, T, D)
        if edit is not None:
            edit.finished(x, hidden)
        at = edit.logits_at if edit is not None else None
        logits = self.head(hidden if at is None else hidden[:, at])  # (B, T, V), or (B, P, V) at those positions
        return logits, hidden, attentions

    def loss(self, ids: torch.Tensor, ignore_index: int) -> torch.Tensor:
        """Next-token cross-entropy: position t predicts ids[t + 1]; `ignore_index` (padding) is not scored."""
        logits, _, _ = self(ids[:, :-1])  # (B, T-1, V)
        targets = ids[:, 1:]  # (B, T-1)
        flat = logits.reshape(-1, logits.shape[-1])  # (B*(T-1), V)
        return F.cross_entropy(flat, targets.reshape(-1), ignore_index=ignore_index)  # scalar


def saved_state(model: TinyLM, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """The tensors a weights file holds, by name: a tied LM head is not written twice (it is tok.weight)."""
    skip = {"head.weight"} if model.cfg.tied else set()
    return {k: (v.detach() if dtype is None else v.detach().to(dtype)).contiguous()
            for k, v in sorted(model.state_dict().items()) if k not in skip}


def build_model(cfg: TinyConfig) -> TinyLM:
    """The model at its seeded initialisation, without disturbing the caller's global RNG state."""
    # fork_rng: the app shares one process; seeding the global generator would change other code's randomness.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return TinyLM(cfg)
