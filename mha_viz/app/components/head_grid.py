"""The layer grid as a browser component: the run's attention for ALL layers goes to the page once, as one byte
per cell, deflated, in one Arrow binary cell (raw bytes on the websocket: no base64, no JSON string to parse),
and the browser draws the heads, switches layers (with the layer's heading, bulk switches and link), lights a
hovered token's row in every head and opens a head large (every token labelled, zoom and pan) without a server
round trip. A head switched on or off, and a bulk switch, come back as triggers, because they need the model; a
layer tab comes back as one once the grid has drawn it, for what the page draws for that layer.

Measured against the plotly row figures it replaces in benchmarks/RESULTS.md.
"""
from __future__ import annotations

import threading
import zlib
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import pyarrow as pa
import streamlit as st
import torch

from mha_viz.app.components import figure_font
from mha_viz.contract import Head
from mha_viz.web import grid_css, grid_js
from mha_viz.web.payload import deflate, grid_data

BULK_ACTIONS = ("off", "on", "only", "reset")
JS = grid_js()  # the bundle of web/grid/'s modules, the one the notebook widget loads too
# isolate_styles=False: no shadow root, so browser tests and benchmarks can query the grid's DOM; every class is
# prefixed `mhv-` instead.
_COMPONENT = st.components.v2.component(
    "mha_viz.head_grid", html="", css=grid_css(), js=JS, isolate_styles=False,
)


def pack(codes: bytes, font: bytes | None = None) -> pa.Table:
    """The codes deflated, as the one cell of an Arrow binary column "z": Streamlit sends a top-level Arrow table
    of a component's data as a binary blob beside the JSON, so the page receives the bytes themselves. With `font`
    (the saved figures' WOFF, figure_font.py), a second binary column "font" in the same blob."""
    columns = {"z": pa.array([deflate(codes)], type=pa.binary())}
    table = pa.table(columns)
    if font is not None:
        table = table.append_column(_font_field(), pa.array([font], type=pa.binary()))
    return table


def unpack(table: pa.Table) -> bytes:
    """`pack` undone, as the browser does it (tests)."""
    return zlib.decompress(table.column("z")[0].as_py())


def payload(tokens: list[str], att: torch.Tensor, layer: int, heads_off, n_cols: int, shared_scale: bool,
            badges: dict[Head, str], unknown=(), controls: bool = False, encoded: Future | None = None) -> dict:
    """Everything the browser draws from (see the header of web/grid/main.js): JSON, but for `att`, an Arrow
    table that travels as a binary blob. Built by web/payload.py, which the notebook widget shares: the head and
    layer names and the colours come from Python (mha_viz/names.py, web/palette.py), so the grid spells and
    colours a head as every other figure does.

    controls: the page's grid draws the layer's heading and bulk switches itself and writes the link's layer (one
    layer state that a tab changes in the browser). The saved figures' font rides in the same blob (`font`).
    encoded: `encode_soon(tokens, att, shared_scale)`, started before the badges were measured."""
    data, table = encoded.result() if encoded is not None else _encoded(tokens, att, shared_scale)
    data = {**data, "layer": int(layer), "cols": int(n_cols), "off": sorted([int(l), int(h)] for l, h in heads_off),
            "badges": {f"{l},{h}": text for (l, h), text in badges.items()},
            "unknown": sorted(int(i) for i in unknown)}
    font = figure_font.font_for(tokens)
    if controls:
        data["controls"] = {"bulk": True, "link": True}
    if font is not None:
        table = table.append_column(_font_field(), pa.array([font], type=pa.binary()))
    return {**data, "att": table}


def _font_field() -> pa.Field:
    """The font's column, its family and licence in the field's metadata (the JSON stays the notebook's own)."""
    return pa.field("font", pa.binary(), metadata={"family": figure_font.FAMILY, "licence": figure_font.LICENCE})


# The codes of the last few runs' attention, deflated: a layer tab's or the heading's rerun sends the same run again
# (SmolLM2 at 128 tokens: 4.4 MB of codes, about 0.3 s to encode and deflate). Keyed by the tensor's identity (the
# page's runs are cached objects; the tensor is held here, so its id is not reused while the entry lives).
_ENCODED: OrderedDict = OrderedDict()
_ENCODED_MAX = 4
_ENCODED_LOCK = threading.Lock()


# Encoding and deflating release the GIL for most of their time (torch's kernels, zlib), as measuring the badges
# does: run beside each other they overlap on the second core (SmolLM2 at 128 tokens: about 45 ms of codes beside
# about 60 ms of badges). Two workers: two sessions' pages may encode at once.
_ENCODER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mha-viz-grid-codes")


def encode_soon(tokens: list[str], att: torch.Tensor, shared_scale: bool) -> Future:
    """`payload`'s codes for this run, started now on a worker thread; pass the result as payload(encoded=...)."""
    return _ENCODER.submit(_encoded, list(tokens), att, shared_scale)


def _encoded(tokens: list[str], att: torch.Tensor, shared_scale: bool) -> tuple[dict, pa.Table]:
    key = (id(att), tuple(tokens), bool(shared_scale))
    with _ENCODED_LOCK:
        hit = _ENCODED.get(key)
        if hit is not None and hit[0] is att:
            _ENCODED.move_to_end(key)
            return hit[1], hit[2]
    data, codes = grid_data(tokens, att, 0, (), 1, shared_scale, {}, ())
    table = pack(codes)
    with _ENCODED_LOCK:
        _ENCODED[key] = (att, data, table)
        while len(_ENCODED) > _ENCODED_MAX:
            _ENCODED.popitem(last=False)
    return data, table


def head_grid(data: dict, key: str, on_toggle: Callable[[int, int, bool], None],
              on_layer: Callable[[int], None] | None = None,
              on_bulk: Callable[[int, str, int | None], None] | None = None) -> None:
    """Mount the grid. `on_toggle(layer, head, on)` runs, before the rerun it causes, when a head's switch is
    clicked in the browser; `on_layer(layer)` when a layer tab is (the grid has drawn it already, with its heading
    and link); `on_bulk(layer, action, head)` when a bulk switch is ("off", "on", "only" with `head`, "reset"),
    for the layer the grid showed when it was clicked."""

    def _toggled() -> None:
        event = (st.session_state.get(key) or {}).get("toggle")
        if isinstance(event, dict) and {"layer", "head", "on"} <= set(event):
            on_toggle(int(event["layer"]), int(event["head"]), bool(event["on"]))

    def _layer() -> None:
        event = (st.session_state.get(key) or {}).get("layer")
        if on_layer is not None and isinstance(event, int) and 0 <= event < data["L"]:
            on_layer(event)

    def _bulk() -> None:
        event = (st.session_state.get(key) or {}).get("bulk")
        if on_bulk is None or not isinstance(event, dict):
            return
        layer, action, head = event.get("layer"), event.get("action"), event.get("head")
        if not (isinstance(layer, int) and 0 <= layer < data["L"]) or action not in BULK_ACTIONS:
            return
        if action == "only" and not (isinstance(head, int) and 0 <= head < data["H"]):
            return
        on_bulk(layer, action, head if action == "only" else None)

    _COMPONENT(data=data, key=key, on_toggle_change=_toggled, on_layer_change=_layer, on_bulk_change=_bulk)
