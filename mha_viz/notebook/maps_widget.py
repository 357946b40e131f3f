"""The census and the circuits as notebook widgets: `mha_viz.show_census(census)`, `mha_viz.show_circuits(circuits)`.

Python draws the picture (notebook/maps.py) and sends it as one SVG string; the page (maps.js) puts it in the
output, adds the pickers (score and the scatter's two axes; or the kind of composition), the hover readout and the
clicks. A click on a head sets `widget.selected`, which redraws the picture with that head's numbers (and top
examples, or singular values): readable from Python in the next cell, and settable from it. Every picker is a
synced trait too (`score`, `x`, `y`; `mode`). `to_svg()` / `save_svg(path)` export the picture from Python, the
page's "Save SVG" button downloads the same string, and the output's image/svg+xml fallback is that picture as it
was last drawn (display.py). The JavaScript travels in the widget (anywidget): nothing comes from a CDN.
"""
from __future__ import annotations

import time
from pathlib import Path

import anywidget
import traitlets

from mha_viz.contract import InputError
from mha_viz.notebook import circuit_map, maps
from mha_viz.notebook.display import FallbackDisplay, esm

_CSS = """
.mhm { font-family: var(--jp-ui-font-family, sans-serif); color: var(--jp-ui-font-color1, #222); position: relative; }
.mhm-bar { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin-bottom: 6px; font-size: 12px; }
.mhm-bar select { max-width: 260px; }
.mhm-status { color: #8a5a00; }
.mhm-tip { font-size: 12px; min-height: 16px; margin: 2px 0 4px; font-family: monospace; white-space: pre-wrap; }
.mhm-box svg [data-lh] { cursor: pointer; }
.mhm-box svg [data-tip]:hover, .mhm-box svg .mhm-hover { stroke: #ff7f0e; stroke-width: 2.5; }
.mhm-box { overflow-x: auto; }
"""


def _head(value, n_layers: int, n_heads: int):
    """(layer, head), or None: what `selected` holds, checked against the model's heads."""
    if value is None:
        return None
    try:
        layer, head = (int(v) for v in value)
    except (TypeError, ValueError):
        raise InputError(f"selected must be (layer, head) or None; got {value!r}") from None
    if not (0 <= layer < n_layers and 0 <= head < n_heads):
        raise InputError(f"head ({layer}, {head}) does not exist: this model has layers 0 to {n_layers - 1} and "
                         f"heads 0 to {n_heads - 1}")
    return (layer, head)


class _Maps(FallbackDisplay, anywidget.AnyWidget):
    """What both widgets share: the picture, the pickers, `selected`, the SVG export, the display."""

    _esm = esm("maps.js")
    _css = _CSS
    picture = traitlets.Unicode("").tag(sync=True)  # the SVG drawn now
    controls = traitlets.List().tag(sync=True)  # [{trait, label, options: [[value, label]]}] the page's pickers
    selected = traitlets.Any(None).tag(sync=True)  # (layer, head) or None, checked by _check_selected
    hover = traitlets.Dict().tag(sync=True)  # for the page's hover over an embedded map (circuits)
    hover_values = traitlets.Bytes(b"").tag(sync=True)  # that map's values, float32
    filename = traitlets.Unicode("mha-viz.svg").tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    _picker_traits: tuple[str, ...] = ()

    def __init__(self, n_layers: int, n_heads: int, **traits):
        self.t_show = time.time()  # when show_...() began (the browser test and benchmark measure it -> drawn)
        self._n_layers, self._n_heads = n_layers, n_heads
        self._handles, self._shown_at, self._ready = [], None, False
        self._callbacks = []
        super().__init__(**traits)
        self._ready = True
        self._redraw()
        self.observe(self._changed, names=list(self._picker_traits) + ["selected"])

    @traitlets.validate("selected")
    def _check_selected(self, proposal):
        return _head(proposal["value"], self._n_layers, self._n_heads)

    def _changed(self, change) -> None:
        self._redraw()
        if change["name"] == "selected":
            for fn in list(self._callbacks):
                fn(change["new"])

    def on_select(self, fn) -> None:
        """Call fn((layer, head) or None) whenever the selected head changes (a click in the page, or code)."""
        self._callbacks.append(fn)

    def _redraw(self) -> None:
        if not self._ready:
            return
        with self.hold_sync():
            self.picture = self.to_svg()
            self.status = ""
            self._send_hover()
        self._update_fallback()

    def _send_hover(self) -> None:
        pass

    def save_svg(self, path) -> Path:
        path = Path(path)
        path.write_text(self.to_svg(), encoding="utf-8")
        return path


def _check_name(value: str, allowed, what: str) -> str:
    if value not in allowed:
        raise InputError(f"{value!r} is not {what}; use one of: {', '.join(allowed)}")
    return value


class CensusMaps(_Maps):
    """A census (`mha_viz.head_census`) in the notebook: the layers x heads map of one score (`score`, picked in
    the page), its baselines in the legend, every head by two scores (`x`, `y`), and the selected head's numbers
    and top examples. Readable and settable from Python: `score`, `x`, `y`, `selected`."""

    score = traitlets.Unicode().tag(sync=True)
    x = traitlets.Unicode().tag(sync=True)
    y = traitlets.Unicode().tag(sync=True)
    _picker_traits = ("score", "x", "y")

    def __init__(self, census, score: str | None = None, x: str | None = None, y: str | None = None,
                 selected=None, scores=None):
        names = list(census.names if scores is None else scores)
        unknown = [n for n in names if n not in census.scores]
        if unknown or not names:
            raise InputError(f"{unknown or 'no scores'} are not scores of this census; it has: "
                             f"{', '.join(census.names)}")
        self._census, self._names = census, names
        pick = lambda want, fallback: want if want is not None else (fallback if fallback in names else names[0])  # noqa: E731
        score = pick(score, "previous")
        x = pick(x, "previous")
        y = pick(y, "induction" if "induction" in names else names[min(1, len(names) - 1)])
        for value in (score, x, y):
            _check_name(value, names, "a score of this census")
        options = [[n, maps.measure_line(n)] for n in names]
        short = [[n, n] for n in names]
        controls = [{"trait": "score", "label": "Score", "options": options},
                    {"trait": "x", "label": "Scatter x", "options": short},
                    {"trait": "y", "label": "y", "options": short}]
        super().__init__(census.n_layers, census.n_heads, score=score, x=x, y=y, selected=selected,
                         controls=controls, filename=f"census-{census.model}-{census.seed}.svg")

    @traitlets.validate("score", "x", "y")
    def _check_score(self, proposal):
        return _check_name(proposal["value"], self._names, "a score of this census")

    @property
    def census(self):
        return self._census

    @property
    def examples_by(self) -> str | None:
        """The score the top examples are ranked by: the shown score when it is measured per natural text, else the
        first that is (e.g. "previous (text)" while "previous", measured on random words, is shown); None when the
        census kept no per-text values."""
        return maps.example_score(self._census, self.score)

    def examples(self, head=None) -> list[tuple[float, str]]:
        """The selected head's (or `head`'s) top natural texts on the shown score (or the first score measured per
        text): [(value, text)], as the picture lists them; [] when the census kept no per-text values."""
        lh = _head(head if head is not None else self.selected, self._n_layers, self._n_heads)
        by = self.examples_by
        if lh is None or by is None:
            return []
        return maps.top_examples(self._census, by, lh)

    def to_svg(self) -> str:
        """The picture now: the shown score's map, the scatter, the selected head's numbers and top examples."""
        return maps.census_svg(self._census, self.score, self.x, self.y, self.selected)

    def _plain(self) -> str:
        sel = "" if self.selected is None else f", selected {maps.head_name(self.selected)}"
        return f"<mha-viz census of {self._census.model}: {self.score}{sel}>"


class CircuitsMaps(_Maps):
    """Circuits (`mha_viz.circuits`) in the notebook: the heads x heads composition map through the query, key or
    value (`mode`, picked in the page) with its random baseline in the legend, each head's OV copying score, and
    the selected head's singular values and strongest partners. Readable and settable: `mode`, `selected`."""

    mode = traitlets.Unicode("k").tag(sync=True)
    _picker_traits = ("mode",)

    def __init__(self, circuits, mode: str = "k", selected="auto", modes=None):
        # None: every kind measured (cross-attention measures Q-composition only; `Circuits.composition_note`).
        modes = [m for m in ("q", "k", "v") if m in circuits.composition] if modes is None else list(modes)
        for m in modes:
            _check_name(m, sorted(circuits.composition), "a kind of composition")
        if not modes:
            raise InputError("modes is empty: give at least one of 'q', 'k', 'v'")
        mode = mode if mode in modes else modes[0]
        self._circuits, self._modes = circuits, modes
        if selected == "auto":  # the later head of the strongest pair: its singular values show from the start
            best = circuits.top_pairs(mode, 1)
            selected = best[0][1] if best else None
        controls = [{"trait": "mode", "label": "Composition through the later head's",
                     "options": [[m, f"{circuit_map.MODE_WORDS[m]} ({m.upper()})"] for m in modes]}]
        super().__init__(circuits.n_layers, circuits.n_heads, mode=mode, selected=selected, controls=controls,
                         filename=f"circuits-{circuits.name}.svg")

    @traitlets.validate("mode")
    def _check_mode(self, proposal):
        return _check_name(proposal["value"], self._modes, "a kind of composition shown here")

    @property
    def circuits(self):
        return self._circuits

    def to_svg(self) -> str:
        """The picture now: the composition map of `mode`, OV copying, the selected head's singular values."""
        return circuit_map.circuits_svg(self._circuits, self.mode, self.selected)

    def _send_hover(self) -> None:
        c = self._circuits
        labels = [maps.head_name((layer, head)) for layer in range(c.n_layers) for head in range(c.n_heads)]
        self.hover = {"composition": {"n": len(labels), "labels": labels, "base": c.baseline[self.mode].mean,
                                      "mode": self.mode, "what": circuit_map.MODE_WORDS[self.mode]}}
        self.hover_values = circuit_map.composition_values(c, self.mode)

    def _plain(self) -> str:
        sel = "" if self.selected is None else f", selected {maps.head_name(self.selected)}"
        return f"<mha-viz circuits of {self._circuits.name}: {self.mode.upper()}-composition{sel}>"
