"""What the engine reads out of one forward besides the run: every head of a layer opened up (`inside_layer`), the
value vectors and output projections the norm view needs (`norm_inputs`), the parts for direct effects on the
logits (`readout`), and a layer's projections split per head (`head_weights_from`).

`Inspection` is a part of `EditableModel` (models/interventions.py), as `Batching` is; it relies on the adapter's
`forward` and `output_projection`, and on the engine's `_edit_for`, `_ids` and `encode_text`.
Axis letters as in mha_viz.contract; dh = one head's width.
"""
from __future__ import annotations

from typing import Iterable

import torch

from mha_viz.contract import (
    EncodedText,
    Head,
    HeadInside,
    Readout,
    UnavailableError,
    check_index,
    head_keep_mask,
)
from mha_viz.contract.head_slices import out_proj_per_head, repeat_kv
from mha_viz.models.points import HeadEdit
from mha_viz.models.schedule import Stopped


class Inspection:
    """`inside_layer`, `norm_inputs`, `readout` and `head_weights_from` (see the module docstring)."""

    def _w_o(self, layer: int) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        proj = self.output_projection(layer)
        if proj is None:
            return None
        weight, bias = proj
        return out_proj_per_head(weight, self.n_heads), bias  # (H, dh, D), (D,) or None

    def inside_layer(self, text: str | EncodedText, layer: int, ablate: Iterable[Head] = (),
                     ablation: str = "zero", reference: Iterable[str] | None = None) -> list[HeadInside]:
        """Every head of `layer` opened up (see `HeadInside`) from one forward with `ablate` applied as `run`
        applies it. q, k, v, the mask, the weights and any bias added to the scores (ALiBi) are what the layer's
        attention computed with (reported to the edit by the adapter); the scores are recomputed from them and
        checked against those weights."""
        layer = check_index(layer, self.n_layers, "layer")
        proj = self._w_o(layer)
        if proj is None:
            raise UnavailableError(
                f"{self.info.title}: the linear map that combines the heads of layer {layer} was not found (looked "
                "for o_proj, out_proj, dense, c_proj and a BERT-style output.dense), so a head's contribution "
                "cannot be computed for this architecture."
            )
        enc, ids, edit, ablate, _, _ = self._edit_for(text, ablate, ablation, reference, capture=True,
                                                      inspect={layer}, inputs=True, stop_after=layer)
        with torch.no_grad():
            try:
                self.forward(ids, edit)
            except Stopped:  # the layers after this one change nothing it shows
                pass
        seen = edit.seen.get(layer)
        if seen is None or layer not in edit.inputs:
            raise UnavailableError(f"{self.info.title}: layer {layer}'s attention did not report its queries and "
                                   "keys, so they cannot be shown.")
        q = seen.q[0].float().cpu()  # (H, T, dh)
        k_kv, v_kv = seen.k[0].float().cpu(), seen.v[0].float().cpu()  # (H_kv, T, dh) each
        weights = seen.weights[0].float().cpu()  # (H, Q, K)
        H, T, dh = q.shape
        group = H // k_kv.shape[0]  # query heads per key/value head; 1 without grouped-query attention
        k, v = repeat_kv(k_kv, H), repeat_kv(v_kv, H)  # (H, K, dh), (H, K, dh)
        scores = q @ k.transpose(-2, -1) * seen.scale  # (H, Q, K)
        query_scale = None if seen.query_scale is None else seen.query_scale.float().cpu()  # (Q,) or None
        if query_scale is not None:
            scores = scores * query_scale[:, None]  # (H, Q, K)
        position_bias = None
        if seen.score_bias is not None:  # ALiBi: the model's own bias, added as the model adds it
            position_bias = seen.score_bias[0].float().cpu().expand(H, T, k.shape[1]).clone()  # (H, Q, K)
            scores = scores + position_bias  # (H, Q, K)
        if seen.allowed is not None:
            scores = scores.masked_fill(~seen.allowed.cpu(), float("-inf"))  # (H, Q, K)
        gap = float((torch.softmax(scores, dim=-1) - weights).abs().max())
        if gap > 1e-4:
            raise UnavailableError(
                f"{self.info.title}: softmax(q·kᵀ·scale) differs from this model's attention weights by {gap:.2g}: "
                "its attention changes the scores in a way it does not report (e.g. soft-capping), so showing "
                "these scores would be wrong."
            )
        w_o, bias = proj  # (H, dh, D), (D,) or None
        ctx = edit.outputs[layer][0].float().cpu()  # (H, T, dh): what the output projection saw, after the edit
        contribution = ctx @ w_o  # (H, T, D)
        resid = edit.inputs[layer][0].float().cpu()  # (T, D)
        return [
            HeadInside(tokens=enc.labels, layer=layer, head=h, q=q[h], k=k[h], v=v[h], scores=scores[h],
                       weights=weights[h], contribution=contribution[h], scale=seen.scale,
                       query_scale=query_scale, bias=bias, resid=resid,
                       kv_head=h // group, ablated=(layer, h) in ablate,
                       position_bias=None if position_bias is None else position_bias[h])
            for h in range(H)
        ]

    def norm_inputs(self, text: str | EncodedText, ablate: Iterable[Head] = (), ablation: str = "zero",
                    reference: Iterable[str] | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(values (L, H, K, dh), w_o (L, H, dh, D)) for the norm view (Kobayashi et al. 2020), from the same run
        (same heads off, same meaning of "off") as the weights it is drawn with. A switched-off head's values are
        zero: what it adds (0, its mean, another text's output) does not come from the keys. Key/value heads shared
        by grouped-query attention are repeated per query head."""
        w_o = [self._w_o(layer) for layer in range(self.n_layers)]
        if any(w is None for w in w_o):
            return None
        _, ids, edit, ablate, _, _ = self._edit_for(text, ablate, ablation, reference, values=True)
        with torch.no_grad():
            self.forward(ids, edit)
        values = torch.stack([repeat_kv(edit.values[layer][0].float().cpu(), self.n_heads)
                              for layer in range(self.n_layers)])  # (L, H, K, dh)
        keep = head_keep_mask(ablate, self.n_layers, self.n_heads)  # (L, H)
        values = values * keep[:, :, None, None]  # (L, H, K, dh): a switched-off head's keys carry nothing
        return values, torch.stack([w for w, _ in w_o])  # (L, H, K, dh), (L, H, dh, D)

    def readout(self, text: str | EncodedText) -> Readout | None:
        """The run on `text` (all heads on) as parts for direct effects (see `Readout`). None when this model has
        no LM head, no recognised final norm or output projection, or when the frozen-scale norm does not
        reproduce the model's own output (e.g. logits soft-capped), so no number shown rests on a guess."""
        parts = self.final_parts()
        w_o = [self._w_o(layer) for layer in range(self.n_layers)]
        if parts is None or any(w is None for w in w_o):
            return None
        _, ids = self._ids(self.encode_text(text))
        edit = HeadEdit(capture=True, final=True)
        with torch.no_grad():
            out = self.forward(ids, edit)
        if edit.final_io is None or out.logits is None:
            return None
        # A model kept in bfloat16 or float16 (MHA_VIZ_DTYPE) rounds its own norm output and logits to that dtype:
        # the checks below allow its rounding (a few units of its eps) instead of float32's.
        rounding = max(1.0, 4 * torch.finfo(edit.final_io[1].dtype).eps / 1e-3)
        residual, normed = (t[0].detach().float().cpu() for t in edit.final_io)  # (T, D), (T, D)
        gain, bias = parts.gain, parts.bias  # (D,), (D,) or None
        centred = residual - residual.mean(-1, keepdim=True) if parts.centered else residual  # (T, D)
        # The scale the norm divided by, read off its own input and output, so any epsilon convention is honoured.
        shifted = normed - (0 if bias is None else bias)  # (T, D)
        scale = (gain * centred).norm(dim=-1) / shifted.norm(dim=-1).clamp_min(1e-12)  # (T,)
        rebuilt = gain * centred / scale[:, None] + (0 if bias is None else bias)  # (T, D)
        if not torch.allclose(rebuilt, normed, atol=1e-4 * rounding * float(normed.abs().max()) + 1e-6):
            return None
        logits = out.logits[0].float().cpu()  # (T, V)
        again = normed @ parts.unembed.T + (0 if parts.unembed_bias is None else parts.unembed_bias)  # (T, V)
        if not torch.allclose(again, logits, atol=1e-3 * rounding * float(logits.abs().max()) + 1e-5):
            return None
        return Readout(outputs=edit.stacked(), w_o=torch.stack([w for w, _ in w_o]), residual=residual, scale=scale,
                       centered=parts.centered, gain=gain, bias=bias, unembed=parts.unembed,
                       unembed_bias=parts.unembed_bias, logits=logits)  # w_o (L, H, dh, D)

    def head_weights_from(self, layer: int, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                          b_q, b_k, b_v, rotary: bool):
        """A `HeadWeights` from nn.Linear-layout projections: w_q (H * dh, D), w_k and w_v (H_kv * dh, D), their
        biases (H * dh,) / (H_kv * dh,) or None; the output projection from `output_projection`."""
        from mha_viz.contract import HeadWeights

        layer = check_index(layer, self.n_layers, "layer")
        proj = self._w_o(layer)
        if proj is None:
            raise UnavailableError(f"{self.info.title}: layer {layer}'s output projection was not found.")
        H = self.n_heads
        dh = w_q.shape[0] // H
        h_kv = w_k.shape[0] // dh
        group = H // h_kv
        kv_head = tuple(h // group for h in range(H))

        def per_head(w, n):  # (n * dh, D) -> (n, D, dh)
            return w.detach().float().cpu().reshape(n, dh, -1).transpose(1, 2).contiguous()

        def bias_per_head(b, n):  # (n * dh,) -> (n, dh)
            return None if b is None else b.detach().float().cpu().reshape(n, dh)

        idx = torch.tensor(kv_head)
        wk, wv = per_head(w_k, h_kv)[idx], per_head(w_v, h_kv)[idx]  # (H, D, dh) each
        bk, bv = bias_per_head(b_k, h_kv), bias_per_head(b_v, h_kv)
        return HeadWeights(layer=layer, w_q=per_head(w_q, H), w_k=wk, w_v=wv, w_o=proj[0],
                           b_q=bias_per_head(b_q, H), b_k=None if bk is None else bk[idx],
                           b_v=None if bv is None else bv[idx], b_o=proj[1], kv_head=kv_head, rotary=rotary)
