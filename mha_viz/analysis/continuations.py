"""Two continuations of one prompt set side by side: where they part, and how far apart the distributions they were
written from are at each step. Pure functions on token ids and logits; the continuations come from
`Model.generate` (mha_viz.contract.Continuation), one with every head on, one with some switched off."""
from __future__ import annotations

import torch


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first step (0-based) where two written sequences differ, a token each or one of them ended; None where
    they are the same."""
    for step, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return step
    return None if len(a) == len(b) else min(len(a), len(b))


def step_kl(logits_a: torch.Tensor, logits_b: torch.Tensor, temperature: float = 1.0) -> list[float]:
    """KL(p_a || p_b) in nats at each step both continuations wrote, p = softmax(logits / temperature):
    logits_a (P_a, V) and logits_b (P_b, V), row k the scores written token k was chosen from -> min(P_a, P_b)
    values. Before the first difference both read the same tokens, so a KL there is the heads' effect on the
    same context; after it each reads its own continuation (Kullback & Leibler 1951)."""
    if logits_a.ndim != 2 or logits_b.ndim != 2 or logits_a.shape[1] != logits_b.shape[1]:
        raise ValueError(f"logits must be (P, V) each with the same V; got {tuple(logits_a.shape)} and "
                         f"{tuple(logits_b.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be above 0; got {temperature}")
    n = min(logits_a.shape[0], logits_b.shape[0])
    log_a = torch.log_softmax(logits_a[:n].float() / temperature, dim=-1)  # (n, V)
    log_b = torch.log_softmax(logits_b[:n].float() / temperature, dim=-1)  # (n, V)
    kl = (log_a.exp() * (log_a - log_b)).sum(dim=-1).clamp_min(0.0)  # (n,)
    return [float(x) for x in kl]
