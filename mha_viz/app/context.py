"""`ViewContext`: everything a view may read, built once per run of the page."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from mha_viz.contract import AttentionRun, Head, Model


@dataclass(frozen=True)
class ViewContext:
    model: Model
    name: str  # what the model was loaded as (the registry name, a hub id or a folder)
    text: str
    layer: int  # the layer picked in the sidebar
    base: AttentionRun  # every head on
    run: AttentionRun  # with `heads_off` switched off as `ablation` says (== base when none is)
    tokens: list[str]  # display labels after the display options (hidden specials, merged words)
    att: torch.Tensor  # (L, H, Q', K') the run's attention after the display options
    heads_off: frozenset[Head]
    hide_special: bool
    merge: bool
    n_cols: int  # heatmaps per row
    shared_scale: bool  # True: every heatmap on 0-1; False: each head's own maximum
    ablation: str = "zero"  # what "off" means for `heads_off`: "zero" or "mean" (over the model's examples)
    # The Layer grid's element where the page sent it while the run was still computing (views/layer.early_grid):
    # its data; the view then sends the rest of the run in the element after it. None: the view sends it all.
    early: dict | None = None
