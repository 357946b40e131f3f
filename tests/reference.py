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
