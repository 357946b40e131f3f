"""The architecture matrix's checks for its encoder-decoder rows (T5, BART, Marian), each against transformers
itself: the model reads matrix.TEXT as its source and matrix.SOURCE as its target (teacher-forced), and edits are
made on the reference by a forward pre-hook on the output projection of the head's kind (encoder self-attention,
decoder self-attention, cross-attention), as matrix.py does for one stack. Checks that do not hold for two texts
raise the model's own UnavailableError (expected.py says so, and the README's table)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

import mha_viz
from tests.models.hf import matrix

TARGET = matrix.SOURCE  # the decoder's text
CROSS_HEAD = (1, 2)  # decoder layer 1's cross-attention head 2: the head the edits switch off
SELF_HEAD = (0, 1)  # an encoder self-attention head, switched off beside it


@dataclass
class Loaded:
    arch: object
    folder: Path
    model: object  # the mha-viz model
    ref: torch.nn.Module  # the same folder in transformers, eager attention

    def projection(self, kind: str, layer: int) -> torch.nn.Module:
        """Layer `layer`'s output projection of `kind` ("encoder", "decoder", "cross") in transformers' model."""
        stack = self.ref.get_encoder() if kind == "encoder" else self.ref.get_decoder()
        if hasattr(stack, "block"):  # T5
            block = stack.block[layer].layer
            return block[1].EncDecAttention.o if kind == "cross" else block[0].SelfAttention.o
        one = stack.layers[layer]
        return one.encoder_attn.out_proj if kind == "cross" else one.self_attn.out_proj

    def ref_run(self, source_ids: list[int], target_ids: list[int], replace: dict | None = None):
        """transformers' forward, head h of (kind, layer)'s slice of its projection's input replaced by
        `replace[(kind, layer, h)]` ((T, dh) or (dh,))."""
        dh = self.model.dh
        handles = []
        for (kind, layer, head), value in (replace or {}).items():
            def pre(module, args, _head=head, _value=value):
                x = args[0].clone()  # (1, T, H * dh)
                x[..., _head * dh:(_head + 1) * dh] = _value
                return (x, *args[1:])
            handles.append(self.projection(kind, layer).register_forward_pre_hook(pre))
        try:
            with torch.no_grad():
                return self.ref(input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([target_ids]),
                                output_attentions=True, use_cache=False)
        finally:
            for h in handles:
                h.remove()

    def captured(self, source_ids: list[int], target_ids: list[int], kind: str, layer: int, head: int):
        """Head `head` of (kind, layer)'s output in transformers' forward -> (P, dh)."""
        seen = []
        hook = self.projection(kind, layer).register_forward_pre_hook(lambda m, args: seen.append(args[0][0]))
        try:
            self.ref_run(source_ids, target_ids)
        finally:
            hook.remove()
        dh = self.model.dh
        return seen[0][:, head * dh:(head + 1) * dh].clone()  # (P, dh)


def load(arch, folder: Path) -> Loaded:
    import transformers

    model = mha_viz.load_model(str(folder))
    ref = getattr(transformers, arch.model).from_pretrained(folder, attn_implementation="eager").eval()
    return Loaded(arch, folder, model, ref)


def _ids(m: Loaded, source: str, target: str | None) -> tuple[list[int], list[int]]:
    run = m.model.run(source, target=target)
    return run.token_ids, run.target_ids


def check_attention(m: Loaded) -> None:
    run = m.model.run(matrix.TEXT, target=TARGET)
    out = m.ref_run(run.token_ids, run.target_ids)
    stack = lambda maps: torch.stack(maps)[:, 0]  # noqa: E731  (L, H, Q, K)
    matrix._close(run.attentions, stack(out.encoder_attentions), "encoder attention")
    matrix._close(run.decoder_attentions, stack(out.decoder_attentions), "decoder attention")
    matrix._close(run.cross_attentions, stack(out.cross_attentions), "cross attention")


def check_output(m: Loaded) -> None:
    run = m.model.run(matrix.TEXT, target=TARGET)
    matrix._close(run.logits, m.ref_run(run.token_ids, run.target_ids).logits[0], "logits")


def check_zero(m: Loaded) -> None:
    n_enc = m.model.info.n_layers
    run = m.model.run(matrix.TEXT, target=TARGET, ablate={SELF_HEAD, (n_enc + 1, 3)}, ablate_cross={CROSS_HEAD})
    replace = {("encoder", *SELF_HEAD): 0.0, ("decoder", 1, 3): 0.0, ("cross", *CROSS_HEAD): 0.0}
    matrix._close(run.logits, m.ref_run(run.token_ids, run.target_ids, replace).logits[0], "zero-ablated logits")


def check_mean(m: Loaded) -> None:
    # The mean over every position of each reference source's run on its own greedy continuation (seq2seq.py).
    outs = [m.captured(*_ids(m, text, None), "cross", *CROSS_HEAD) for text in (matrix.OTHER, matrix.SOURCE)]
    mean = torch.cat(outs).mean(0)  # (dh,)
    run = m.model.run(matrix.TEXT, target=TARGET, ablate_cross={CROSS_HEAD}, ablation="mean",
                      reference=[matrix.OTHER, matrix.SOURCE])
    theirs = m.ref_run(run.token_ids, run.target_ids, {("cross", *CROSS_HEAD): mean}).logits[0]
    matrix._close(run.logits, theirs, "mean-ablated logits")


def check_resample(m: Loaded) -> None:
    other = m.captured(*_ids(m, matrix.OTHER, None), "cross", *CROSS_HEAD)  # (P, dh)
    run = m.model.run(matrix.TEXT, target=TARGET, ablate_cross={CROSS_HEAD}, ablation="resample",
                      reference=[matrix.OTHER])
    lined = other[torch.arange(len(run.target_ids)).clamp_max(other.shape[0] - 1)]  # (T, dh), as line_up reads it
    theirs = m.ref_run(run.token_ids, run.target_ids, {("cross", *CROSS_HEAD): lined}).logits[0]
    matrix._close(run.logits, theirs, "resample-ablated logits")


def check_patch(m: Loaded) -> None:
    # An encoder, a decoder and a cross-attention head take their output from a second source of the same token
    # count (matrix.SOURCE, also the target here), read on the same target.
    model, n_enc = m.model, m.model.info.n_layers
    assert model.token_count(matrix.TEXT) == model.token_count(matrix.SOURCE), "the sources need one token count"
    run = model.run(matrix.TEXT, target=TARGET, patch={SELF_HEAD, (n_enc + 1, 3)}, patch_cross={CROSS_HEAD},
                    source=matrix.SOURCE)
    second = model.run(matrix.SOURCE, target=TARGET).token_ids
    replace = {key: m.captured(second, run.target_ids, *key)
               for key in (("encoder", *SELF_HEAD), ("decoder", 1, 3), ("cross", *CROSS_HEAD))}
    matrix._close(run.logits, m.ref_run(run.token_ids, run.target_ids, replace).logits[0], "patched logits")


def check_batched(m: Loaded) -> None:
    keep = torch.ones(1, m.model.n_layers, m.model.n_heads)  # (B, L, H)
    m.model.run_batch_keep(matrix.TEXT, keep)


def check_inside(m: Loaded) -> None:
    """Layer 1 of every kind opened up: its weights are transformers' own, weights @ v is each head's slice of the
    output projection's input, and the heads' contributions plus the bias are the projection's output."""
    run = m.model.run(matrix.TEXT, target=TARGET)
    H, dh = m.model.n_heads, m.model.dh
    for kind, name, maps in (("encoder", "Encoder", "encoder_attentions"),
                             ("decoder", "Decoder", "decoder_attentions"), ("cross", "Cross", "cross_attentions")):
        heads = m.model.inside_layer(matrix.TEXT, 1, kind=name, target=TARGET)
        seen = {}
        hooks = [m.projection(kind, 1).register_forward_pre_hook(lambda mod, a: seen.__setitem__("in", a[0][0])),
                 m.projection(kind, 1).register_forward_hook(lambda mod, a, o: seen.__setitem__("out", o[0]))]
        try:
            out = m.ref_run(run.token_ids, run.target_ids)
        finally:
            for hook in hooks:
                hook.remove()
        matrix._close(torch.stack([h.weights for h in heads]), getattr(out, maps)[1][0], f"{kind} weights")
        z = seen["in"].view(-1, H, dh).transpose(0, 1)  # (H, Q, dh): each head's output in transformers
        matrix._close(torch.stack([h.weights @ h.v for h in heads]), z, f"{kind} weights @ v")
        total = sum(h.contribution for h in heads) + (0.0 if heads[0].bias is None else heads[0].bias)  # (Q, D)
        matrix._close(total, seen["out"], f"{kind} contributions + bias")


def check_circuits(m: Loaded) -> None:
    mha_viz.circuits(m.model)


def check_census(m: Loaded) -> None:
    matrix.check_census(m)  # the encoder's heads, the census's inputs read as sources
