"""Tensors + tokens -> plotly figures. No streamlit here, so tests can read `fig.data` directly.

One module per area: colours (the scales and the heads' palette), tokens (how a token is labelled), layout (the
fast path, token axes, the square heatmap), heatmaps (one head, a row of heads, differences, vectors), overview
(all layers as one tiled heatmap), continuation (a written token's row in every head of a layer), head_maps (one
number per head; predictions), inside (one opened-up head), follow (one token through many heads), census, circuits (maps read from the weights), training (scores against
the step) and lesson (the Lesson's drawn mechanism: q, k and scores; the concatenation and the output projection).
Every figure is re-exported here, so callers write `plotting.head_figure(...)`.

Rendering notes (measured in benchmarks/, results in benchmarks/RESULTS.md): a figure with dozens of subplot
axes is slow to update, so heads side by side (Compare, the trained/untrained twins) are one figure per row and
the all-layers view is ONE tiled uint8 heatmap; the Layer view's grid is a browser component
(mha_viz/web/grid), not a figure. Values are sent as numpy arrays, never `.tolist()`, and figures are
built unvalidated.
"""
from __future__ import annotations

from mha_viz.plotting.census import (  # noqa: F401
    census_map,
    census_maps_side_by_side,
    census_scatter,
)
from mha_viz.plotting.circuits import (  # noqa: F401
    COMPOSITION_TITLES,
    causal_check_figure,
    composition_map_figure,
    difference_map_figure,
    singular_values_figure,
    top_tokens_figure,
    weight_map_figure,
)
from mha_viz.plotting.colours import (  # noqa: F401
    ATTN_SCALE,
    COMPOSITION_SCALE,
    DIFF_SCALE,
    HEAD_COLOURS,
    OFF_COLOUR,
    OFF_SCALE,
    TILE_SCALE,
    head_colour,
    sqrt_scale,
)
from mha_viz.plotting.continuation import step_rows_figure  # noqa: F401
from mha_viz.plotting.follow import (  # noqa: F401
    _CHAR_EM,
    FOLLOW_PLOT_PX,
    cell_words,
    follow_figure,
)
from mha_viz.plotting.head_maps import (  # noqa: F401
    layer_head_map,
    predictions_figure,
    signed_layer_head_map,
)
from mha_viz.plotting.heatmaps import (  # noqa: F401
    CLICKABLE_ROWS_UP_TO,
    diff_figure,
    head_figure,
    heads_row_figure,
    pattern_pick_figure,
    vectors_figure,
)
from mha_viz.plotting.inside import (  # noqa: F401
    heads_combine_figure,
    inside_steps_figure,
    weighted_sum_figure,
)
from mha_viz.plotting.layout import (  # noqa: F401
    COLORBAR_PX,
    FONT,
    NO_TEMPLATE,
    TICK_FONT_MIN,
    _label_room,
    _square_layout,
    tick_plan,
)
from mha_viz.plotting.overview import (  # noqa: F401
    MAX_TILE,
    overview_blocks,
    tiled_figure,
)
from mha_viz.plotting.tokens import (  # noqa: F401
    axis_labels,
    safe_label,
    token_text,
    visible_text,
)
from mha_viz.plotting.training import (  # noqa: F401
    circuits_timeline_figure,
    formation_figure,
    timeline_figure,
)
