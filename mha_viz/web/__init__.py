"""What both hosts of the head grid share: the Streamlit component (app/components/head_grid.py) and the notebook
widget (notebook/widget.py) mount the same browser code on the same payload, and import both from here.

- `grid_js()`: the grid's ES module, joined from the files of `grid/` in GRID_FILES order (one concern each:
  entry, labels, colours, controls, tabs, heads, hover, enlarged head, export, lines), `grid_css()` its styles;
- `payload`: tensors and tokens -> the data the grid draws from (no streamlit, no Jupyter);
- `palette`: every colour the grid draws with, sent in the payload, which the notebook's SVG picture reads too.
Head and layer names come from mha_viz.names. Nothing here imports the app, the notebook or streamlit.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

GRID = Path(__file__).resolve().parent / "grid"
# The order the files are joined in: main.js (the data contract and the one `export default`) first, then each
# concern. All are plain top-level declarations in one module, so any order runs; this one reads top-down.
GRID_FILES = ("main.js", "labels.js", "colour.js", "controls.js", "tabs.js", "heads.js", "hover.js", "focus.js",
              "export.js", "lines.js")


@lru_cache(maxsize=1)
def grid_js() -> str:
    """The head grid as one ES module: the files of `grid/`, joined in GRID_FILES order."""
    return "\n".join(f"// ---- {name}\n" + (GRID / name).read_text() for name in GRID_FILES)


@lru_cache(maxsize=1)
def grid_css() -> str:
    """The head grid's styles (every class prefixed `mhv-`: the page mounts it without a shadow root)."""
    return (GRID / "grid.css").read_text()
