"""The registry of per-head measures: every score the page, the census, the circuits and training views, the
notebook and the exports show for a head is declared here once, with its function, its uniform-attention baseline,
which end is notable, and its words (a short label, one sentence of meaning, the paper it comes from and where ours
differs). Everything that shows a per-head score reads it from here, so one name is one computation.

    from mha_viz import measures
    m = measures.get("previous")                  # or measures.REGISTRY["previous"]; iterate REGISTRY to walk them
    value, uniform = m.measure(att, Positions.of(tokens, token_ids, added, causal))   # (L, H), float

The package holds three modules, each importing only the ones before it:

    positions  what a measure reads besides the attention (`Positions`, the key masks, the uniform reference)
    scoring    the scoring functions the entries are written with, and the fixed-offset table
    registry   `Measure`, every entry registered once (`REGISTRY`), and the functions that read it (`get`, ...)

This file only re-exports their public names, so `measures.get`, `measures.Positions` and the rest keep one
address. Adding a measure is one `_register(Measure(...))` in registry.py plus its test: the census map, the badges
(`badge=True`), the Similarity table and the notebook pick it up from there.

The package imports nothing of mha_viz but itself (it sits below analysis/, which builds on it), so the models' own
probes, analysis, plotting, the app and the notebook may all read it.

Axis letters: L layer, H head, Q query, K key, T token. Attention is (L, H, Q, K) probabilities.
"""
from mha_viz.measures.positions import (
    CONTINUATION,
    NEARBY_WINDOW,
    START_MARKERS,
    SUPPORT_FLOOR,
    TOO_FEW,
    Pair,
    Positions,
    allowed_keys,
    is_punctuation,
    nearby_mask,
    uniform_pattern,
)
from mha_viz.measures.registry import (
    BADGES,
    INPUTS,
    ONE_INPUT,
    REGISTRY,
    RELATIONS,
    TEXT_SUFFIX,
    Measure,
    census_scores,
    get,
    markdown_table,
    of_score,
    queries_words,
    score_label,
    score_name,
    score_words,
)
from mha_viz.measures.scoring import (
    OFFSET_MAX,
    best_offsets,
    dependency_candidates,
    offset_table,
    offset_words,
    offsets,
)

__all__ = [
    "BADGES", "CONTINUATION", "INPUTS", "NEARBY_WINDOW", "OFFSET_MAX", "ONE_INPUT", "REGISTRY", "RELATIONS",
    "START_MARKERS", "SUPPORT_FLOOR", "TEXT_SUFFIX", "TOO_FEW", "Measure", "Pair", "Positions", "allowed_keys",
    "best_offsets", "census_scores", "dependency_candidates", "get", "is_punctuation", "markdown_table",
    "nearby_mask", "of_score", "offset_table", "offset_words", "offsets", "queries_words", "score_label",
    "score_name", "score_words", "uniform_pattern",
]
