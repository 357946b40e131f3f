"""mha-viz in a Jupyter notebook: `mha_viz.show(model_or_name, text, layer=0)` or `mha_viz.show(run)`, and
`mha_viz.show_census(census)`, `mha_viz.show_circuits(circuits)`, and `mha_viz.show_twins(written)` (a written
model beside its learned twins, as tables).

Importing this package imports neither anywidget nor Jupyter (what the app and the notebook share, the grid's
browser code and payload, is mha_viz.web); the show functions do, when first called.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mha_viz.contract import AttentionRun, InputError, Model

if TYPE_CHECKING:
    from mha_viz.notebook.maps_widget import CensusMaps, CircuitsMaps
    from mha_viz.notebook.widget import HeadGrid

from mha_viz.notebook.twins import show_twins  # noqa: E402  (plain HTML tables: no widget import)

__all__ = ["show", "show_census", "show_circuits", "show_twins"]


def show(model_or_run, text: str | None = None, layer: int = 0, *, heads_off=(), model: Model | None = None,
         cols: int = 4, ablation: str = "zero", shared_scale: bool = False, display: bool = True,
         target: str | None = None, kind: str | None = None, cross_off=(), generate: int | None = None,
         seed: int | None = None, temperature: float = 1.0) -> "HeadGrid":
    """Every attention head of `layer` as its own heatmap, in the notebook, with the app's layer tabs, hover,
    enlarged head and on/off switches; a switch reruns the model and updates the grid and the effect readout.

        w = mha_viz.show("tiny", "the cat sat on the mat . the cat", layer=1)   # a name, or a loaded Model
        w = mha_viz.show(run)               # an AttentionRun you already have (switching heads needs its model:
                                            # show(run, model=m, text=t))
        w.heads_off = {(0, 1)}; w.run       # switch heads from code; the run now drawn
        w.save_svg("layer1.svg")

    An encoder-decoder model (BART, Marian, T5) reads `text` as its source and `target` as the decoder's text
    (None: its own greedy continuation); the page has a switch between its Encoder, Decoder and Cross attention
    (`kind`, settable from code), and `cross_off` switches cross-attention heads off:

        w = mha_viz.show(m, "The house is small.", target="Das Haus ist klein.", kind="Cross")

    A causal model writes on from `text` with `generate=N` (greedy; with a `seed`, sampled at `temperature` by a
    generator seeded with it): the grid covers the text and the written tokens (marked ✎), and a switch writes it
    again with the heads off (`Model.generate`):

        w = mha_viz.show("tiny", "anna met ben at the park .", generate=8, heads_off={(1, 0)})

    In IPython the widget is displayed here (once per cell, even if it is also the cell's last value) and
    returned; `display=False` only returns it.
    """
    t_show = time.time()
    try:
        from mha_viz.notebook.widget import HeadGrid
    except ImportError as err:
        if (err.name or "").split(".")[0] not in ("anywidget", "ipywidgets", "traitlets"):
            raise
        raise ImportError(f"mha_viz.show needs {err.name}, which is not installed in this kernel's environment: "
                          "`pip install 'mha-viz[notebook]'` (or `pip install anywidget`), then restart the "
                          "kernel") from err

    if isinstance(model_or_run, AttentionRun):
        if target is not None or kind is not None or cross_off:
            raise InputError("show(run) draws the run as it is; for target=, kind= or cross_off= pass the model: "
                             "show(model, source, target=...)")
        if heads_off:
            raise InputError("show(run) draws the run as it is; to switch heads off, pass the model and the text: "
                             "show(model, text, heads_off=...)")
        widget = HeadGrid(model_or_run, model=model, text=text, layer=layer, cols=cols, ablation=ablation,
                          shared_scale=shared_scale)
    else:
        if model is not None:
            raise InputError("pass the model once: show(model, text) or show(run, model=model, text=text)")
        if isinstance(model_or_run, str):
            from mha_viz.models import load_model

            model_or_run = load_model(model_or_run)
        if not isinstance(model_or_run, Model):
            raise InputError(f"show() takes a model (or its name, e.g. 'tiny', 'minilm') and a text, or an "
                             f"AttentionRun; got {type(model_or_run).__name__}")
        if not text:
            raise InputError("show(model, text): give the sentence to run, e.g. show(model, 'The cat sat on the mat.')")
        m = model_or_run
        if (target is not None or kind is not None or cross_off) and not m.has_cross_attention:
            what = "target=" if target is not None else "kind=" if kind is not None else "cross_off="
            raise InputError(f"{m.info.name} is a {m.info.kind} model with one text and no cross-attention, so "
                             f"{what} does not apply; show(model, text) draws its heads.")
        writing = None
        if generate is not None:
            from mha_viz.contract import UnavailableError
            from mha_viz.contract.records import GenerationSettings

            if m.cannot_write():
                raise UnavailableError(m.cannot_write())
            writing = GenerationSettings.read(generate, sampling=seed is not None, temperature=temperature,
                                              seed=0 if seed is None else seed)
            base = m.generate(text, writing).run
        elif seed is not None:
            raise InputError("seed= samples a continuation: give generate=N (how many tokens to write) with it")
        else:
            base = m.run(text, target=target) if m.has_cross_attention else m.run(text)
        widget = HeadGrid(base, model=m, text=text, layer=layer, cols=cols, ablation=ablation,
                          shared_scale=shared_scale, base=base, target=target, kind=kind, writing=writing)
        if heads_off or cross_off:
            widget.set_heads_off(heads_off, cross=cross_off if m.has_cross_attention else None)
    widget.t_show = t_show  # the time this call began: the browser tests and benchmarks measure show() -> drawn
    if display:
        widget.display_once()
    return widget


def _import_widgets():
    try:
        from mha_viz.notebook import maps_widget
    except ImportError as err:
        if (err.name or "").split(".")[0] not in ("anywidget", "ipywidgets", "traitlets"):
            raise
        raise ImportError(f"mha_viz.show_census / show_circuits need {err.name}, which is not installed in this "
                          "kernel's environment: `pip install 'mha-viz[notebook]'` (or `pip install anywidget`), "
                          "then restart the kernel") from err
    return maps_widget


def show_census(census, score: str | None = None, *, x: str | None = None, y: str | None = None, selected=None,
                scores=None, display: bool = True) -> "CensusMaps":
    """A census (`mha_viz.head_census(model)`) in the notebook: the layers x heads map of one score (a picker in
    the page; `score` first), its baselines in the legend (uniform attention, the best fixed offset, the control),
    hover for a head's value and bootstrap interval, every head as a point by two scores (`x`, `y`, default
    previous and induction), and a click on a head selects it: its numbers and top examples are drawn.

        w = mha_viz.show_census(census, "induction")
        w.selected                  # (layer, head) clicked in the page, or None; settable: w.selected = (1, 0)
        w.examples()                # the selected head's top natural texts, as drawn
        w.save_svg("census.svg")    # the picture as shown (the page's Save SVG button downloads the same)

    `scores` limits the pickers to those scores. Displayed here once (as show()) and returned; display=False
    only returns it."""
    t_show = time.time()
    widget = _import_widgets().CensusMaps(census, score=score, x=x, y=y, selected=selected, scores=scores)
    widget.t_show = t_show  # the browser test and benchmark measure show_census() -> drawn from it
    if display:
        widget.display_once()
    return widget


def show_circuits(circuits, mode: str = "k", *, selected="auto", modes=None,
                  display: bool = True) -> "CircuitsMaps":
    """Circuits (`mha_viz.circuits(model)`) in the notebook: the heads x heads composition map through the later
    head's query, key or value (a picker; `mode` first) with the random matrices' baseline marked in the legend,
    hover for a pair's score against random, each head's OV copying score, and for the selected head (clicked in
    a map; default the later head of the strongest pair) the singular values of its QK and OV maps and the heads
    it reads from and is read by.

        w = mha_viz.show_circuits(c, "k")
        w.selected, w.mode          # what the page shows; both settable from code
        w.save_svg("circuits.svg")

    `modes`: the kinds of composition offered (default: every one measured; an encoder-decoder model's
    `mha_viz.circuits(model, kind="Cross")` measures Q-composition only, and its note says why).
    Displayed here once (as show()) and returned; display=False only returns it."""
    t_show = time.time()
    widget = _import_widgets().CircuitsMaps(circuits, mode=mode, selected=selected, modes=modes)
    widget.t_show = t_show
    if display:
        widget.display_once()
    return widget
