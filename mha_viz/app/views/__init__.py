"""The view registry. A view is one file here with `render(ctx: ViewContext)`; adding one is that file plus
one line below. The names are the values of `?view=` in shared links: keep them stable.

`GROUPS` places views in the page's navigation by what a visitor wants to do; a registered view it does not name
appears under "More", so a new view needs no second line. `HIDDEN` views open from old links only."""
from __future__ import annotations

from typing import Callable

from mha_viz.app.context import ViewContext
from mha_viz.app.views import (
    all_layers,
    circuits,
    compare,
    effects,
    follow,
    inside,
    layer,
    lesson,
    notes,
    patching,
    rollout,
    similarity,
    trained_vs_untrained,
    training,
)
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
    "Circuits": circuits.render,
    "Training": training.render,
    "Trained vs untrained": trained_vs_untrained.render,  # older links: the Training view, last step over step 0
    "Notes & export": notes.render,
    # Registered last so a plain visit still opens the Layer view (the first name); first in the navigation.
    "Lesson": lesson.render,
}

GROUPS: dict[str, list[str]] = {
    "Start": ["Lesson"],
    "Look": ["Layer", "All layers", "Compare", "Follow a token", "Similarity & scores"],
    "Open up": ["Inside a head", "Rollout & norms"],
    "Intervene": ["Ablation effects", "Patching"],
    "In general": ["Census", "Circuits"],
    "Learn": ["Training", "Notes & export"],
}
HIDDEN = {"Trained vs untrained"}
# Views about the model in general (its weights, generated inputs, its training) and the Lesson (its own inputs
# and models), not this sentence's run: the page shows neither the sentence's token strip nor the heads-off summary
# and effect panel above or below them.
NOT_ABOUT_THIS_RUN = {"Lesson", "Census", "Circuits", "Training", "Trained vs untrained", "Notes & export"}


def navigation() -> dict[str, list[str]]:
    """GROUPS with every registered view placed once (unnamed ones under "More") and unknown names dropped."""
    named = {v for names in GROUPS.values() for v in names}
    groups = {label: [v for v in names if v in VIEWS] for label, names in GROUPS.items()}
    more = [v for v in VIEWS if v not in named and v not in HIDDEN]
    if more:
        groups["More"] = more
    return {label: names for label, names in groups.items() if names}
