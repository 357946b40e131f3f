"""The view registry. A view is one file here with `render(ctx: ViewContext)`; adding one is that file plus
one line below. The names are the values of `?view=` in shared links: keep them stable."""
from __future__ import annotations

from typing import Callable

from mha_viz.app.context import ViewContext
from mha_viz.app.views import (all_layers, compare, effects, follow, inside, layer, notes, patching, rollout,
                               similarity, training, twins)
from mha_viz.app.views import census as census_view

VIEWS: dict[str, Callable[[ViewContext], None]] = {
    "Layer": layer.render,
    "All layers": all_layers.render,
    "Compare": compare.render,
    "Inside a head": inside.render,
    "Follow a token": follow.render,
    "Ablation effects": effects.render,
    "Patching": patching.render,
    "Similarity & scores": similarity.render,
    "Census": census_view.render,
    "Rollout & norms": rollout.render,
    "Training": training.render,
    "Trained vs untrained": twins.render,  # older links: the Training view, last step over step 0
    "Notes & export": notes.render,
}
