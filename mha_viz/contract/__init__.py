"""The one data contract between every model adapter and every view.

Axis names, used in shape comments across the package:
    L = layer, H = head (query heads), Q = query position, K = key position,
    T = token position (Q == K == T for self-attention), D = d_model, V = vocabulary, B = batch.

A `Model` turns text into an `AttentionRun`:
    run.tokens      list[str]                      one display label per position, len T
    run.attentions  torch.float32 (L, H, Q, K)     each row sums to 1; causal models are lower-triangular
    run.ablated     frozenset[(layer, head)]       heads whose contribution was switched off in this run
    run.ablation    Ablation ("zero", "mean", ...) what "off" meant for the heads in `ablated` (a str subclass)
    run.patched     frozenset[(layer, head)]       heads whose output was taken from a run on another text
    run.output      torch.float32 (T, D)           final hidden states
    run.logits      torch.float32 (T, V) or None   where the model has an LM head

`Model.inside(text, layer, head)` opens one head up as a `HeadInside` (dh = one head's size, see its docstring).
`Model.run_many(texts, reduce)` runs many texts (in padded batches) and keeps only `reduce(i, run)` of each.

Everything is on the CPU in float32, so views never care which model produced it.

The contract is a package of six rooms, each importing only the ones listed before it:

    head_slices.py   per-head slices of a layer's projections (split_heads, repeat_kv, out_proj_per_head)
    records.py       the records above, `EncodedText`, the errors and the boundary checks
    kinds.py         the names of an encoder-decoder model's kinds of attention (Encoder, Decoder, Cross)
    capabilities.py  what only some models can do, each with its "not available" answer
    model.py         the `Model` interface: what every model answers
    ablation.py      the meanings of "off" (`Ablation`, one subclass each), `line_up`, `reference_texts`: each
                     computes what a switched-off head outputs through the `Model` interface alone

This file only re-exports their public names, since most of the package and its tests import them from here. The
implementation every adapter shares (run, inside, interventions) is written once in `mha_viz.models.interventions`.
"""
from mha_viz.contract.records import (  # noqa: I001  (records first: the other rooms import it)
    AttentionRun,
    Embeddings,
    Encoded,
    EncodedText,
    Head,
    HeadInside,
    HeadWeights,
    InputError,
    Lexicon,
    Metric,
    ModelInfo,
    ModelLoadError,
    R,
    Readout,
    UnavailableError,
    check_ablate,
    check_index,
    check_text,
    clean_text,
    head_keep_mask,
)
from mha_viz.contract.ablation import (
    ABLATIONS,
    Ablation,
    MeanAblation,
    ResampleAblation,
    ZeroAblation,
    check_ablation,
    line_up,
    reference_texts,
)
from mha_viz.contract.capabilities import Capabilities, ProgramCapabilities, TrainingCapability
from mha_viz.contract.model import Model

__all__ = [
    "ABLATIONS", "Ablation", "AttentionRun", "Capabilities", "Embeddings", "Encoded", "EncodedText", "Head",
    "HeadInside", "HeadWeights", "InputError", "Lexicon", "MeanAblation", "Metric", "Model", "ModelInfo",
    "ModelLoadError", "ProgramCapabilities", "R", "Readout", "ResampleAblation", "TrainingCapability",
    "UnavailableError", "ZeroAblation", "check_ablate", "check_ablation", "check_index", "check_text", "clean_text",
    "head_keep_mask", "line_up", "reference_texts",
]
