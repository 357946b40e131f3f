"""Pure functions on attention tensors, one module per kind of measure:

    effects     how much the output moved (embedding cosine, per-token change, KL of predictions)
    distance    Jensen-Shannon between patterns, head-to-head distance, an order that groups similar heads
    scores      measured pattern scores per head against uniform attention, and their wording
    rollout     attention rollout (Abnar & Zuidema 2020)
    norms       the value-weighted norm view (Kobayashi et al. 2020); re-exports the per-head slicing
    tokens      display transforms: hidden special tokens, merged word pieces
    importance  head importance: each head ablated alone, batched through a Model
    inside      one head opened up: value sizes, its weighted sum, how the heads of a layer add up
    patching    activation and attribution patching and direct effects per head, through a Model

No UI code: every function takes tensors and returns tensors or plain values. Every score is a measurement of
where attention went on one input; a head's pattern is learned, and a high score is not a label of what it does.
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
from mha_viz.analysis.norms import norm_view, out_proj_per_head, repeat_kv, split_heads
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
