"""Trained vs untrained (kept for older `?view=` links): the Training view at the last saved step, with step 0 (the
seeded initialisation) drawn under it, same sentence."""
from __future__ import annotations

from mha_viz.app.context import ViewContext
from mha_viz.app.views.training import timeline


def render(ctx: ViewContext) -> None:
    timeline(ctx, versus_init=True)
