"""The three kinds of attention of a model with cross-attention, as both hosts' grids show them: the encoder's
self-attention over the source, the decoder's self-attention over the target, and cross-attention (target tokens
as rows reading source tokens as columns), whose names are `mha_viz.contract.kinds`'. No streamlit, no
Jupyter here.

A grid shows one kind; its layers are numbered from 0 within the kind. The run's heads switched off are numbered
as the model takes them (`Model.run`'s `ablate`: encoder layers 0 .. L_enc - 1, decoder layers after them;
`ablate_cross`: decoder layers from 0); `grid_heads` and `model_head` translate between the two.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from mha_viz.contract import AttentionRun, Head, InputError, Model
from mha_viz.contract.kinds import ABOUT, CROSS, DECODER, ENCODER, KINDS, canonical  # noqa: F401  (hosts read them here)
from mha_viz.names import MAX_HEADS_IN_LINK, head_name, link_heads, parse_link_heads


def kinds(model: Model) -> tuple[str, ...]:
    """The kinds a grid can switch between: all three for a model with cross-attention, none (one stack) else."""
    return KINDS if model.has_cross_attention else ()


def check_kind(model: Model, kind: str) -> str:
    """`kind` as the page spells it ("cross", "CROSS" -> "Cross"), or an InputError that says which kinds there are:
    a model with one self-attention stack has none, and says so."""
    if not kinds(model):
        raise InputError(f"kind= picks one of an encoder-decoder model's kinds of attention ({', '.join(KINDS)}); "
                         f"{model.info.name} has one self-attention stack: leave kind out.")
    found = canonical(kind)
    if found is None:
        raise InputError(f"kind {kind!r} is not a kind of attention of {model.info.name}; its kinds are "
                         f"{', '.join(KINDS)} (in any case).")
    return found


@dataclass(frozen=True)
class KindView:
    """One kind of a run: `att` (L, H, Q, K), the keys' labels `keys` (len K) and the queries' `queries` (len Q,
    None where they are the keys)."""

    att: torch.Tensor
    keys: list[str]
    queries: list[str] | None


def view(run: AttentionRun, kind: str) -> KindView:
    """The attention of `kind` (in any case) in an encoder-decoder run, its raw tokens as labels."""
    kind = canonical(kind) or kind
    if kind == ENCODER:
        return KindView(run.attentions, list(run.tokens), None)  # (L_enc, H, S, S)
    if kind == DECODER:
        return KindView(run.decoder_attentions, list(run.target_tokens), None)  # (L_dec, H, T, T)
    if kind == CROSS:
        return KindView(run.cross_attentions, list(run.tokens), list(run.target_tokens))  # (L_dec, H, T, S)
    raise InputError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}.")


# Why a kind's heads carry no readings (the Layer grid's badges, the census): the measures relate a query's position
# to its keys' positions in one text.
NO_READINGS = {
    CROSS: "Cross-attention heads carry no readings: every measure (previous token, induction, first token, ...) "
           "relates a query's position to its keys' positions in one text, and a cross-attention head's queries are "
           "the target's tokens while its keys are the source's.",
}


def one_stack(run: AttentionRun, kind: str) -> tuple[AttentionRun, bool] | None:
    """`kind`'s self-attention as a run over one text, which the measures read, with whether it is causal: the
    encoder's over the source as it is (the model's own `causal`, False for these models), the decoder's over the
    target (causal); None for cross-attention (NO_READINGS says why)."""
    if kind == ENCODER:
        return run, False
    if kind == DECODER:
        return AttentionRun(tokens=list(run.target_tokens), attentions=run.decoder_attentions,  # (L_dec, H, T, T)
                            ablated=frozenset(run.ablated), output=run.output, token_ids=list(run.target_ids),
                            special=tuple(getattr(run, "target_special", ())), ablation=run.ablation), True
    if kind == CROSS:
        return None
    raise InputError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}.")


def offset(model: Model, kind: str) -> int:
    """Where `kind`'s layer 0 is in the model's `ablate` numbering (cross heads: in `ablate_cross`'s)."""
    return model.info.n_layers if kind == DECODER else 0


def n_layers(model: Model, kind: str) -> int:
    return model.info.n_layers if kind == ENCODER else model.decoder_layers()


def grid_heads(model: Model, kind: str, ablated, ablated_cross) -> frozenset[Head]:
    """The heads of `kind` among those off, in the grid's numbering (layers from 0 within the kind)."""
    if kind == CROSS:
        return frozenset((int(l), int(h)) for l, h in ablated_cross)
    start, stop = offset(model, kind), offset(model, kind) + n_layers(model, kind)
    return frozenset((int(l) - start, int(h)) for l, h in ablated if start <= l < stop)


def model_head(model: Model, kind: str, layer: int, head: int) -> tuple[bool, Head]:
    """A grid's head as the model takes it: (whether it is a cross-attention head, (layer, head))."""
    return kind == CROSS, (offset(model, kind) + int(layer), int(head))


def along_target(model: Model, base: AttentionRun, run: AttentionRun) -> list[dict]:
    """The decoder's next-token prediction at every target position, with all heads on (`base`) and now (`run`):
    [{"position", "token" (the decoder's input there), "before", "after" (the top token and its probability),
    "kl" (KL(all on || now), nats)}]; [] for a run without a target or logits."""
    if base.logits is None or run.logits is None or not getattr(base, "target_tokens", None):
        return []
    p = torch.log_softmax(base.logits.float(), -1)  # (T, V)
    q = torch.log_softmax(run.logits.float(), -1)  # (T, V)
    kl = (p.exp() * (p - q)).sum(-1)  # (T,)
    out = []
    for i, token in enumerate(base.target_tokens):
        b, a = int(p[i].argmax()), int(q[i].argmax())
        out.append({"position": i, "token": token, "kl": float(kl[i]),
                    "before": [model.decode(b), float(p[i, b].exp())],
                    "after": [model.decode(a), float(q[i, a].exp())]})
    return out


# -- one set of heads for every kind: the app's page keeps the heads off in one set (its link, its heads-off panel),
# self-attention heads numbered as `ablate` and then each cross-attention layer after the decoder's, at
# L_enc + L_dec + l.
def all_layers(model: Model) -> int:
    """How many layers the one set numbers: L_enc + 2 L_dec with cross-attention, n_layers without."""
    return model.info.n_layers + 2 * model.decoder_layers()


def set_offset(model: Model, kind: str) -> int:
    """Where `kind`'s layer 0 is in the one set."""
    return model.info.n_layers + model.decoder_layers() if kind == CROSS else offset(model, kind)


def split(model: Model, heads) -> tuple[frozenset[Head], frozenset[Head]]:
    """The one set as `Model.run` takes it: (ablate, ablate_cross)."""
    cut = model.info.n_layers + model.decoder_layers()
    heads = [(int(l), int(h)) for l, h in heads]
    return (frozenset(x for x in heads if x[0] < cut),
            frozenset((l - cut, h) for l, h in heads if l >= cut) if model.has_cross_attention else frozenset())


def kind_of(model: Model, layer: int) -> tuple[str, int]:
    """A layer of the one set -> (its kind, its layer within the kind); ("", layer) for a model with one stack."""
    if not model.has_cross_attention:
        return "", layer
    n_enc, n_dec = model.info.n_layers, model.decoder_layers()
    if layer < n_enc:
        return ENCODER, layer
    if layer < n_enc + n_dec:
        return DECODER, layer - n_enc
    return CROSS, layer - n_enc - n_dec


def set_head_name(model: Model, head: Head) -> str:
    """A head of the one set by name: "L1 H2" for a model with one stack, "Cross L1 H2" (its kind, its layer
    within the kind) with cross-attention."""
    kind, layer = kind_of(model, int(head[0]))
    name = head_name((layer, int(head[1])))
    return f"{kind} {name}" if kind else name


def set_link_heads(model: Model, heads) -> str:
    """The one set as a link carries it: "L0H3,L2H11" for a model with one stack; with cross-attention each head as
    the page names it ("Encoder L0 H3,Cross L0 H3"), not by its index in the one set."""
    if not model.has_cross_attention:
        return link_heads(heads)
    return ",".join(set_head_name(model, h) for h in sorted(heads))


_KINDED = re.compile(r"^\s*(encoder|decoder|cross)\b\s*(.*)$", re.IGNORECASE)


def parse_set_link_heads(model: Model, raw: str) -> tuple[list[Head], list[str]]:
    """A link's heads in the one set's numbering, plus the items that did not parse. "Cross L0 H3" (kind in any
    case, spaces optional) is cross-attention layer 0's head 3; a head without a kind ("L12H3") is read in the one
    set's numbering, as links before the kinds were written, so they open as they did. A kinded head past its
    kind's layers comes back as (-1, head): a head that does not exist, which the page counts as such."""
    if not model.has_cross_attention:
        return parse_link_heads(raw)
    heads, bad = [], []
    for item in raw.split(",")[:MAX_HEADS_IN_LINK]:
        match = _KINDED.match(item)
        if not match:
            plain, wrong = parse_link_heads(item)
            heads, bad = heads + plain, bad + wrong
            continue
        kind = canonical(match.group(1))
        parsed, wrong = parse_link_heads(match.group(2))
        if wrong or not parsed:
            bad.append(item[:20])
            continue
        layer, head = parsed[0]
        heads.append((set_offset(model, kind) + layer, head) if layer < n_layers(model, kind) else (-1, head))
    return heads, bad
