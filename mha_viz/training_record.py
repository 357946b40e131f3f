"""What a model's training left behind, measured: the types of the training record (`Model.training_evidence`).

Only the in-repo tiny model has one today (its loss log from `make train` and the probe file from `make probe`,
read by mha_viz.models.tiny.evidence); the Training view, the notes and the Circuits view read these types without
asking which model wrote them. A module of its own beside the contract (mha_viz/contract/), so the contract keeps
what every model shares; it imports nothing of the package.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepScores:
    """One saved training step measured on held-out inputs (the tiny model's `make probe`)."""

    step: int
    loss: float  # held-out next-token cross-entropy, nats
    agreement_accuracy: float  # share of agreement sentences where the agreeing verb form scores higher
    scores: dict[str, list[list[float]]]  # score name -> (L, H) as nested lists: each head's measured score
    baselines: dict[str, float]  # score name -> the same score under uniform attention
    # Whole-context relations (previous token, induction) per text length and position band, for the one head that
    # holds each best over all of them: {relation: {"head": (l, h), "min", "mean", "bands": {length: [score|None]}}}
    context: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TrainingEvidence:
    """What a model's training left behind, measured: the training loss log and each saved step's probe scores.

    `relations` names each score in words; `probe_config` the sizes of the probe sets (n_agreement, n_reference,
    ...); `causal` the last step's causal check as its producer wrote it, `causal_summary` its headline (the top
    head's effect next to the strongest other single head's), and `set_verdicts` for each set in
    `causal["sets"]` whether the top-k heads harm far more than k others."""

    log_steps: tuple[int, ...]
    log_loss: tuple[float, ...]
    per_step: tuple[StepScores, ...]  # () until the steps have been measured
    relations: dict[str, str]
    probe_config: dict
    causal: dict | None
    causal_summary: dict | None
    set_verdicts: tuple[bool, ...] = ()
    shipped: StepScores | None = None  # the shipped weights (float32) measured; the last step's are float16

    @property
    def steps(self) -> list[int]:
        return [s.step for s in self.per_step]

    @property
    def final(self) -> StepScores | None:
        """The shipped weights' scores when measured, else the last saved step's."""
        return self.shipped or (self.per_step[-1] if self.per_step else None)

    def at(self, step: int) -> StepScores | None:
        return next((s for s in self.per_step if s.step == step), None)
