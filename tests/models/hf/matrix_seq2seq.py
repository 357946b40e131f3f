"""The architecture matrix's checks for its encoder-decoder rows (T5, BART, Marian), each against transformers
itself: the model reads matrix.TEXT as its source and matrix.SOURCE as its target (teacher-forced), and edits are
made on the reference by a forward pre-hook on the output projection of the head's kind (encoder self-attention,
decoder self-attention, cross-attention), as matrix.py does for one stack. Checks that do not hold for two texts
raise the model's own UnavailableError (expected.py says so, and docs/models.md's table)."""
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


# Rows of the batched check: a head of each kind, as `run` names it (ablate, or ablate_cross for cross-attention).
def _row_heads(model) -> list[tuple[int, dict, dict]]:
    """(projection index in `_modules()` order, head), `run`'s zero-ablation and patching arguments, per row."""
    n_enc, n_dec = model.info.n_layers, model.decoder_layers()
    (el, eh), (cl, ch) = SELF_HEAD, CROSS_HEAD
    return [((el, eh), {"ablate": {SELF_HEAD}}, {"patch": {SELF_HEAD}}),
            ((n_enc + 1, 3), {"ablate": {(n_enc + 1, 3)}}, {"patch": {(n_enc + 1, 3)}}),
            ((n_enc + n_dec + cl, ch), {"ablate_cross": {CROSS_HEAD}}, {"patch_cross": {CROSS_HEAD}})]


def check_batched(m: Loaded) -> None:
    """Rows switching off an encoder, a decoder and a cross-attention head in one forward, zeroed and patched from
    matrix.SOURCE (the second source, of the same token count), each equal to `run` with that head alone."""
    model = m.model
    rows = _row_heads(model)
    keep = torch.ones(len(rows), model.keep_layers, model.n_heads)  # (B, M, H)
    for row, ((index, head), _, _) in enumerate(rows):
        keep[row, index, head] = 0.0
    _, zeroed = model.run_batch_keep(matrix.TEXT, keep, target=TARGET)  # (B, T, V)
    second = [o[None] for o in model.head_outputs_all(matrix.SOURCE, TARGET)]  # each (1, H, P, dh)
    _, patched = model.run_batch_keep(matrix.TEXT, keep, second, target=TARGET)  # (B, T, V)
    for row, (where, off, patch) in enumerate(rows):
        matrix._close(zeroed[row], model.run(matrix.TEXT, target=TARGET, **off).logits, f"batched zero row {where}")
        ours = model.run(matrix.TEXT, target=TARGET, source=matrix.SOURCE, **patch).logits
        matrix._close(patched[row], ours, f"batched patch row {where}")


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


KINDS = {"encoder": "Encoder", "decoder": "Decoder", "cross": "Cross"}  # matrix name -> the model's kind


def _sublayer(m: Loaded, kind: str, layer: int) -> tuple[torch.nn.Module, list[torch.nn.Module]]:
    """(the attention module, its q, k, v and output projections) of (kind, layer) in transformers' model."""
    stack = m.ref.get_encoder() if kind == "encoder" else m.ref.get_decoder()
    if hasattr(stack, "block"):  # T5
        block = stack.block[layer].layer
        attn = block[1].EncDecAttention if kind == "cross" else block[0].SelfAttention
        return attn, [attn.q, attn.k, attn.v, attn.o]
    one = stack.layers[layer]
    attn = one.encoder_attn if kind == "cross" else one.self_attn
    return attn, [attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj]


def _position_bias(m: Loaded, kind: str, n_q: int, n_k: int) -> torch.Tensor | float:
    """T5's relative position bias (H, Q, K) from its stack's first layer (transformers' compute_bias); 0 else."""
    if kind == "cross":
        return 0.0
    first, _ = _sublayer(m, kind, 0)
    if not getattr(first, "has_relative_attention_bias", False):
        return 0.0
    with torch.no_grad():
        return first.compute_bias(n_q, n_k)[0].float()  # (H, Q, K)


def check_circuits(m: Loaded) -> None:
    """Every kind's circuits (Cross: Q-composition only, with the reason), and layer 1's weights per head of each
    kind against transformers' forward: W_Q and W_K give its attention weights (softmax of q·kᵀ times the module's
    scale, plus T5's relative bias and the decoder's causal mask), W_V gives each head's output at the output
    projection's input, and the heads through W_O plus b_O give the projection's output."""
    model = m.model
    run = model.run(matrix.TEXT, target=TARGET)
    Hn = model.n_heads
    maps = {"encoder": run.attentions, "decoder": run.decoder_attentions, "cross": run.cross_attentions}
    for kind, name in KINDS.items():
        c = mha_viz.circuits(model, kind=name)
        L = model.info.n_layers if kind == "encoder" else model.decoder_layers()
        assert (c.kind, c.n_layers, c.n_heads) == (name, L, Hn), (c.kind, c.n_layers, c.n_heads)
        assert set(c.composition) == ({"q"} if kind == "cross" else {"q", "k", "v"}), set(c.composition)
        assert (c.composition_note != "") == (kind == "cross")
        later = torch.ones(L, L, dtype=torch.bool).triu(1)[:, None, :, None].expand(L, Hn, L, Hn)  # l1 < l2
        for mode, scores in c.composition.items():
            assert scores.shape == (L, Hn, L, Hn) and torch.isfinite(scores[later]).all(), (kind, mode)
        assert torch.isfinite(c.qk_singular).all() and torch.isfinite(c.ov_singular).all()
        assert c.copying is None or (c.copying.shape == (L, Hn) and torch.isfinite(c.copying).all())
        layer = 1
        w = model.head_weights(layer, kind=name)
        attn, (q, k, v, o) = _sublayer(m, kind, layer)
        seen = {}
        hooks = [mod.register_forward_pre_hook(lambda mod, args, _n=n: seen.__setitem__(_n, args[0][0].float()))
                 for n, mod in (("q", q), ("k", k), ("v", v), ("o", o))]
        hooks.append(o.register_forward_hook(lambda mod, args, out: seen.__setitem__("out", out[0].float())))
        try:
            out = m.ref_run(run.token_ids, run.target_ids)
        finally:
            for hook in hooks:
                hook.remove()
        weights = maps[kind][layer]  # (H, Q, K), equal to transformers' (check_attention)
        matrix._close(weights, getattr(out, f"{kind}_attentions")[layer][0], f"{kind} attention")
        per_head = lambda x, wh, b, h: x @ wh[h] + (0.0 if b is None else b[h])  # noqa: E731  (P, dh)
        qs = torch.stack([per_head(seen["q"], w.w_q, w.b_q, h) for h in range(Hn)])  # (H, Q, dh)
        ks = torch.stack([per_head(seen["k"], w.w_k, w.b_k, h) for h in range(Hn)])  # (H, K, dh)
        scores = qs @ ks.transpose(-2, -1) * float(attn.scaling)  # (H, Q, K)
        scores = scores + _position_bias(m, kind, *scores.shape[-2:])
        if kind == "decoder":
            n = scores.shape[-1]
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))  # (H, T, T)
        matrix._close(scores.softmax(-1), weights, f"{kind} weights from w_q and w_k")
        dh = model.dh
        z = seen["o"].view(-1, Hn, dh).transpose(0, 1)  # (H, Q, dh): each head's output in transformers
        for h in range(Hn):
            matrix._close(weights[h] @ per_head(seen["v"], w.w_v, w.b_v, h), z[h], f"{kind} head {h}'s output from w_v")
        ours = sum(z[h] @ w.w_o[h] for h in range(Hn)) + (0.0 if w.b_o is None else w.b_o)  # (Q, D)
        matrix._close(ours, seen["out"], f"{kind} heads through w_o")


def check_census(m: Loaded) -> None:
    matrix.check_census(m)  # the encoder's heads, the census's inputs read as sources
