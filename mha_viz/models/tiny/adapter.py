"""The adapter from TinyLM to the data contract: `load_tiny()` -> a `Model` whose `run(text)` is an AttentionRun.

Token labels are the words as typed (lowercased), with "<bos>" first. A word the vocabulary does not know is
shown as typed, fed to the model as <unk>, and its position is listed in `run.unknown`.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from mha_viz.settings import ASSETS
from mha_viz.contract import (AttentionRun, Head, HeadInside, InputError, Model, ModelInfo, ModelLoadError, Readout,
                              check_text, head_keep_mask)
from mha_viz.models.interventions import HeadEdit
from mha_viz.models.tiny.corpus import BOS, Vocab, build_vocab, example_sentences, ground_truth, tokenize
from mha_viz.models.heads import out_proj_per_head, split_heads
from mha_viz.models.tiny.architecture import TinyConfig, TinyLM, build_model

TINY_ASSETS = ASSETS / "tiny"


class TinyModel(Model):
    """A TinyLM behind the contract. Read-only after construction, so one instance can serve every session."""

    def __init__(self, lm: TinyLM, vocab: Vocab, info: ModelInfo):
        if lm.cfg.vocab_size != len(vocab):
            raise ModelLoadError(
                f"the model expects {lm.cfg.vocab_size} words but vocab.json has {len(vocab)}; "
                "the two files come from different training runs: rerun `make train`"
            )
        self.lm = lm.eval()
        self.vocab = vocab
        self.info = info
        self.config = lm.cfg

    def decode(self, token_id: int) -> str:
        """The vocabulary word of one id (e.g. to label next-token predictions)."""
        return self.vocab.word(int(token_id))

    def encode(self, text: str) -> tuple[list[str], list[int], int]:
        """Text -> (display labels, token ids, how many tokens were cut off); <bos> first, at most max_len."""
        words = tokenize(text)
        if not words:
            raise InputError("The text has no words the tokenizer can read: type a sentence.")
        labels = [BOS] + words
        ids = [self.vocab.bos_id] + self.vocab.encode(words)
        cut = max(0, len(ids) - self.config.max_len)  # keep the first max_len tokens
        return labels[: self.config.max_len], ids[: self.config.max_len], cut

    def _run(self, text: str, ablate: frozenset[Head], replace: torch.Tensor | None = None) -> AttentionRun:
        labels, ids, cut = self.encode(text)
        keep = head_keep_mask(ablate, self.n_layers, self.n_heads).unsqueeze(0)  # (1, L, H)
        edit = None
        if replace is not None:  # the heads in `ablate` output `replace`, not 0
            keep, edit = None, HeadEdit(keep, replace)
        with torch.no_grad():
            logits, hidden, attentions = self.lm(torch.tensor([ids]), keep, edit)  # (1,T,V) (1,T,D) (1,L,H,T,T)
        return AttentionRun(
            tokens=labels,
            attentions=attentions[0].float().contiguous(),  # (L, H, Q, K)
            ablated=ablate,
            output=hidden[0].float(),  # (T, D)
            logits=logits[0].float(),  # (T, V)
            token_ids=ids,
            truncated=cut,
            unknown=tuple(i for i, t in enumerate(ids) if t == self.vocab.unk_id),
            special=(0,),  # only <bos>: the tokenizer adds nothing else
        )

    def norm_inputs(self, text: str, ablate=()) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-head value vectors and output-projection slices for the norm view (Kobayashi et al. 2020):
        (values (L, H, K, dh), w_o (L, H, dh, D)). The blocks are stepped through here, not hooked, so nothing
        is registered on the shared model."""
        _, ids, _ = self.encode(text)
        keep = head_keep_mask(frozenset(ablate), self.n_layers, self.n_heads)[None]  # (1, L, H)
        H, D = self.n_heads, self.config.d_model
        values, w_o = [], []
        with torch.no_grad():
            T = len(ids)
            x = self.lm.tok(torch.tensor([ids])) + self.lm.pos(torch.arange(T))  # (1, T, D)
            for layer, block in enumerate(self.lm.blocks):
                v = block.attn.qkv(block.ln1(x)).split(D, dim=-1)[2]  # (1, T, D)
                values.append(split_heads(v[0], H))  # (H, K, dh)
                w_o.append(out_proj_per_head(block.attn.out.weight, H))  # (H, dh, D)
                x, _ = block(x, keep[:, layer])  # (1, T, D)
        values = torch.stack(values).float() * keep[0, :, :, None, None]  # (L, H, K, dh): an ablated head adds 0
        return values, torch.stack(w_o).float()  # (L, H, K, dh), (L, H, dh, D)

    def _inside_layer(self, text: str, layer: int, ablate: frozenset[Head],
                      replace: torch.Tensor | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up (see `HeadInside`). The blocks before it run as the model runs them, with
        `ablate` applied; the target block's attention is written out step by step, as `MultiHeadSelfAttention`
        does it, so q, k, v and the scores exist. Stepped through, not hooked: nothing is registered on the shared
        model."""
        labels, ids, _ = self.encode(text)
        keep = head_keep_mask(ablate, self.n_layers, self.n_heads)  # (L, H)
        # What each head hands the output projection, after the intervention (0, or `replace`), recorded per layer.
        edit = HeadEdit(keep[None], replace, capture=True)
        H, D = self.n_heads, self.config.d_model
        dh = D // H
        T = len(ids)
        with torch.no_grad():
            x = self.lm.tok(torch.tensor([ids])) + self.lm.pos(torch.arange(T))  # (1, T, D)
            for before in range(layer):
                x, _ = self.lm.blocks[before](x, None, functools.partial(edit, before))  # (1, T, D)
            block = self.lm.blocks[layer]
            attn = block.attn
            resid = x[0].float()  # (T, D)
            # 1. Project to queries, keys and values, one slice of width dh per head.
            q, k, v = attn.qkv(block.ln1(x))[0].split(D, dim=-1)  # 3 x (T, D)
            q, k, v = split_heads(q, H), split_heads(k, H), split_heads(v, H)  # 3 x (H, T, dh)
            # 2. Scores, with -inf where a query may not look (later keys of this causal model).
            scale = 1.0 / math.sqrt(dh)
            scores = q @ k.transpose(-2, -1) * scale  # (H, Q, K)
            if attn.causal:
                scores = scores.masked_fill(~attn.tril[:T, :T], float("-inf"))  # (H, Q, K)
            # The block's own weights, so they are exactly the run's; the tests check softmax(scores) against them.
            _, weights = attn(block.ln1(x), None, functools.partial(edit, layer))  # (1, H, Q, K)
            weights = weights[0]  # (H, Q, K)
            # 3. Each head's output, as the output projection sees it (weights @ v, or what replaced it), through
            # its slice of the output projection.
            ctx = edit.outputs[layer][0]  # (H, T, dh)
            w_o = out_proj_per_head(attn.out.weight, H)  # (H, dh, D)
            contribution = ctx @ w_o  # (H, T, D)
        bias = None if attn.out.bias is None else attn.out.bias.detach().float()  # (D,)
        return [
            HeadInside(tokens=labels, layer=layer, head=h, q=q[h].float(), k=k[h].float(), v=v[h].float(),
                       scores=scores[h].float(), weights=weights[h].float(), contribution=contribution[h].float(),
                       scale=scale, bias=bias, resid=resid, kv_head=h, ablated=(layer, h) in ablate)
            for h in range(H)
        ]

    def ground_truth(self, tokens: list[str]):
        """The corpus grammar's subject-verb pairs and repeated words in this text (see `corpus.ground_truth`)."""
        return ground_truth(tokens)

    def examples(self) -> list[tuple[str, str, str]]:
        return [(f"{e.relation}: {e.label}"[:48], e.text, e.label) for e in example_sentences()]

    def run_batch_keep(self, text: str, keep: torch.Tensor,
                       replace: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward over a batch of head masks `keep` (B, L, H) on the same text: (output (B,T,D), logits (B,T,V))."""
        text = check_text(text)
        if keep.dim() != 3 or keep.shape[1:] != (self.n_layers, self.n_heads):
            raise InputError(
                f"keep must be (B, {self.n_layers}, {self.n_heads}) with 1 = keep, 0 = ablate; got {tuple(keep.shape)}"
            )
        _, ids, _ = self.encode(text)
        batch = torch.tensor([ids]).expand(keep.shape[0], -1)  # (B, T)
        keep, edit = keep.float(), None
        if replace is not None:
            keep, edit = None, HeadEdit(keep, replace)
        with torch.no_grad():
            logits, hidden, _ = self.lm(batch, keep, edit)  # (B, T, V), (B, T, D), _
        return hidden.float(), logits.float()

    # -- interventions: head outputs, their gradients, the readout for direct effects -----------------------------
    def token_count(self, text: str) -> int:
        return len(self.encode(check_text(text))[1])

    def token_id(self, piece: str) -> int:
        words = tokenize(piece)
        if len(words) != 1 or words[0] not in self.vocab:
            raise InputError(f"{piece!r} is not one word of the tiny model's vocabulary; pick one it knows "
                             f"(e.g. {self.vocab.word(3)!r})")
        return self.vocab.id(words[0])

    def head_outputs(self, text: str) -> torch.Tensor:
        _, ids, _ = self.encode(check_text(text))
        edit = HeadEdit(capture=True)
        with torch.no_grad():
            self.lm(torch.tensor([ids]), None, edit)
        return edit.stacked()  # (L, H, T, dh)

    def head_gradients(self, text: str, metric) -> tuple[torch.Tensor, torch.Tensor]:
        """(outputs, d metric / d outputs), both (L, H, T, dh); autograd.grad leaves the weights' .grad alone."""
        _, ids, _ = self.encode(check_text(text))
        edit = HeadEdit(capture=True, grad=True)
        with torch.enable_grad():
            logits, hidden, _ = self.lm(torch.tensor([ids]), None, edit)  # (1, T, V), (1, T, D)
            grads = torch.autograd.grad(metric(hidden[0], logits[0]), edit.deltas)  # per layer (1, H, T, dh)
        return edit.stacked(), torch.stack([g[0] for g in grads]).float()  # (L, H, T, dh) twice

    def readout(self, text: str) -> Readout:
        """The run on `text` (all heads on) as parts for direct effects (see `Readout`). The blocks are stepped
        through here so the residual stream before the final LayerNorm can be read; nothing is hooked."""
        _, ids, _ = self.encode(check_text(text))
        edit = HeadEdit(capture=True)
        lm = self.lm
        with torch.no_grad():
            T = len(ids)
            x = lm.tok(torch.tensor([ids])) + lm.pos(torch.arange(T))  # (1, T, D)
            for layer, block in enumerate(lm.blocks):
                x, _ = block(x, None, lambda z, layer=layer: edit(layer, z))  # (1, T, D)
            residual = x[0].float()  # (T, D)
            logits = lm.head(lm.ln_f(x))[0].float()  # (T, V)
        ln = lm.ln_f
        scale = (residual.var(-1, unbiased=False) + ln.eps).sqrt()  # (T,): LayerNorm's divisor at this input
        w_o = torch.stack([out_proj_per_head(b.attn.out.weight.detach(), self.n_heads) for b in lm.blocks])
        return Readout(outputs=edit.stacked(), w_o=w_o, residual=residual, scale=scale, centered=True,
                       gain=ln.weight.detach().float(), bias=ln.bias.detach().float(),
                       unembed=lm.head.weight.detach().float(), unembed_bias=None, logits=logits)  # w_o (L, H, dh, D)


CHECKPOINTS = "checkpoints"  # as in train.py, which writes step-NNNNNN.safetensors files there


def checkpoint_steps(folder: str | Path = TINY_ASSETS) -> list[int]:
    """The training steps saved in `folder`/checkpoints, sorted; [] when there are none."""
    found = []
    for path in (Path(folder) / CHECKPOINTS).glob("step-*.safetensors"):
        try:
            found.append(int(path.stem.removeprefix("step-")))
        except ValueError:
            continue  # not a file the trainer wrote
    return sorted(found)


def load_tiny(trained: bool = True, folder: str | Path = TINY_ASSETS, step: int | None = None) -> TinyModel:
    """The in-repo tiny model: trained weights from `folder`, or (trained=False) the same architecture at its
    seeded initialisation, i.e. exactly where training started. step=N loads the float16 checkpoint the trainer
    saved at training step N (step 0 is the initialisation, rounded to float16)."""
    folder = Path(folder)
    config_path, vocab_path, weights_path = (folder / n for n in ("config.json", "vocab.json", "model.safetensors"))
    if step is not None:
        weights_path = folder / CHECKPOINTS / f"step-{step:06d}.safetensors"
        if not weights_path.exists():
            saved = checkpoint_steps(folder)
            raise ModelLoadError(
                f"the tiny model has no checkpoint at training step {step}; saved steps: "
                f"{', '.join(map(str, saved)) or 'none (run `make train`)'}"
            )
    if trained and not weights_path.exists():
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
        state = {k: v.float() for k, v in load_file(str(weights_path)).items()}
        missing, unexpected = lm.load_state_dict(state, strict=False)
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
    return TinyModel(lm, vocab, info)
