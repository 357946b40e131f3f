"""mha-viz in a Jupyter notebook: `mha_viz.show(model_or_name, text, layer=0)` or `mha_viz.show(run)`.

Importing this package imports neither anywidget nor Jupyter (the app imports `mha_viz.notebook.payload`, the data
both hosts draw from); `show` does, when first called.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mha_viz.contract import AttentionRun, InputError, Model

if TYPE_CHECKING:
    from mha_viz.notebook.widget import HeadGrid

__all__ = ["show", "show_census", "show_circuits"]


def show(model_or_run, text: str | None = None, layer: int = 0, *, heads_off=(), model: Model | None = None,
         cols: int = 4, ablation: str = "zero", shared_scale: bool = False, display: bool = True) -> "HeadGrid":
    """Every attention head of `layer` as its own heatmap, in the notebook, with the app's layer tabs, hover,
    enlarged head and on/off switches; a switch reruns the model and updates the grid and the effect readout.

        w = mha_viz.show("tiny", "the cat sat on the mat . the cat", layer=1)   # a name, or a loaded Model
        w = mha_viz.show(run)               # an AttentionRun you already have (switching heads needs its model:
                                            # show(run, model=m, text=t))
        w.heads_off = {(0, 1)}; w.run       # switch heads from code; the run now drawn
        w.save_svg("layer1.svg")

    In IPython the widget is displayed here (once per cell, even if it is also the cell's last value) and
    returned; `display=False` only returns it.
    """
    import time

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
        base = m.run(text)
        widget = HeadGrid(base, model=m, text=text, layer=layer, cols=cols, ablation=ablation,
                          shared_scale=shared_scale, base=base)
        if heads_off:
            widget.set_heads_off(heads_off)
    widget.t_show = t_show  # the time this call began: the browser tests and benchmarks measure show() -> drawn
    if display:
        widget.display_once()
    return widget


def show_census(census, scores=None):
    """`mha_viz.head_census(model)`'s layers x heads maps as one SVG picture (the cell's value); `.to_svg()`,
    `.save_svg(path)`. See mha_viz/notebook/maps.py."""
    from mha_viz.notebook.maps import show_census as _show

    return _show(census, scores)


def show_circuits(circuits, modes=("q", "k", "v")):
    """`mha_viz.circuits(model)`'s composition maps (and OV copying) as one SVG picture; `.to_svg()`,
    `.save_svg(path)`. See mha_viz/notebook/maps.py."""
    from mha_viz.notebook.maps import show_circuits as _show

    return _show(circuits, modes)
