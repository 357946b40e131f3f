"""One layer of the head grid as a standalone SVG file: every head a heatmap with its name and measured score, the
same colours as the browser grid (the palette the grid receives in its payload, mha_viz/web/palette.py).

Each heatmap is an embedded PNG of T x T pixels drawn with `image-rendering: pixelated` (crisp cells at any zoom,
and a file of kilobytes where T² rectangles would be megabytes). No streamlit, no Jupyter: the notebook widget's
export and its static fallback (what a saved notebook shows without a kernel) are both this picture.
"""
from __future__ import annotations

import base64
import html
import struct
import zlib

import numpy as np

from mha_viz.names import head_name
from mha_viz.web.palette import PICTURE, grid_colours

TILE = 160  # px per heatmap in the SVG
GAP = 14
TITLE_H = 18
BADGE_H = 16


def colour_stops() -> tuple[list[str], list[str]]:
    """(on, off) colour stops: the ones the grid receives in its payload (web/palette.py)."""
    colours = grid_colours()
    return colours["on"], colours["off"]


def lut(colors: list[str]) -> np.ndarray:
    """256 RGB entries interpolated along the colour stops, as the grid's lut() does (web/grid/colour.js)
    -> (256, 3) uint8."""
    rgb = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in colors], np.float64)  # (S, 3)
    x = np.arange(256) / 255 * (len(rgb) - 1)  # (256,)
    i = np.minimum(np.floor(x).astype(int), len(rgb) - 2)  # (256,)
    f = (x - i)[:, None]  # (256, 1)
    # JS writes the float into a Uint8ClampedArray, which rounds half to even; np.rint does the same.
    return np.clip(np.rint(rgb[i] + (rgb[i + 1] - rgb[i]) * f), 0, 255).astype(np.uint8)  # (256, 3)


def contrast_map() -> np.ndarray:
    """The grid's default contrast ("√ square root", its remap("sqrt")): code v -> colour index
    Math.round(sqrt(v / 255) * 255), so a head's weak cells stay visible beside one strong one -> (256,) uint8.
    The browser tests compare the grid's pixels with this picture's."""
    return np.floor(np.sqrt(np.arange(256) / 255) * 255 + 0.5).astype(np.uint8)  # (256,)


def png(rgb: np.ndarray) -> bytes:
    """(h, w, 3) uint8 -> a PNG file (8-bit RGB, no filter)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def _wrap(words: list[str], width: int) -> list[str]:
    """Greedy line filling: `words` joined by spaces into lines of at most `width` characters (a longer word gets
    a line of its own). The maps' captions use it too."""
    lines, line = [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    return lines + ([line] if line else [])


def layer_svg(codes: np.ndarray, tokens: list[str], layer: int, off: set, badges: dict, cols: int,
              title: str = "", query_tokens: list[str] | None = None) -> str:
    """codes: (H, T, T) uint8 of one layer, as the grid receives them (code / 255 of each head's own maximum, or
    of 1 on a shared scale); off: {(layer, head)}; badges: {(layer, head): text}. -> the SVG document.
    query_tokens: the rows' tokens where they are not `tokens` (cross-attention: codes (H, Q, T), target rows
    reading source columns; each heatmap is then Q / T as tall as wide)."""
    Q = codes.shape[1] if codes.ndim == 3 else -1
    if codes.ndim != 3 or codes.shape[2] != len(tokens) or Q != len(query_tokens or tokens):
        raise ValueError(f"layer_svg wants one layer's (head, query, key) codes for {len(query_tokens or tokens)} "
                         f"queries and {len(tokens)} keys; got shape {codes.shape}")
    H = codes.shape[0]
    tile_h = round(TILE * Q / len(tokens)) if query_tokens is not None else TILE
    on_lut, off_lut = (lut(c) for c in colour_stops())
    remap = contrast_map()  # (256,)
    cols = max(1, min(cols, H))
    rows = -(-H // cols)
    width = cols * TILE + (cols + 1) * GAP
    token_lines = _wrap([f"{i}:{t}" for i, t in enumerate(tokens)], max(20, width // 7))
    if query_tokens is not None:  # columns first, then the rows, each set named
        token_lines = (["columns (keys):"] + token_lines + ["rows (queries):"]
                       + _wrap([f"{i}:{t}" for i, t in enumerate(query_tokens)], max(20, width // 7)))
    top = GAP + 18 * bool(title) + 14 * len(token_lines) + 6
    cell_h = TITLE_H + tile_h + BADGE_H + GAP
    height = top + rows * cell_h + GAP
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="{PICTURE["paper"]}"/>']
    y = GAP
    if title:
        out.append(f'<text x="{GAP}" y="{y + 12}" font-size="14" font-weight="bold">{html.escape(title)}</text>')
        y += 18
    for line in token_lines:
        out.append(f'<text x="{GAP}" y="{y + 11}" font-family="monospace" font-size="11" fill="{PICTURE["label"]}">'
                   f'{html.escape(line)}</text>')
        y += 14
    for h in range(H):
        r, c = divmod(h, cols)
        x0, y0 = GAP + c * (TILE + GAP), top + r * cell_h
        is_off = (layer, h) in off
        image = (off_lut if is_off else on_lut)[remap[codes[h]]]  # (T, T, 3)
        href = "data:image/png;base64," + base64.b64encode(png(image)).decode()
        name = head_name((layer, h)) + (" (off)" if is_off else "")
        fill = PICTURE["ink_off"] if is_off else PICTURE["ink"]
        out.append(f'<g data-head="{head_name((layer, h))}"><text x="{x0}" y="{y0 + 13}" fill="{fill}">{name}</text>')
        out.append(f'<image x="{x0}" y="{y0 + TITLE_H}" width="{TILE}" height="{tile_h}" preserveAspectRatio="none" '
                   f'style="image-rendering: pixelated" href="{href}"/>')
        out.append(f'<rect x="{x0}" y="{y0 + TITLE_H}" width="{TILE}" height="{tile_h}" fill="none" '
                   f'stroke="{PICTURE["frame"]}"/>')
        badge = badges.get((layer, h), "")
        if badge:
            out.append(f'<text x="{x0}" y="{y0 + TITLE_H + tile_h + 12}" font-size="10" fill="{PICTURE["note"]}">'
                       f'{html.escape(badge)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out)
