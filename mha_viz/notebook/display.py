"""How every mha-viz widget is displayed: the live widget, and beside it (image/svg+xml in the same output) its last
picture, for a notebook saved without its kernel or widget state (nbconvert's HTML, GitHub). Each widget's output
is displayed through a display handle, so every redraw updates that picture too: the saved notebook shows what the
page showed last, not what the cell first drew. Used by HeadGrid (widget.py) and the census and circuits widgets
(maps_widget.py). No anywidget import here: the widgets mix this into their anywidget classes.
"""
from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def esm(name: str) -> str:
    """A widget's ES module (anywidget `_esm`): common.js, what every widget's page shares, then the widget's own
    file (`name`, here). anywidget loads each module from its text alone, so they cannot import each other."""
    return (_HERE / "common.js").read_text() + "\n" + (_HERE / name).read_text()


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


class FallbackDisplay:
    """Mixed into an anywidget class that has `to_svg()` (its picture now) and `_plain()` (its text/plain)."""

    _handles: list
    _shown_at: int | None = None

    def _bundle(self) -> tuple[dict, dict]:
        data, metadata = super()._repr_mimebundle_()
        data = dict(data)
        data["text/plain"] = self._plain()
        # What a front end without the widget draws instead: the same picture, as SVG.
        data["image/svg+xml"] = self.to_svg()
        return data, metadata

    def _ipython_display_(self) -> None:
        shell = _shell()
        if shell is not None and self._shown_at == shell.execution_count:
            return  # displayed in this cell already (show...); this is the same widget as the cell's last value
        self._display()

    def display_once(self) -> None:
        """Display the widget now if running in IPython (what show() does), and not again as the cell's value."""
        shell = _shell()
        if shell is None:
            return
        self._shown_at = shell.execution_count
        self._display()

    def _display(self) -> None:
        from IPython.display import display

        data, metadata = self._bundle()
        self._handles.append(display(data, metadata=metadata, raw=True, display_id=True))

    def _fallback_ready(self) -> bool:
        return True

    def _update_fallback(self) -> None:
        if not getattr(self, "_handles", None) or not self._fallback_ready():
            return
        data, metadata = self._bundle()
        for handle in self._handles:
            handle.update(data, metadata=metadata, raw=True)
