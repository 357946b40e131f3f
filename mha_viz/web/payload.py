"""The layer grid's data, as both hosts send it to the same browser code (mha_viz/web/grid/): the Streamlit
component (app/components/head_grid.py) and the notebook widget (notebook/widget.py). No streamlit, no Jupyter
here: tensors and tokens in, plain Python values and bytes out.

Every layer's attention goes to the page as one byte per cell, deflated layer by layer; the browser inflates it
natively (DecompressionStream) and draws the heads, the layer tabs, the hovered row and the enlarged head itself.
Each layer is named by a digest of its codes and scales (`digests`), so a host sends only the layers the page does
not hold: after a head is switched off in layer l, the layers below l have the same digests and stay in the page.
"""
from __future__ import annotations

import hashlib
import secrets
import zlib

import numpy as np
import torch

from mha_viz.contract import Head
from mha_viz.names import grid_names
from mha_viz.web.palette import grid_colours

# zlib level 1: at 128 tokens MiniLM's 1.18 MB of codes become 0.43 MB in 11 ms (level 6: 0.37 MB in 56 ms), and
# the browser inflates them natively (DecompressionStream). Measured in benchmarks/RESULTS.md.
DEFLATE_LEVEL = 1
LINES_UP_TO = 40  # tokens: up to this many, the grid can also draw a layer as lines (BertViz's head view)


def encode(att: torch.Tensor, shared_scale: bool) -> tuple[bytes, list[float]]:
    """(L, H, Q, K) weights -> one byte per cell and each head's scale: weight = code / 255 * scale[l * H + h].
    Q and K differ for cross-attention (target positions reading source positions).

    Each head is scaled to its own maximum unless `shared_scale` (then every head is on 0-1), so a faint head
    keeps all 256 levels. A quarter of float32's bytes; the browser needs nothing finer for 9 colour stops."""
    a = att.detach().float().cpu() if isinstance(att, torch.Tensor) else torch.from_numpy(np.asarray(att, np.float32))
    if a.ndim != 4:
        raise ValueError(f"the head grid wants (layer, head, query, key) attention; got shape {tuple(a.shape)}")
    L, H = a.shape[:2]
    if shared_scale:
        scale = torch.ones(L, H)  # (L, H)
    else:
        scale = a.reshape(L, H, -1).amax(dim=2).clamp_min(1e-6)  # (L, H)
    # In torch, in place: SmolLM2's 4.4 M cells at 128 tokens in 18 ms (numpy's rint/clip: 67 ms), the same codes
    # (both round half to even).
    codes = (a / scale[:, :, None, None]).clamp_(0.0, 1.0).mul_(255).round_().to(torch.uint8)  # (L, H, Q, K)
    return codes.numpy().tobytes(), [float(x) for x in scale.reshape(-1)]


def deflate(codes: bytes) -> bytes:
    return zlib.compress(codes, DEFLATE_LEVEL)


def layer_codes(codes: bytes, data: dict, layer: int) -> bytes:
    """Layer `layer`'s (H, Q, T) codes out of all of them, (L, H, Q, T); Q is T but for cross-attention."""
    size = data["H"] * data.get("Q", data["T"]) * data["T"]
    return codes[layer * size:(layer + 1) * size]


def layer_digests(codes: bytes, scale: list[float], L: int, H: int, T: int, Q: int | None = None) -> list[str]:
    """One name per layer for what the browser draws it from, its codes and its heads' scales: equal digests,
    equal pictures, whichever run or sentence they came from. Q: the query rows, where they are not the T keys."""
    Q = T if Q is None else Q
    size = H * Q * T
    scales = np.asarray(scale, np.float32).reshape(L, H)
    shape = f"{H},{T}" if Q == T else f"{H},{Q},{T}"
    return [hashlib.blake2b(codes[l * size:(l + 1) * size] + scales[l].tobytes() + shape.encode(),
                            digest_size=12).hexdigest() for l in range(L)]


def layer_part(weights: torch.Tensor, shared_scale: bool) -> tuple[bytes, list[float], str]:
    """One layer's (H, Q, K) weights -> its codes, its heads' scales and its digest: the layer's share of
    `encode` and `layer_digests` over every layer (each head is scaled on its own), so a host can make them
    layer by layer, as a forward computes each layer."""
    H, Q, T = (int(n) for n in weights.shape)
    codes, scale = encode(weights[None], shared_scale)  # of (1, H, Q, K)
    return codes, scale, layer_digests(codes, scale, 1, H, T, Q)[0]


def grid_data(tokens: list[str], att: torch.Tensor, layer: int, heads_off, n_cols: int, shared_scale: bool,
              badges: dict[Head, str], unknown=(), query_tokens: list[str] | None = None,
              parts: list[tuple[bytes, list[float], str]] | None = None) -> tuple[dict, bytes]:
    """Everything the browser draws from (see the header of web/grid/main.js) but the weights, and the weights'
    codes (not yet deflated), for the host to send its own way: -> (data without "att", codes).

    query_tokens: the rows' labels where the queries are other tokens than the keys (cross-attention: the target's
    tokens reading the source's `tokens`); the data then carries "Q" and "qtokens".
    parts: `layer_part(att[l], shared_scale)` of every layer, where they were made already (the same codes,
    scales and digests as made here from `att`)."""
    L, H, Q, T = int(att.shape[0]), int(att.shape[1]), int(att.shape[-2]), int(att.shape[-1])
    if parts is not None and len(parts) == L:
        codes = b"".join(c for c, _, _ in parts)
        scale = [x for _, sc, _ in parts for x in sc]
    else:
        parts = None
        codes, scale = encode(att, shared_scale)
    data = _described(tokens, (L, H, Q, T), shared_scale, query_tokens)
    digests = [d for _, _, d in parts] if parts is not None else layer_digests(codes, scale, L, H, T, Q)
    digest = hashlib.blake2b((data["text"] + "".join(digests)).encode(), digest_size=12).hexdigest()
    data.update(digest=digest, digests=digests, scale=scale, **shown_fields(layer, heads_off, n_cols, badges, unknown))
    return data, codes


def early_data(tokens: list[str], shape: tuple[int, int, int, int], parts: dict[int, tuple[bytes, list[float], str]],
               layer: int, heads_off, n_cols: int, shared_scale: bool, badges: dict[Head, str], unknown=(),
               query_tokens: list[str] | None = None) -> dict:
    """`grid_data`'s data for a run still computing the layers above the ones in `parts` ({layer: `layer_part`}),
    so a host can send the layer on screen before the forward ends: the layers not yet known have None for their
    digest and 0 for their heads' scales, and the run a provisional digest ("early-..."), which the host's second
    message completes with the run's own (web/grid/layers.js, `completed`)."""
    L, H, Q, T = shape
    data = _described(tokens, shape, shared_scale, query_tokens)
    data.update(digest="early-" + secrets.token_hex(12),
                digests=[parts[l][2] if l in parts else None for l in range(L)],
                scale=[x for l in range(L) for x in (parts[l][1] if l in parts else [0.0] * H)],
                **shown_fields(layer, heads_off, n_cols, badges, unknown))
    return data


def _described(tokens: list[str], shape: tuple[int, int, int, int], shared_scale: bool,
               query_tokens: list[str] | None) -> dict:
    """What the data says of the tokens, the shape and the drawing, whatever the weights."""
    L, H, Q, T = shape
    if len(tokens) != T:
        raise ValueError(f"{len(tokens)} token labels for attention over {T} positions")
    rows = list(tokens) if query_tokens is None else list(query_tokens)
    if len(rows) != Q:
        raise ValueError(f"{len(rows)} query labels for attention with {Q} query rows")
    dims = f"|{L},{H},{T}" if query_tokens is None else f"|{L},{H},{Q},{T}|" + "\x00".join(rows)
    text = hashlib.blake2b("\x00".join(tokens).encode() + dims.encode(), digest_size=12).hexdigest()
    data = {"text": text, "tokens": list(tokens), "L": L, "H": H, "T": T, "shared": bool(shared_scale),
            "names": grid_names(L, H), "colours": grid_colours(), "lines_up_to": LINES_UP_TO}
    if query_tokens is not None:
        data.update(Q=Q, qtokens=rows)
    return data


def written_steps(n_prompt: int, written: list[str], top: list[list[tuple[str, float]]], chosen: list[float],
                  lit: int | None) -> dict:
    """A continuation's steps as the grid shows them (web/grid/written.js), the data's optional "steps": the token
    written at step k (0-based) is at position n_prompt + k, chosen reading row n_prompt + k - 1, which is lit in
    every head of the layer while step `lit` is on screen (None: none) and while its token is hovered, with
    `chosen[k]`, the token's probability, and `top[k]`, that step's most likely tokens [(label, probability)]."""
    if not len(written) == len(top) == len(chosen):
        raise ValueError(f"{len(written)} written tokens, {len(top)} top lists, {len(chosen)} probabilities")
    if lit is not None and not 0 <= lit < len(written):
        raise ValueError(f"step {lit} lit of {len(written)} written tokens")
    return {"from": int(n_prompt), "lit": None if lit is None else int(lit), "tokens": list(written),
            "chosen": [round(float(p), 4) for p in chosen],
            "top": [[[str(t), round(float(p), 4)] for t, p in row] for row in top]}


def shown_fields(layer: int, heads_off, n_cols: int, badges: dict[Head, str], unknown) -> dict:
    """What the data says of how the run is shown: the layer on screen, the heads off, the columns, the captions
    and the unknown positions."""
    return {"off": sorted([int(l), int(h)] for l, h in heads_off), "layer": int(layer), "cols": int(n_cols),
            "badges": {f"{l},{h}": text for (l, h), text in badges.items()},
            "unknown": sorted(int(i) for i in unknown)}
