"""The server's warm-up (page.warm_up, started beside the server by app.py) loads the default model and runs its
sentence, then waits for the first page's grid before making the saved figures' font: subsetting is pure Python
that would hold the GIL while that page measures its badges and encodes its grid."""
from __future__ import annotations

import threading

from mha_viz.app import page
from mha_viz.app.components import figure_font
from mha_viz.app.views import layer


def test_the_font_waits_for_the_first_grid(monkeypatch):
    ran, warmed = [], threading.Event()
    monkeypatch.setattr(page, "get_run", lambda *args, **kwargs: ran.append(kwargs.get("logits_at")))
    monkeypatch.setattr(figure_font, "warm", warmed.set)
    was_set = layer.FIRST_GRID.is_set()
    layer.FIRST_GRID.clear()
    try:
        thread = threading.Thread(target=page.warm_up, daemon=True)
        thread.start()
        assert not warmed.wait(0.5), "the font was made before any page drew its grid"
        assert len(ran) == 1  # the default model's run came first, with the Layer view's logits only: the
        # default model (an encoder) has no LM head, so none (effect_panel.logits_at names no prediction position)
        model = page.get_model(next(iter(page.BUILTIN)))
        assert ran[0] == page.off_panel.logits_at(model, model.encode_text(page.DEFAULT_TEXT), "Layer")
        layer.FIRST_GRID.set()
        assert warmed.wait(10), "the font was not made once the first grid was drawn"
        thread.join(10)
    finally:
        if was_set:
            layer.FIRST_GRID.set()
