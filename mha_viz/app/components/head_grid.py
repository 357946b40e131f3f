"""The layer grid as a browser component: the run's attention for ALL layers is held in the page, as one byte per
cell, and the browser draws the heads, switches layers (with the layer's heading, bulk switches and link), lights a
hovered token's row in every head and opens a head large (every token labelled, zoom and pan) without a server
round trip. A head switched on or off, and a bulk switch, come back as triggers, because they need the model; a
layer tab comes back as one once the grid has drawn it, for what the page draws for that layer.

The weights travel deflated, one Arrow binary column per layer (raw bytes on the websocket: no base64, no JSON
string to parse), and only the layers the page does not hold: each layer is named by its digest (web/payload.py),
and the session remembers which digests it sent the grid (`held`). After a toggle in layer l that is the layers
whose attention changed, above l; after a layer tab, none. The grid's element carries the layer on screen, so it
is drawn first; the other layers follow in a hidden element of their own at the end of the view (`grid_rest`,
grid_rest.js), which the first drawing does not wait for. A page that lacks a layer no message brings (a message it
never saw) asks for it again ("resend"). The saved figures' font goes once per page the same way.

Where the page runs the model for the grid itself, the grid's element goes while the forward is still computing
(`early_payload`, views/layer.early_grid): once the forward has made the layer on screen, with the layers above it
not yet known (named None) and the run named by a provisional digest; `grid_rest(..., completes=...)` then names
the run and brings the rest. The codes are made layer by layer as the forward hands each layer over (`AsMade`).

Measured against the plotly row figures it replaces, and the messages' sizes, in benchmarks/RESULTS.md.
"""
from __future__ import annotations

import hashlib
import threading
import zlib
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Hashable

import pyarrow as pa
import streamlit as st
import torch

from mha_viz.app.components import figure_font
from mha_viz.contract import Head
from mha_viz.web import grid_css, grid_js
from mha_viz.web.payload import deflate, early_data, grid_data, layer_codes, layer_part, shown_fields

BULK_ACTIONS = ("off", "on", "only", "reset")
JS = grid_js()  # the bundle of web/grid/'s modules, the one the notebook widget loads too
# isolate_styles=False: no shadow root, so browser tests and benchmarks can query the grid's DOM; every class is
# prefixed `mhv-` instead.
_COMPONENT = st.components.v2.component(
    "mha_viz.head_grid", html="", css=grid_css(), js=JS, isolate_styles=False,
)
# The element that brings the layers the grid's own did not (grid_rest): a few lines of its own, since Streamlit
# sends a component's code with every element of it (the grid's bundle is 55 kB). Hidden: it draws nothing.
_REST = st.components.v2.component(
    "mha_viz.head_grid_rest", html="", css=".mhv-carrier { display: none !important; }",
    js=(Path(__file__).resolve().parent / "grid_rest.js").read_text(), isolate_styles=False,
)


def pack(layers: dict[int, bytes], font: bytes | None = None) -> pa.Table | None:
    """Each layer's codes, deflated, as the one cell of an Arrow binary column "z<layer>": Streamlit sends a
    top-level Arrow table of a component's data as a binary blob beside the JSON, so the page receives the bytes
    themselves. With `font` (the saved figures' WOFF, figure_font.py), a column "font" in the same blob. None when
    there is nothing to carry."""
    fields = [pa.field(f"z{layer}", pa.binary()) for layer in sorted(layers)]
    cells = [pa.array([layers[layer]], type=pa.binary()) for layer in sorted(layers)]
    if font is not None:
        fields.append(_font_field())
        cells.append(pa.array([font], type=pa.binary()))
    return pa.Table.from_arrays(cells, schema=pa.schema(fields)) if fields else None


def unpack(table: pa.Table | None) -> dict[int, bytes]:
    """`pack` undone, as the browser does it (tests): {layer: its (H, T, T) codes} for the layers carried."""
    if table is None:
        return {}
    return {int(name[1:]): zlib.decompress(table.column(name)[0].as_py())
            for name in table.column_names if name.startswith("z")}


class Encoded:
    """One run's codes for the grid: the payload's JSON (`grid_data`: digests, scales, names) and the codes, each
    layer deflated once, on the encoder's threads, when a message first carries it."""

    def __init__(self, data: dict, codes: bytes):
        self.data, self.codes = data, codes
        self._z: dict[int, Future] = {}
        self._lock = threading.Lock()

    def prefetch(self, layers) -> None:
        """Start deflating `layers` (those not started yet) on the encoder's threads."""
        with self._lock:
            for layer in layers:
                if layer not in self._z:
                    self._z[layer] = _ENCODER.submit(deflate, layer_codes(self.codes, self.data, layer))

    def z(self, layer: int) -> bytes:
        self.prefetch([layer])
        return self._z[layer].result()


def _held_key(key: str) -> str:
    return f"{key}|held"


def held(key: str) -> dict | None:
    """What this session sent the grid `key`, so what the page holds unless it asked for it again: {"digests":
    each layer's digest (None where none was sent), "font": the saved figures' font's digest}; None before any."""
    return st.session_state.get(_held_key(key))


def _record(key: str, data: dict, layers, font: bool = False) -> None:
    record = held(key)
    digests = list(record["digests"]) if record is not None and len(record["digests"]) == data["L"] else \
        [None] * data["L"]
    for layer in layers:
        digests[layer] = data["digests"][layer]
    sent_font = data.get("font") if font else (record or {}).get("font")
    st.session_state[_held_key(key)] = {"digests": digests, "font": sent_font}


def payload(tokens: list[str], att: torch.Tensor, layer: int, heads_off, n_cols: int, shared_scale: bool,
            badges: dict[Head, str], unknown=(), controls: bool = False, encoded: Future | None = None,
            held: dict | None = None) -> dict:
    """Everything the browser draws from (see the header of web/grid/main.js): JSON, but for `att`, an Arrow
    table that travels as a binary blob. Built by web/payload.py, which the notebook widget shares: the head and
    layer names and the colours come from Python (mha_viz/names.py, web/palette.py), so the grid spells and
    colours a head as every other figure does.

    held: what the page holds (`held(key)`); of the layers it lacks, `att` carries the layer shown and `rest`
    names the ones `grid_rest` brings after it (already deflating).
    controls: the page's grid draws the layer's heading and bulk switches itself and writes the link's layer (one
    layer state that a tab changes in the browser). The saved figures' font (`font`: its digest, or None while its
    subset is being made) rides in the same blob where the page does not hold it.
    encoded: `encode_soon(tokens, att, shared_scale)`, started before the badges were measured."""
    enc = encoded.result() if encoded is not None else _encoded(tokens, att, shared_scale)
    data, L = enc.data, enc.data["L"]
    layer = min(int(layer), L - 1)
    first, rest = _split(data["digests"], layer, held)
    enc.prefetch(first + rest)  # the shown layer first; the rest deflate while the view draws the rest of itself
    data = {**data, **shown_fields(layer, heads_off, n_cols, badges, unknown), "rest": rest}
    return _finished(data, tokens, controls, held, {l: enc.z(l) for l in first})


def early_payload(tokens: list[str], shape: tuple[int, int, int, int], parts: dict, layer: int, heads_off,
                  n_cols: int, shared_scale: bool, badges: dict[Head, str], unknown=(), controls: bool = False,
                  held: dict | None = None) -> dict:
    """`payload` for a run whose forward has made the layers in `parts` ({layer: web/payload.layer_part}, the
    layer on screen among them) and is still computing the ones above: the grid draws the layer on screen now, and
    `grid_rest(..., completes=this data's digest)` brings the run's names and its other layers once it is done."""
    data = early_data(tokens, shape, parts, layer, heads_off, n_cols, shared_scale, badges, unknown)
    first, rest = _split(data["digests"], layer, held)
    data["rest"] = rest  # the layers not yet known among them: their digests are None
    return _finished(data, tokens, controls, held, {l: deflate(parts[l][0]) for l in first})


def _split(digests: list, layer: int, held: dict | None) -> tuple[list[int], list[int]]:
    """Of the layers the page does not hold: the one on screen (if so), and the others."""
    L = len(digests)
    known = held["digests"] if held is not None and len(held["digests"]) == L else [None] * L
    changed = [l for l in range(L) if digests[l] is None or known[l] != digests[l]]
    return ([layer] if layer in changed else []), [l for l in changed if l != layer]


def _finished(data: dict, tokens: list[str], controls: bool, held: dict | None, layers: dict[int, bytes]) -> dict:
    """The data with its controls, its font's digest and the table of `layers` ({layer: deflated codes}), with
    the font where the page lacks it."""
    if controls:
        data["controls"] = {"bulk": True, "link": True}
    font = figure_font.font_for(tokens)
    data["font"] = None if font is None else hashlib.blake2b(font, digest_size=8).hexdigest()
    if data["font"] is None or (held is not None and held.get("font") == data["font"]):
        font = None  # none yet, or the page has it
    return {**data, "att": pack(layers, font)}


def _font_field() -> pa.Field:
    """The font's column, its family and licence in the field's metadata (the JSON stays the notebook's own)."""
    return pa.field("font", pa.binary(), metadata={"family": figure_font.FAMILY, "licence": figure_font.LICENCE})


# The codes of the last few runs' attention: a layer tab's or the heading's rerun reads the same run again
# (SmolLM2 at 128 tokens: 4.4 MB of codes; encoding, digests and deflating every layer about 0.1 s). Keyed by the
# tensor's identity (the page's runs are cached objects; the tensor is held here, so its id is not reused while the
# entry lives).
_ENCODED: OrderedDict = OrderedDict()
_ENCODED_MAX = 4
_ENCODED_LOCK = threading.Lock()


# Encoding and deflating release the GIL for most of their time (torch's kernels, zlib), as measuring the badges
# does: run beside each other they overlap on the second core (SmolLM2 at 128 tokens: about 45 ms of codes beside
# about 60 ms of badges). Two workers: two sessions' pages may encode at once, and a run's layers deflate two at a
# time.
_ENCODER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="mha-viz-grid-codes")


def encode_soon(tokens: list[str], att: torch.Tensor, shared_scale: bool,
                query_tokens: list[str] | None = None) -> Future:
    """`payload`'s codes for this run, started now on a worker thread; pass the result as payload(encoded=...).
    query_tokens: the rows' labels where they are not `tokens` (cross-attention, web/payload.grid_data)."""
    return _ENCODER.submit(_encoded, list(tokens), att, shared_scale,
                           None if query_tokens is None else list(query_tokens))


def _encoded(tokens: list[str], att: torch.Tensor, shared_scale: bool,
             query_tokens: list[str] | None = None) -> Encoded:
    key = (id(att), tuple(tokens), bool(shared_scale), None if query_tokens is None else tuple(query_tokens))
    with _ENCODED_LOCK:
        hit = _ENCODED.get(key)
        if hit is not None and hit[0] is att:
            _ENCODED.move_to_end(key)
            return hit[1]
        made = _MADE.pop(id(att), None)
    parts = made[1].parts(att, shared_scale) if made is not None and made[0] is att else None
    data, codes = grid_data(tokens, att, 0, (), 1, shared_scale, {}, (), query_tokens=query_tokens, parts=parts)
    enc = Encoded(data, codes)
    with _ENCODED_LOCK:
        _ENCODED[key] = (att, enc)
        while len(_ENCODED) > _ENCODED_MAX:
            _ENCODED.popitem(last=False)
    return enc


class AsMade:
    """One run's codes for the grid, made layer by layer on the encoder's threads as its forward hands each layer
    over (`on_layer` of the engine's run: `get_run(..., on_layer=made.add)`), while the layers above it are still
    computing; then `made.filed(run.attentions)`. The grid's encoding of that run (`encode_soon`) then only joins
    them: after a new sentence's forward, its codes and digests of every layer (SmolLM2 at 128 tokens: 4.4 M cells,
    about 20 ms) are ready. Where the run came from the cache (no layer handed over), nothing is filed."""

    def __init__(self, shared_scale: bool):
        self.shared = bool(shared_scale)
        self._parts: dict[int, Future] = {}
        self._key: Callable[[int], Hashable] | None = None

    def keyed(self, key: Callable[[int], Hashable]) -> None:
        """key(layer): what shapes that layer's attention (views/layer.early_grid: the model, the tokens, the heads
        off below the layer and what "off" meant), under which every session shares its codes (`_LAYER_PARTS`): a
        toggle in layer l hands layers 0..l over unchanged from the run before, whose codes were made then. Without
        it, each layer's codes are made afresh."""
        self._key = key

    def add(self, layer: int, weights: torch.Tensor) -> None:
        """weights (H, Q, K): layer `layer`'s attention as the run computed it."""
        if self._key is None:
            self._parts[layer] = _ENCODER.submit(layer_part, weights, self.shared)
            return
        global _layer_parts_bytes
        key = (self._key(layer), self.shared)
        with _LAYER_PARTS_LOCK:
            kept = _LAYER_PARTS.get(key)
            if kept is not None and not (kept[0].done() and kept[0].exception() is not None):
                _LAYER_PARTS.move_to_end(key)  # used last: let go last
                self._parts[layer] = kept[0]
                return
            made = _ENCODER.submit(layer_part, weights, self.shared)
            _LAYER_PARTS[key] = (made, weights.numel())  # one byte of codes per cell
            _layer_parts_bytes += weights.numel() - (kept[1] if kept is not None else 0)
            while _layer_parts_bytes > _LAYER_PARTS_MAX_BYTES and len(_LAYER_PARTS) > 1:
                _layer_parts_bytes -= _LAYER_PARTS.popitem(last=False)[1][1]
        self._parts[layer] = made

    def filed(self, att: torch.Tensor) -> None:
        """att (L, H, Q, K): the run's attention these layers are of; kept (the last few) for its encoding."""
        if len(self._parts) != att.shape[0]:
            return  # answered from the cache, or a run that failed part-way
        with _ENCODED_LOCK:
            _MADE[id(att)] = (att, self)
            while len(_MADE) > _MADE_MAX:
                _MADE.popitem(last=False)

    def known(self, upto: int) -> dict[int, tuple]:
        """{layer: (codes, scales, digest)} of layers 0..upto, every one handed over already (the forward hands
        them on in order): what an early first message names (`early_payload`)."""
        return {layer: self._parts[layer].result() for layer in range(upto + 1)}

    def parts(self, att: torch.Tensor, shared_scale: bool) -> list | None:
        """Every layer's (codes, scales, digest), or None where they are not the encoding asked for (the other
        scale)."""
        if bool(shared_scale) != self.shared:
            return None
        return list(self.known(att.shape[0] - 1).values())


# Runs whose codes were made as their forward went (AsMade), until their encoding takes them: keyed as _ENCODED.
_MADE: OrderedDict = OrderedDict()
_MADE_MAX = 2
# Each layer's (codes, scales, digest) made by AsMade.add under its key (AsMade.keyed), shared by every session (the
# key names the content, not a session), least recently used let go first past _LAYER_PARTS_MAX_BYTES of codes
# (SmolLM2 at 128 tokens: 147 kB a layer, 4.4 MB a run; at 512 tokens 70 MB a run, so most layers of the last run).
_LAYER_PARTS: OrderedDict = OrderedDict()  # (key, shared scale) -> (Future of layer_part, bytes of its codes)
_LAYER_PARTS_MAX_BYTES = 64 * 2**20
_LAYER_PARTS_LOCK = threading.Lock()
_layer_parts_bytes = 0


def grid_rest(data: dict, encoded: Future, key: str, badges: dict[Head, str] | None = None,
              completes: str | None = None) -> None:
    """The layers `payload` left for later (`data["rest"]`), as an element of their own that draws nothing
    (grid_rest.js): the page keeps them for the grid `key`. Call it after the rest of the view, so the grid's
    element (the layer on screen) goes to the page first. Mounted on every run, carrying nothing when there is
    nothing left, so the page's elements stay the same. `badges`: the captions of the layers whose captions the
    grid's element did not carry (every layer's may be given), kept by the page under the run's digest.
    completes: the digest of the grid's element where it was an `early_payload` (this run's `payload` made after
    it, against what the page then held): the page takes this run's digests and scales for it."""
    enc = encoded.result()
    rest = list(data.get("rest") or [])
    message = {"digest": data["digest"], "digests": data["digests"], "att": pack({l: enc.z(l) for l in rest}),
               "badges": {f"{l},{h}": text for (l, h), text in (badges or {}).items()}}
    if completes is not None:
        message.update(completes=completes, scale=data["scale"])
    _REST(data=message, key=f"{key}|rest")
    _record(key, data, rest)


def head_grid(data: dict, key: str, on_toggle: Callable[[int, int, bool], None],
              on_layer: Callable[[int], None] | None = None,
              on_bulk: Callable[[int, str, int | None], None] | None = None) -> None:
    """Mount the grid. `on_toggle(layer, head, on)` runs, before the rerun it causes, when a head's switch is
    clicked in the browser; `on_layer(layer)` when a layer tab is (the grid has drawn it already, with its heading
    and link); `on_bulk(layer, action, head)` when a bulk switch is ("off", "on", "only" with `head`, "reset"),
    for the layer the grid showed when it was clicked. Then `grid_rest(data, encoded, key)`, once the view has
    drawn the rest of itself."""

    def _toggled() -> None:
        event = (st.session_state.get(key) or {}).get("toggle")
        if isinstance(event, dict) and {"layer", "head", "on"} <= set(event):
            on_toggle(int(event["layer"]), int(event["head"]), bool(event["on"]))

    def _layer() -> None:
        event = (st.session_state.get(key) or {}).get("layer")
        if on_layer is not None and isinstance(event, int) and 0 <= event < data["L"]:
            on_layer(event)

    def _resend() -> None:  # the page lacks layers it was sent: the next message carries every layer
        st.session_state[_held_key(key)] = None

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

    _COMPONENT(data=data, key=key, on_toggle_change=_toggled, on_layer_change=_layer, on_bulk_change=_bulk,
               on_resend_change=_resend)
    _record(key, data, unpack_layers(data["att"]), font=data["att"] is not None and "font" in data["att"].column_names)


def unpack_layers(table: pa.Table | None) -> list[int]:
    """The layers a message's table carries."""
    return [] if table is None else [int(n[1:]) for n in table.column_names if n.startswith("z")]
