"""Measurements of attention, one module per kind. Most are pure functions on tensors; those marked "through a
Model" drive a model they are handed (`mha_viz.contract.Model`), never loading one:

    effects        how much the output moved (embedding cosine, per-token change, KL of predictions)
    continuations  two continuations of one prompt: where they part, the KL at each step
    distance       Jensen-Shannon between patterns, head-to-head distance, an order that groups similar heads
    scores         measured pattern scores per head on one input against uniform attention, and their wording
    rollout        attention rollout (Abnar & Zuidema 2020)
    norms          the value-weighted norm view (Kobayashi et al. 2020); re-exports the per-head slicing
    tokens         display transforms: hidden special tokens, merged word pieces
    inside         one head opened up: value sizes, its weighted sum, how the heads of a layer add up
    pairs          mean attention on ground-truth (query, key) pairs, pooled over texts, against uniform attention
    importance     head importance: each head ablated alone, batched through a Model
    patching       activation and attribution patching and direct effects per head, through a Model
    patch_kinds    exact patching of every kind of head of an encoder-decoder model, through a Model
    circuits       QK and OV maps, composition and copying scores from the weights; induction and previous-token
                   scores over repeated texts and the causal check, through a Model
    census         the head census's pure scorers and statistics (baselines, bootstrap intervals)
    census_inputs  the census's generated inputs, from word lists and a seed
    census_run     `head_census(model)`: the census run through a Model
    census_result  what a census is once made (`HeadCensus`, its config) and what is read from it (`seed_roles`)
    agreement      one input against the census: whether a head's reading here agrees with its census name
    written        a census set against the heads a program wrote
    twins          a written model and a learned twin of it, head by head
    _checks        the input checks the functions above share

No UI code. Every score is a measurement of where attention went; a head's pattern is learned, and a high score is
not a label of what it does. The names below are the ones the app and the notebook use most, re-exported.
"""
from mha_viz.analysis.distance import head_distance, js_divergence, pattern_shift, similarity_order
from mha_viz.analysis.effects import (
                                      cosine_change,
                                      kl_batch,
                                      next_token_kl,
                                      one_minus_cos_batch,
                                      token_change,
                                      topk_predictions,
)
from mha_viz.analysis.inside import HeadCombination, combine_heads, update_sizes, value_norms, weighted_values
from mha_viz.analysis.norms import norm_view
from mha_viz.analysis.rollout import rollout
from mha_viz.analysis.scores import (
                                      SCORE_NAMES,
                                      badge_caption,
                                      describe_reading,
                                      describe_score,
                                      pattern_scores,
                                      run_positions,
                                      run_scores,
                                      run_support,
                                      top_badges,
                                      uniform_baselines,
                                      uniform_pattern,
)
from mha_viz.analysis.tokens import hide_positions, merge_word_pieces, word_groups, word_labels
