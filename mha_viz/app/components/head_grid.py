"""The layer grid as a browser component: the run's attention for ALL layers goes to the page once, as one byte
per cell, deflated, in one Arrow binary cell (raw bytes on the websocket: no base64, no JSON string to parse),
and the browser draws the heads, switches layers, lights a hovered token's row in every head and opens a
head large (every token labelled, zoom and pan) without a server round trip. A head switched on or off comes back
as a `toggle` trigger, because that needs the model.

Measured against the plotly row figures it replaces in benchmarks/RESULTS.md.
"""
from __future__ import annotations

import hashlib
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import streamlit as st
import torch

from mha_viz import plotting
from mha_viz.app.names import grid_names
from mha_viz.contract import Head

_HERE = Path(__file__).resolve().parent
# isolate_styles=False: no shadow root, so browser tests and benchmarks can query the grid's DOM; every class is
# prefixed `mhv-` instead.
_COMPONENT = st.components.v2.component(
    "mha_viz.head_grid", html="", css=(_HERE / "head_grid.css").read_text(), js=(_HERE / "head_grid.js").read_text(),
    isolate_styles=False,
)


def encode(att: torch.Tensor, shared_scale: bool) -> tuple[bytes, list[float]]:
    """(L, H, Q, K) weights -> one byte per cell and each head's scale: weight = code / 255 * scale[l * H + h].

    Each head is scaled to its own maximum unless `shared_scale` (then every head is on 0-1), so a faint head
    keeps all 256 levels. A quarter of float32's bytes; the browser needs nothing finer for 9 colour stops."""
    a = att.detach().float().cpu().numpy() if isinstance(att, torch.Tensor) else np.asarray(att, np.float32)
    if a.ndim != 4 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"the head grid wants (layer, head, query, key) attention; got shape {a.shape}")
    L, H = a.shape[:2]
    if shared_scale:
        scale = np.ones((L, H), np.float32)  # (L, H)
    else:
        scale = np.maximum(a.reshape(L, H, -1).max(axis=2), 1e-6)  # (L, H)
    codes = np.rint(np.clip(a / scale[:, :, None, None], 0.0, 1.0) * 255).astype(np.uint8)  # (L, H, Q, K)
    return codes.tobytes(), [float(x) for x in scale.reshape(-1)]


LINES_UP_TO = 40  # tokens: up to this many, the grid can also draw a layer as lines (BertViz's head view)

# zlib level 1: at 128 tokens MiniLM's 1.18 MB of codes become 0.43 MB in 11 ms (level 6: 0.37 MB in 56 ms), and
# the browser inflates them natively (DecompressionStream). Measured in benchmarks/RESULTS.md.
DEFLATE_LEVEL = 1


def pack(codes: bytes) -> pa.Table:
    """The codes deflated, as the one cell of an Arrow binary column "z": Streamlit sends a top-level Arrow table
    of a component's data as a binary blob beside the JSON, so the page receives the bytes themselves."""
    return pa.table({"z": pa.array([zlib.compress(codes, DEFLATE_LEVEL)], type=pa.binary())})


def unpack(table: pa.Table) -> bytes:
    """`pack` undone, as the browser does it (tests)."""
    return zlib.decompress(table.column("z")[0].as_py())


def payload(tokens: list[str], att: torch.Tensor, layer: int, heads_off, n_cols: int, shared_scale: bool,
            badges: dict[Head, str], unknown=()) -> dict:
    """Everything the browser draws from (see the header of head_grid.js): JSON, but for `att`, an Arrow table
    that travels as a binary blob. The head and layer names and the colour stops come from Python (names.py,
    plotting.ATTN_SCALE / OFF_SCALE), so the grid spells and colours a head as every other figure does."""
    codes, scale = encode(att, shared_scale)
    L, H, T = int(att.shape[0]), int(att.shape[1]), int(att.shape[-1])
    if len(tokens) != T:
        raise ValueError(f"{len(tokens)} token labels for attention over {T} positions")
    digest = hashlib.blake2b(codes + "\x00".join(tokens).encode(), digest_size=12).hexdigest()
    return {
        "digest": digest, "tokens": list(tokens), "L": L, "H": H, "T": T,
        "att": pack(codes), "scale": scale,
        "off": sorted([int(l), int(h)] for l, h in heads_off), "layer": int(layer), "cols": int(n_cols),
        "badges": {f"{l},{h}": text for (l, h), text in badges.items()}, "shared": bool(shared_scale),
        "names": grid_names(L, H), "unknown": sorted(int(i) for i in unknown),
        "colours": {"on": [c for _, c in plotting.ATTN_SCALE], "off": [c for _, c in plotting.OFF_SCALE],
                    "heads": list(plotting.HEAD_COLOURS), "head_off": plotting.OFF_COLOUR},
        "lines_up_to": LINES_UP_TO,
    }


def head_grid(data: dict, key: str, on_toggle: Callable[[int, int, bool], None],
              on_layer: Callable[[int], None] | None = None) -> None:
    """Mount the grid. `on_toggle(layer, head, on)` runs, before the rerun it causes, when a head's switch is
    clicked in the browser; `on_layer(layer)` when a layer tab is (the grid has drawn it already)."""

    def _toggled() -> None:
        event = (st.session_state.get(key) or {}).get("toggle")
        if isinstance(event, dict) and {"layer", "head", "on"} <= set(event):
            on_toggle(int(event["layer"]), int(event["head"]), bool(event["on"]))

    def _layer() -> None:
        event = (st.session_state.get(key) or {}).get("layer")
        if on_layer is not None and isinstance(event, int) and 0 <= event < data["L"]:
            on_layer(event)

    _COMPONENT(data=data, key=key, on_toggle_change=_toggled, on_layer_change=_layer)
