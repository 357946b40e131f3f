"""Circuits in the weights: each head's query/key (QK) and value/output (OV) maps, how heads of different layers
compose, and how much a head's OV map copies tokens. After Elhage et al. 2021, "A Mathematical Framework for
Transformer Circuits" (Transformer Circuits Thread, https://transformer-circuits.pub/2021/framework/index.html).

Row-vector convention, as the model contract's `HeadWeights` (q = x @ w_q + b_q): a head reads x (D,) and
    its QK map  W_QK = W_Q W_Kᵀ (D, D):  score(query x, key y) = x W_Q W_Kᵀ yᵀ (before the 1/sqrt(dh) scale)
    its OV map  W_OV = W_V W_O  (D, D):  what it writes for a key y = y W_V W_O (times its attention weight)
Both have rank <= dh and are kept as their factors; no D x D (or V x V) matrix is built for a score.

What these maps leave out, here and everywhere in this package (where ours differs from the paper's
attention-only models and from TransformerLens):
  * Norms are IGNORED, not folded. x is the input of the projections (a pre-LN model's normalised residual, BERT's
    block input); the LayerNorm/RMSNorm between an earlier head's output and a later head's projections is
    treated as the identity: its gain and (LayerNorm) centring are not folded into the weights, as TransformerLens
    does by default (`fold_ln`, `center_writing_weights`), and its division by the residual's size is dropped. That
    division is one number per token, which a composition score, normalised by both matrices' norms, would not see;
    the gain and the centring it would see. In BERT (post-LN) the attention output also passes an output
    LayerNorm and the MLP before the next layer reads it: ignored too.
  * Biases are left out of the maps (the paper's maps are the linear parts).
  * MLPs are left out: a composition score measures the direct path from one head's output to another's input.
  * Rotary models rotate q and k by position after the projection: W_Q W_Kᵀ is their map at relative offset 0.
  * What a model does to its projected queries, keys or values beyond the weights (a qk-norm; OLMo's clip_qkv,
    which clamps them, so the maps differ from the model where the clip acts) is left out too; the model declares
    it (`Model.weights_leave_out`) and `Circuits.left_out` carries it to the page.

The package holds three modules, each importing only the ones before it:

    weights    pure functions on stacked per-head weights: the factor algebra, composition and copying scores,
               their random baseline, one head's token and position maps
    model      through the model contract: `circuits(model)` (`Circuits`), and the causal check that runs the model
    training   over training: the previous-token -> induction path step by step, and its words

This file only re-exports their public names, so `analysis.circuits.<name>` keeps one address.

Axis letters: L layer, H head, D d_model, dh head width, V vocabulary, P position; N = L*H heads, layer-major.
"""
from mha_viz.analysis.circuits.model import (
    CausalCheck,
    Circuits,
    causal_check,
    check_same_shape,
    circuits,
    head_weights,
    induction_and_previous,
    left_out_words,
    repeated_texts,
)
from mha_viz.analysis.circuits.training import (
    RISE_STARTS,
    Formation,
    describe_formation,
    formation,
    induction_path,
    measured_formation,
)
from mha_viz.analysis.circuits.weights import (
    GRAM_STRIP,
    MODES,
    PAIR_COLUMNS,
    Baseline,
    composition_scores,
    copying_scores,
    effective_rank,
    factored_norm,
    factored_singular_values,
    head_factors,
    offset_profile,
    ov_token_map,
    qk_position_map,
    qk_token_map,
    r_factor,
    random_baselines,
)
