"""The checks of the architecture matrix, each against transformers itself: a model loaded by mha-viz beside the
same folder loaded by transformers with eager attention, and edits made on the reference by an independent forward
pre-hook on the attention output projection (its input is the heads' outputs side by side, head h at columns
h * dh .. (h + 1) * dh)."""
from __future__ import annotations

import contextlib
import dataclasses
import inspect
from dataclasses import dataclass
from pathlib import Path

import torch

import mha_viz
from tests.models.hf.architectures import Arch, D, H

# TEXT and SOURCE have the same token count and share their first 13 tokens, longer than the sliding windows (8).
TEXT = "The old man walked to the market in the morning and then he bought some bread for his wife."
SOURCE = "The old man walked to the market in the morning and then she sold some fish for her son."
OTHER = "A young girl ran down to the river in the evening, and later she found a small stone by the water."
HEAD = (1, 2)  # the head the edits switch off
ATOL = 2e-5

CHECKS = ("attention", "output", "zero", "mean", "resample", "patch", "batched", "inside", "circuits", "census",
          "generate")
WORDS = {
    "attention": "attention weights equal transformers' output_attentions (eager)",
    "output": "logits equal transformers'",
    "zero": "one head zero-ablated equals a pre-hook zeroing its slice of the output projection's input",
    "mean": "one head mean-ablated equals a pre-hook putting the head's mean there",
    "resample": "one head resample-ablated equals a pre-hook putting its output on the other text there",
    "patch": "one head patched from a second text equals a pre-hook putting its output on that text there",
    "batched": "batched ablation and patching rows (run_batch_keep) equal the one-run path",
    "inside": "inside(): weights are the run's, weights @ v is the head's output, contributions sum to the layer's",
    "circuits": "mha_viz.circuits runs: composition, copying and singular values of the right shapes, finite",
    "census": "mha_viz.head_census runs on a small config: finite scores for every head",
    "generate": "a continuation written with the cache: each step's attention equals one forward over the final "
                "sequence with a head off, and the greedy tokens equal transformers' generate; a model that is "
                "not causal says it cannot write",
}


@dataclass
class Loaded:
    arch: Arch
    folder: Path
    model: object  # the mha-viz model
    ref: torch.nn.Module  # the same folder in transformers, eager attention

    def inputs(self, text: str) -> dict:
        """The tokenizer's inputs for `text`, as transformers' own example code passes them."""
        enc = self.model._tokenizer(text, return_tensors="pt")
        params = inspect.signature(self.ref.forward).parameters
        return {k: v for k, v in enc.items() if k in params}

    def out_proj(self, layer: int) -> torch.nn.Module:
        return self.ref.get_submodule(self.arch.out_proj.format(l=layer))

    def call_of(self, layer: int) -> int:
        """Which call of layer `layer`'s output projection in one forward is that layer's: the layer itself where
        one module serves every layer (ALBERT), else its only call."""
        return layer if self.out_proj(0) is self.out_proj(1) else 0

    def ref_run(self, text: str, replace: dict | None = None, **kwargs):
        """transformers' forward on `text`, with head (l, h)'s slice of the output projection's input replaced by
        `replace[(l, h)]` ((T, dh) or (dh,))."""
        handles = []
        dh = D // H
        for (layer, head), value in (replace or {}).items():
            calls = []

            def pre(module, args, _layer=layer, _head=head, _value=value, _calls=calls):
                _calls.append(1)
                if len(_calls) - 1 != self.call_of(_layer):  # a shared module: only its call at this layer
                    return None
                x = args[0].clone()  # (1, T, H * dh): the heads' outputs side by side
                x[..., _head * dh:(_head + 1) * dh] = _value
                return (x, *args[1:])
            handles.append(self.out_proj(layer).register_forward_pre_hook(pre))
        try:
            with torch.no_grad():
                return self.ref(**self.inputs(text), **kwargs)
        finally:
            for h in handles:
                h.remove()

    def captured(self, text: str, layer: int, head: int) -> torch.Tensor:
        """Head (layer, head)'s output on `text` in transformers' forward -> (T, dh)."""
        seen = []
        hook = self.out_proj(layer).register_forward_pre_hook(lambda m, args: seen.append(args[0][0].clone()))
        try:
            self.ref_run(text)
        finally:
            hook.remove()
        dh = D // H
        return seen[self.call_of(layer)][:, head * dh:(head + 1) * dh]  # (T, dh)


def load(arch: Arch, folder: Path) -> Loaded:
    import transformers

    if arch.seq2seq:
        from tests.models.hf import matrix_seq2seq

        return matrix_seq2seq.load(arch, folder)

    model = mha_viz.load_model(str(folder))
    ref = getattr(transformers, arch.model).from_pretrained(folder, attn_implementation="eager").eval()
    return Loaded(arch, folder, model, ref)


def _close(ours: torch.Tensor, theirs: torch.Tensor, what: str) -> None:
    theirs = theirs.float()
    assert ours.shape == theirs.shape, f"{what}: shape {tuple(ours.shape)} vs transformers' {tuple(theirs.shape)}"
    err = float((ours.float() - theirs).abs().max())
    assert err <= ATOL * max(1.0, float(theirs.abs().max())), f"{what}: differs from transformers' by {err:.2e}"


def check_attention(m: Loaded) -> None:
    run = m.model.run(TEXT)
    ref = torch.stack(m.ref_run(TEXT, output_attentions=True).attentions)[:, 0]  # (L, H, T, T)
    _close(run.attentions, ref, "attention")


def check_output(m: Loaded) -> None:
    _close(m.model.run(TEXT).logits, m.ref_run(TEXT).logits[0], "logits")


def check_zero(m: Loaded) -> None:
    _close(m.model.run(TEXT, ablate={HEAD}).logits, m.ref_run(TEXT, {HEAD: 0.0}).logits[0], "zero-ablated logits")


def check_mean(m: Loaded) -> None:
    mean = m.model.head_means([OTHER, SOURCE])[HEAD]  # (dh,)
    ours = m.model.run(TEXT, ablate={HEAD}, ablation="mean", reference=[OTHER, SOURCE]).logits
    _close(ours, m.ref_run(TEXT, {HEAD: mean}).logits[0], "mean-ablated logits")


def check_resample(m: Loaded) -> None:
    n = m.model.token_count(TEXT)
    other = m.captured(OTHER, *HEAD)  # (P, dh)
    other = other[torch.arange(n).clamp_max(other.shape[0] - 1)]  # (T, dh): as `line_up` reads another text
    ours = m.model.run(TEXT, ablate={HEAD}, ablation="resample", reference=[OTHER]).logits
    _close(ours, m.ref_run(TEXT, {HEAD: other}).logits[0], "resample-ablated logits")


def check_patch(m: Loaded) -> None:
    assert m.model.token_count(TEXT) == m.model.token_count(SOURCE), "the two texts must have one token count"
    ours = m.model.run(TEXT, patch={HEAD}, source=SOURCE).logits
    _close(ours, m.ref_run(TEXT, {HEAD: m.captured(SOURCE, *HEAD)}).logits[0], "patched logits")


def check_batched(m: Loaded) -> None:
    model = m.model
    heads = [HEAD, (2, 3)]
    keep = torch.ones(len(heads), model.n_layers, model.n_heads)  # (B, L, H)
    for row, (layer, head) in enumerate(heads):
        keep[row, layer, head] = 0.0
    _, zeroed = model.run_batch_keep(TEXT, keep)  # (B, T, V)
    source = model.head_outputs(SOURCE)[None]  # (1, L, H, T, dh)
    _, patched = model.run_batch_keep(TEXT, keep, source)  # (B, T, V)
    for row, head in enumerate(heads):
        _close(zeroed[row], model.run(TEXT, ablate={head}).logits, f"batched zero row {head}")
        _close(patched[row], model.run(TEXT, patch={head}, source=SOURCE).logits, f"batched patch row {head}")


def check_inside(m: Loaded) -> None:
    model = m.model
    layer, head = HEAD
    run = model.run(TEXT)
    heads = model.inside_layer(TEXT, layer)
    inside = heads[head]
    _close(inside.weights, run.attentions[layer, head], "inside weights")
    _close(inside.weights @ inside.v, model.head_outputs(TEXT)[layer, head], "inside weights @ v")
    parts = sum(h.contribution for h in heads)  # (T, D)
    bias = 0.0 if inside.bias is None else inside.bias
    attn_in = torch.cat([m.captured(TEXT, layer, h) for h in range(model.n_heads)], dim=-1)  # (T, H * dh)
    _close(parts + bias, m.out_proj(layer)(attn_in[None])[0].detach(), "inside contributions + bias")


def check_circuits(m: Loaded) -> None:
    model = m.model
    c = mha_viz.circuits(model)
    L, Hn = model.n_layers, model.n_heads
    later = torch.ones(L, L, dtype=torch.bool).triu(1)[:, None, :, None].expand(L, Hn, L, Hn)  # l1 < l2
    for mode in ("q", "k", "v"):
        assert c.composition[mode].shape == (L, Hn, L, Hn) and torch.isfinite(c.composition[mode][later]).all()
    assert torch.isfinite(c.qk_singular).all() and torch.isfinite(c.ov_singular).all()
    assert c.copying is None or (c.copying.shape == (L, Hn) and torch.isfinite(c.copying).all())
    # W_V per head: the attention module's input through head h's slice, attended with the head's weights, is the
    # head's output in transformers' forward (checks how a fused projection was split; W_Q and W_K are split alike).
    # The attention module's input is read in transformers' forward (the same module by name): mha-viz's own run
    # may take its layers over from an earlier run of the text, so its modules need not run again.
    layer = HEAD[0]
    w = model.head_weights(layer)
    seen = []
    name = next(n for n, mod in model._model.named_modules() if mod is model._layers.modules[layer])
    hook = m.ref.get_submodule(name).register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append(args[0] if args else kwargs["hidden_states"]), with_kwargs=True)
    try:
        m.ref_run(TEXT)
    finally:
        hook.remove()
    x = seen[layer if model._layers.shared else 0][0].float()  # (T, D): what the attention module projects
    weights = model.run(TEXT).attentions[layer]  # (H, T, T)
    for h in range(Hn):
        v = x @ w.w_v[h] + (0.0 if w.b_v is None else w.b_v[h])  # (T, dh)
        _close(weights[h] @ v, m.captured(TEXT, layer, h), f"head {h}'s output from w_v")
    # W_O per head: the heads' outputs through their slices, plus the bias, are the output projection's output.
    outs = [m.captured(TEXT, layer, h) for h in range(Hn)]  # H x (T, dh)
    ours = sum(o @ w.w_o[h] for h, o in enumerate(outs)) + (0.0 if w.b_o is None else w.b_o)  # (T, D)
    _close(ours, m.out_proj(layer)(torch.cat(outs, -1)[None])[0].detach(), "heads through w_o")


def check_census(m: Loaded) -> None:
    config = mha_viz.CensusConfig(n_random=2, random_length=10, n_repeated=2, repeated_lengths=(4, 6),
                                  n_templates=4, n_loss=2, n_other_sets=1, n_boot=10)
    census = mha_viz.head_census(m.model, config=config)
    assert census is not None


def check_generate(m: Loaded) -> None:
    import pytest

    from mha_viz.contract import EncodedText, UnavailableError
    from mha_viz.contract.records import GenerationSettings

    model = m.model
    if model.info.kind != "causal-lm" and not model.has_cross_attention:  # an encoder: refused, nothing run
        with pytest.raises(UnavailableError, match="not a causal language model"):
            model.generate(TEXT, GenerationSettings(tokens=2))
        return
    cont = model.generate(TEXT, GenerationSettings(tokens=5), ablate={HEAD})
    base = model.encode_text(TEXT)
    final = EncodedText(text=base.text, model=base.model, encoded=dataclasses.replace(
        base.encoded, ids=list(cont.run.token_ids), labels=list(cont.run.tokens)))
    _close(cont.run.attentions, model.run(final, ablate={HEAD}).attentions, "step attention with a head off")
    ours = model.generate(TEXT, GenerationSettings(tokens=5)).written_ids
    ids = torch.tensor([base.ids])
    with torch.no_grad():
        theirs = m.ref.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False,
                                pad_token_id=0)[0, ids.shape[1]:].tolist()
    assert ours == theirs, f"greedy tokens {ours} differ from transformers' generate {theirs}"


def run_check(m: Loaded, check: str) -> None:
    if check == "generate":  # every row, encoder-decoder ones too: the model says whether it writes
        check_generate(m)
        return
    if m.arch.seq2seq:  # an encoder-decoder row: the same checks over a source and a target
        from tests.models.hf import matrix_seq2seq

        getattr(matrix_seq2seq, f"check_{check}")(m)
        return
    globals()[f"check_{check}"](m)


@contextlib.contextmanager
def offline():
    import os

    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved
