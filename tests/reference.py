"""Independent references for adapter tests: transformers' own eager path, and a head zeroed by hand."""
import copy


def eager_copy(model):
    """A deep copy of an HFModel's transformers model with plain eager attention: none of our mechanism. For the
    in-repo BERT encoder (models/bert), transformers' own BertModel loaded from the same folder."""
    if hasattr(model, "encoder"):
        import transformers

        return transformers.AutoModel.from_pretrained(str(model.folder), attn_implementation="eager").eval()
    ref = copy.deepcopy(model._model)
    ref.set_attn_implementation("eager")
    return ref


def hf_inputs(model, text: str) -> dict:
    """The inputs transformers' own tokenizer makes of `text` for `model`'s reference (see eager_copy)."""
    if hasattr(model, "encoder"):
        import transformers

        tok = transformers.AutoTokenizer.from_pretrained(str(model.folder))
        return dict(tok(text, return_tensors="pt", truncation=True, max_length=model.info.max_tokens))
    return model._encode(text)[0]


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


def same_token_reference(att, ids, added=()):
    """The registered `duplicate` ("same token earlier") score by loops over plain Python ints: for each query the
    text produced (not a tokenizer-added position) whose token occurred earlier, the attention mass on those earlier
    occurrences, averaged over such queries -> (L, H), NaN when none repeats."""
    import torch

    ids = [int(i) for i in ids]
    added = set(added)
    rows = []
    for q in range(len(ids)):
        earlier = [k for k in range(q) if ids[k] == ids[q] and q not in added and k not in added]
        if earlier:
            rows.append(att[..., q, earlier].sum(-1))  # (L, H)
    if not rows:
        return torch.full(att.shape[:-2], float("nan"))
    return torch.stack(rows).mean(0)  # (L, H)


def ordinary_positions(model, text: str) -> list[int]:
    """The positions of `text` that are not special tokens ([CLS], [SEP], <bos>, ...), found with transformers'
    own tokenizer (the tiny model: every position but its <bos> at 0), for the reference head means."""
    if hasattr(model, "lm"):
        return list(range(1, len(model.encode(text)[1])))
    import transformers

    folder = str(model.folder) if hasattr(model, "encoder") else model._model.name_or_path
    tok = transformers.AutoTokenizer.from_pretrained(folder) if hasattr(model, "encoder") else model._tokenizer
    ids = hf_inputs(model, text)["input_ids"][0].tolist()
    special = set(tok.all_special_ids)
    return [i for i, t in enumerate(ids) if t not in special] or list(range(len(ids)))


def reference_means(ref, model, texts) -> "torch.Tensor":  # noqa: F821
    """Each head's mean output over `texts` as mean ablation defines it (Model.head_means): over each text's
    ordinary positions, then the mean over texts (each text weighted equally) -> (L, H, dh), from the hooks."""
    import torch

    per_text = [ref.forward(t)[0][:, :, ordinary_positions(model, t)].mean(dim=2) for t in texts]  # (L, H, dh) each
    return torch.stack(per_text).mean(dim=0)  # (L, H, dh)


class HookedReference:
    """An independent copy of a model (transformers' plain eager attention, or a deep copy of the tiny stack)
    whose output projections get forward pre-hooks: they record each layer's input (B, T, H * dh), the heads'
    outputs side by side, and can overwrite chosen heads' slices of it. None of mha-viz's mechanism is used.
    """

    def __init__(self, model):
        import torch

        self.model = model
        self.d_head = None
        if hasattr(model, "lm"):  # the tiny model
            self.ref = copy.deepcopy(model.lm)
            self.projs = [block.attn.out for block in self.ref.blocks]
        else:
            self.ref = eager_copy(model)
            base = getattr(self.ref, "base_model", self.ref)
            if hasattr(base, "layers"):  # Llama-style
                self.projs = [layer.self_attn.o_proj for layer in base.layers]
            elif hasattr(base, "h"):  # GPT-2-style, a Conv1D storing its weight as (in, out)
                self.projs = [block.attn.c_proj for block in base.h]
            else:  # BERT-style
                self.projs = [layer.attention.output.dense for layer in base.encoder.layer]
        # The modules whose output holds each layer's values (B, T, H_kv * dh); GPT-2's and tiny's fuse [q; k; v].
        if hasattr(model, "lm"):
            self.value_mods, self.fused = [block.attn.qkv for block in self.ref.blocks], True
        else:
            base = getattr(self.ref, "base_model", self.ref)
            if hasattr(base, "layers"):
                self.value_mods, self.fused = [layer.self_attn.v_proj for layer in base.layers], False
            elif hasattr(base, "h"):
                self.value_mods, self.fused = [block.attn.c_attn for block in base.h], True
            else:
                self.value_mods, self.fused = [layer.attention.self.value for layer in base.encoder.layer], False
        proj = self.projs[0]
        width = proj.in_features if isinstance(proj, torch.nn.Linear) else proj.weight.shape[0]  # H * dh
        self.d_head = width // model.n_heads
        self._torch = torch

    def values(self, text: str, set_heads: dict | None = None) -> "torch.Tensor":  # noqa: F821
        """Every layer's value vectors (L, H, K, dh), shared key/value heads repeated per query head, recorded by
        forward hooks on the value projections while `set_heads` overwrites heads' outputs as in `forward`."""
        torch, dh, n_heads = self._torch, self.d_head, self.model.n_heads
        seen, handles = [], []

        def hook(module, args, out):
            v = out.chunk(3, dim=-1)[2] if self.fused else out  # (B, T, H_kv * dh)
            seen.append(v[0].view(v.shape[1], -1, dh).transpose(0, 1))  # (H_kv, T, dh)

        try:
            handles = [m.register_forward_hook(hook) for m in self.value_mods]
            self.forward(text, set_heads)
        finally:
            for handle in handles:
                handle.remove()
        return torch.stack([v.repeat_interleave(n_heads // v.shape[0], dim=0) for v in seen]).float()

    def forward(self, text: str, set_heads: dict | None = None):
        """-> (head outputs (L, H, T, dh), final tensor (T, V) logits for LMs, else (T, D) hidden states).
        `set_heads` maps (layer, head) to the value its output is overwritten with: (T, dh) or (dh,)."""
        torch, dh = self._torch, self.d_head
        set_heads = set_heads or {}
        seen, handles = [], []

        def hook_for(layer):
            def hook(module, args):
                (context,) = args  # (B, T, H * dh)
                context = context.clone()
                for (l, h), value in set_heads.items():
                    if l == layer:
                        context[..., h * dh:(h + 1) * dh] = value
                seen.append(context[0])
                return (context,)
            return hook

        try:
            for layer, proj in enumerate(self.projs):
                handles.append(proj.register_forward_pre_hook(hook_for(layer)))
            with torch.no_grad():
                if hasattr(self.model, "lm"):
                    _, ids, _ = self.model.encode(text)
                    logits, hidden, _ = self.ref(torch.tensor([ids]))
                    final = logits[0]
                else:
                    out = self.ref(**hf_inputs(self.model, text))
                    final = out.logits[0] if getattr(out, "logits", None) is not None else out.last_hidden_state[0]
        finally:
            for handle in handles:
                handle.remove()
        heads = torch.stack([c.view(c.shape[0], -1, dh).transpose(0, 1) for c in seen])  # (L, H, T, dh)
        return heads.float(), final.float()
