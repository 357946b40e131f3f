"""Independent references for adapter tests: transformers' own eager path, and a head zeroed by hand."""
import copy


def eager_copy(model):
    """A deep copy of an HFModel's transformers model with plain eager attention: none of our mechanism."""
    ref = copy.deepcopy(model._model)
    ref.set_attn_implementation("eager")
    return ref


def zero_head_hook(head: int, d_head: int):
    """A forward pre-hook for an attention output projection that zeroes one head's slice of its input."""

    def hook(module, args):
        (context,) = args  # (B, T, H * dh): heads side by side before the output projection
        context = context.clone()
        context[..., head * d_head:(head + 1) * d_head] = 0.0
        return (context,)

    return hook


def head_importance_loop(model, text: str, base_off=frozenset(), position: int = -1):
    """The measure of `head_importance`, one `Model.run` per head: the reference the batched map is tested on."""
    import torch

    from mha_viz.analysis import cosine_change, next_token_kl

    base = model.run(text, ablate=base_off)
    scores = torch.zeros(model.n_layers, model.n_heads)  # (L, H)
    for layer in range(model.n_layers):
        for head in range(model.n_heads):
            if (layer, head) in base_off:
                continue
            run = model.run(text, ablate=set(base_off) | {(layer, head)})
            if base.logits is not None:
                value = next_token_kl(base.logits, run.logits, position)
            else:
                value = 1.0 - cosine_change(base.output, run.output)
            scores[layer, head] = max(value, 0.0)
    return scores


def same_token_reference(att, ids):
    """The same-token score by loops over plain Python ints: for each query whose token occurred earlier, the
    attention mass on those earlier occurrences, averaged over such queries -> (L, H), NaN when none repeats."""
    import torch

    ids = [int(i) for i in ids]
    rows = []
    for q in range(len(ids)):
        earlier = [k for k in range(q) if ids[k] == ids[q]]
        if earlier:
            rows.append(att[..., q, earlier].sum(-1))  # (L, H)
    if not rows:
        return torch.full(att.shape[:-2], float("nan"))
    return torch.stack(rows).mean(0)  # (L, H)
