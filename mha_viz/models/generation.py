"""Writing a continuation: a causal model's next tokens, one at a time, every step's attention kept, and the heads
switched off while it writes by the same per-call `HeadEdit` a run is made with (models/points.py).

    prompt     one forward over the prompt: its attention (L, H, n, n), every layer's keys and values, and the
               scores of the first token to write
    a step     the token chosen (greedy, or drawn by a seeded torch.Generator) is fed alone, on the keys and values
               of every position before it (`HeadEdit.past`, a key/value cache: adapters whose `tails` is True);
               its attention row (L, H, 1, t + 1) and the scores of the next token come back, and its own keys and
               values join the cache. An adapter without `tails` (the tiny model, models with a sliding window)
               runs the whole sequence again at each step instead: the same numbers, more work.
    heads off  one keep mask and one replacement for every step, made once for the longest sequence the settings
               allow (`intervention` on the prompt with room reserved): position i takes the value it would take in
               one forward over the final sequence, so the prompt's and every written token's keys and values are
               those of the run with the heads off, and so is what is written.

Each step's attention row equals row t of one forward over the final sequence (prompt + written tokens), with the
same heads off: causal attention never looks ahead, and the cache holds exactly the keys and values that forward
computes (tests/models/test_generation.py checks it per family; the architecture matrix's `generate` column per
transformers architecture). Nothing is stored on the model: the cache lives for one call.

`Generation` is a part of `EditableModel` (models/interventions.py); it relies on the adapter's `forward`, `tails`
and `end_of_text`, and on the engine's `encode_text`. Axis letters as in mha_viz.contract; H_kv = key/value heads.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

import torch

from mha_viz.contract import (
    Ablation,
    AttentionRun,
    Capabilities,
    EncodedText,
    Head,
    InputError,
    UnavailableError,
    check_ablate,
)
from mha_viz.contract.records import Continuation, GenerationSettings
from mha_viz.models.edits import intervention
from mha_viz.models.points import HeadEdit


class Generation:
    """`cannot_write` and `generate` for the engine's one-text models (see the module docstring)."""

    def cannot_write(self) -> str | None:
        """None for a causal language model (a next-token head, no query sees a later key); else why not."""
        if self.info.kind == "causal-lm" and self.causal:
            return None
        return Capabilities.cannot_write(self)

    def generate(self, text: str | EncodedText, settings: GenerationSettings = GenerationSettings(),
                 ablate: Iterable[Head] = (), ablation: str = "zero",
                 reference: Iterable[str] | None = None) -> Continuation:
        """See `Model.generate`. Everything is checked before any forward runs: a model that cannot write, settings
        that are not `GenerationSettings`, more tokens than the model's context leaves after the prompt."""
        why = self.cannot_write()
        if why:
            raise UnavailableError(why)
        if not isinstance(settings, GenerationSettings):
            raise InputError("settings must be a GenerationSettings (tokens, sampling, temperature, seed); make one "
                             "with GenerationSettings.read(...) from typed values")
        text = self.encode_text(text)
        n, room = text.n_tokens, self.info.max_tokens - text.n_tokens
        if settings.tokens > room:
            cut = f" (it was cut to fit: {text.encoded.dropped} tokens dropped)" if text.encoded.dropped else ""
            raise InputError(f"{settings.tokens} tokens do not fit: the text is {n} tokens{cut} and "
                             f"{self.info.title} reads at most {self.info.max_tokens}, so at most {max(room, 0)} can "
                             "be written; ask for fewer or shorten the text.")
        ablate = check_ablate(ablate, self.n_layers, self.n_heads)
        ablation = Ablation.of(ablation)
        keep, replace = intervention(self, reserved(text, n + settings.tokens), ablate, ablation, reference)
        generator = torch.Generator().manual_seed(settings.seed) if settings.sampling else None
        ends = self.end_of_text()
        step = _cached if self.tails else _recomputed
        with torch.no_grad():
            rows, logits, hidden, state = step(self, torch.tensor([text.ids]), keep, replace, None)  # prompt
            written, stopped = [], "limit"
            for _ in range(settings.tokens):
                token = choose(logits[-1], settings, generator)
                written.append(token)
                more = step(self, torch.tensor([[token]]), keep, replace, state)  # the token read, its row made
                rows, logits, hidden, state = rows + more[0], logits + more[1], hidden + more[2], more[3]
                if token in ends:
                    stopped = "end"
                    break
        run = _assembled(self, text, written, rows, logits, hidden, ablate, ablation)
        return Continuation(run=run, n_prompt=n, settings=settings, stopped=stopped)


def reserved(text: EncodedText, total: int) -> EncodedText:
    """`text` with room for `total` positions: what a meaning of "off" is asked its replacement for, so a
    per-position one (resample) gives the written positions the values one forward over the final sequence takes
    there. The prompt's own text is kept (resample picks its reference text by it)."""
    n = text.n_tokens
    encoded = dataclasses.replace(text.encoded, ids=[*text.ids, *[0] * (total - n)],
                                  labels=[*text.encoded.labels, *[""] * (total - n)])
    return dataclasses.replace(text, encoded=encoded)


def choose(logits: torch.Tensor, settings: GenerationSettings, generator: torch.Generator | None) -> int:
    """logits (V,) -> the token to write: the most likely (greedy), or one drawn from softmax(logits / temperature)
    with `generator` (seeded once per continuation, so the same settings draw the same tokens)."""
    if not settings.sampling:
        return int(logits.argmax())
    probs = torch.softmax(logits.float() / settings.temperature, dim=-1)  # (V,)
    return int(torch.multinomial(probs, 1, generator=generator))


def _cut(replace: torch.Tensor | None, positions: int) -> torch.Tensor | None:
    """A replacement (1, L, H, T_max or 1, dh) for a forward whose last position is positions - 1."""
    if replace is None or replace.shape[3] == 1:
        return replace
    return replace[:, :, :, :positions]  # (1, L, H, positions, dh)


def _cached(model, ids: torch.Tensor, keep, replace, past):
    """One forward of ids (1, S) at positions offset.. after the keys and values of positions 0..offset-1 in
    `past` (None: the prompt, offset 0), with the heads off as keep and replace say -> ([attention (L, H, S,
    offset + S)], [the next token's logits (V,)], [hidden (S, D)], the cache with these positions' keys and values
    appended: per layer (1, H_kv, offset + S, dh) twice, as the layer's attention computed with them)."""
    offset = 0 if past is None else int(past[0][0].shape[-2])
    L = model.n_layers
    edit = HeadEdit(keep, _cut(replace, offset + ids.shape[1]), inspect=range(L), past=past,
                    logits_at=None if past is not None else [ids.shape[1] - 1])
    out = model.forward(ids.to(model.device), edit, attentions=True)
    att = out.attentions[0].float().cpu()  # (L, H, S, offset + S)
    cache = [(edit.seen[layer].k, edit.seen[layer].v) for layer in range(L)]  # (1, H_kv, offset + S, dh) each
    logits = out.logits[0, -1].float().cpu()  # (V,): the next token's scores
    return [att], [logits], [out.hidden[0].float().cpu()], cache  # hidden (S, D)


def _recomputed(model, ids: torch.Tensor, keep, replace, before):
    """As `_cached` for an adapter without a key/value cache: the whole sequence so far (`before`, ids (1, t))
    with ids appended runs again, and only its new positions are kept."""
    whole = ids if before is None else torch.cat([before, ids], dim=1)  # (1, t + S)
    T = whole.shape[1]
    edit = HeadEdit(keep, _cut(replace, T), logits_at=[T - 1])
    out = model.forward(whole.to(model.device), edit, attentions=True)
    S = ids.shape[1]
    att = out.attentions[0, :, :, T - S:].float().cpu()  # (L, H, S, T)
    logits = out.logits[0, -1].float().cpu()  # (V,)
    return [att], [logits], [out.hidden[0, T - S:].float().cpu()], whole  # hidden (S, D)


def _assembled(model, text: EncodedText, written: list[int], rows: list[torch.Tensor], logits: list[torch.Tensor],
               hidden: list[torch.Tensor], ablate: frozenset, ablation: Ablation) -> AttentionRun:
    """The steps as one run over the prompt and the written tokens: every position's row where it was read."""
    L, H = model.n_layers, model.n_heads
    T = text.n_tokens + len(written)
    attentions = torch.zeros(L, H, T, T)  # (L, H, Q, K): a causal row t holds keys 0..t
    at = 0
    for part in rows:  # (L, H, S, keys) each, in order of the positions they read
        S, keys = part.shape[2], part.shape[3]
        attentions[:, :, at:at + S, :keys] = part
        at += S
    return AttentionRun(
        tokens=[*text.encoded.labels, *(model.decode(i) for i in written)],
        attentions=attentions,  # (L, H, T, T)
        ablated=ablate,
        output=torch.cat(hidden),  # (T, D)
        logits=torch.stack(logits),  # (P, V): positions n - 1 .. T - 1
        token_ids=[*text.ids, *written],
        truncated=text.encoded.dropped,
        unknown=text.encoded.unknown,
        special=text.encoded.special,
        ablation=ablation,
        logits_at=tuple(range(text.n_tokens - 1, T)),
    )
