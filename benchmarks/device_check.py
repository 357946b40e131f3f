"""One code path on the CPU and a GPU (issue 35 item 4): parity of a CUDA device against the CPU, bfloat16 against
float32, and what the app's heavy work costs on the device beside one bare forward pass.

    python benchmarks/device_check.py [--cpu-only] [--models smollm2,minilm] [--repeats 5] [--no-timing]

1. Parity. Each model is loaded three times by name (`mha_viz.load_model`, as the app loads it) under MHA_VIZ_DEVICE
   and MHA_VIZ_DTYPE: on the CPU in float32 (the reference), on the device in float32, and on the device in
   bfloat16. Four runs of the same text are compared with the reference: all heads on ("attention"), two heads
   switched off ("zero ablation", "mean ablation") and one head patched from a text one name apart ("patching").
   Float32 on the device must agree to <= 1e-4 (attention weights as they are; hidden states and logits relative
   to their largest value); bfloat16's differences are reported, and its attention must come back float32.
2. Timing, on the device in float32: a new sentence (`Model.run` of a sentence not run before), the exact head-
   importance map at 120 tokens (`head_importance`: every head switched off alone, cold), the head census
   (`mha_viz.head_census`, cold) and `mha_viz.circuits` (cold), each as a median of --repeats where cheap, and each
   beside one bare forward pass of the same text (the adapter's forward with no edit), with the ratio.

Without a CUDA device (or with --cpu-only) the device is the CPU: step 1's float32 comparison is skipped with a
message (it would compare the CPU with itself) and bfloat16 is still checked against float32, on the CPU; step 2
times the CPU. Exit status 1 when a parity check fails. On a 2-core CPU the default run takes about 12 minutes
(SmolLM2's exact map and census); `--models minilm --repeats 2` checks the whole path end to end in under a minute.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from _common import SENTENCE_30, WORDS, machine, median, table

TOLERANCE = 1e-4
NAMES = ("Anna", "Mary", "John", "Ben", "Tom", "Kate", "Paul", "Sara")


def load_on(name: str, device: str, dtype: str):
    """`name` loaded as the app loads it, with MHA_VIZ_DEVICE and MHA_VIZ_DTYPE set for this load."""
    from mha_viz import load_model
    from mha_viz.settings import settings

    os.environ["MHA_VIZ_DEVICE"], os.environ["MHA_VIZ_DTYPE"] = device, dtype
    settings.cache_clear()
    try:
        return load_model(name)
    finally:
        settings.cache_clear()


def weights_dtype(model) -> torch.dtype:
    for attr in ("_model", "encoder", "lm", "stack"):
        net = getattr(model, attr, None)
        if net is not None:
            return next(p for p in net.parameters() if p.is_floating_point()).dtype
    return torch.float32


def swapped(model, text: str) -> str:
    """`text` with its first name swapped for another of the same length in tokens (a patching source)."""
    n = model.token_count(text)
    for old in NAMES:
        if f" {old} " in f" {text} ":
            for new in NAMES:
                other = text.replace(old, new, 1)
                if new != old and model.token_count(other) == n:
                    return other
    raise SystemExit(f"no name swap keeps {model.name}'s token count of {text!r}")


def cases(model, text: str) -> list[tuple[str, dict]]:
    L, H = model.n_layers, model.n_heads
    two = {(L // 2, 0), (L - 1, H - 1)}
    return [("attention", {}), ("zero ablation", {"ablate": two}), ("mean ablation", {"ablate": two,
                                                                                      "ablation": "mean"}),
            ("patching", {"patch": {(L // 2, 1 % H)}, "source": swapped(model, text)})]


def gaps(ref, other, text: str) -> list[tuple[str, float, float, float | None, torch.dtype]]:
    """(case, attention's largest difference, hidden states' relative to their largest value, logits' likewise or
    None, the dtype attention came back in), for each case."""
    out = []
    for label, kwargs in cases(ref, text):
        a, b = ref.run(text, **kwargs), other.run(text, **kwargs)
        att = float((a.attentions - b.attentions).abs().max())
        hid = float((a.output - b.output).abs().max()) / float(a.output.abs().max())
        logit = None
        if a.logits is not None:
            logit = float((a.logits - b.logits).abs().max()) / float(a.logits.abs().max())
        out.append((label, att, hid, logit, b.attentions.dtype))
    return out


def parity(names: list[str], device: str) -> tuple[list[list], bool]:
    rows, ok = [], True
    for name in names:
        ref = load_on(name, "cpu", "float32")
        text = SENTENCE_30
        plans = [("float32", "float32")] if device == "cuda" else []
        plans.append(("bfloat16", "bfloat16"))
        for label, dtype in plans:
            other = load_on(name, device, dtype)
            where = f"{other.device.type} {weights_dtype(other)}".replace("torch.", "")
            for case, att, hid, logit, att_dtype in gaps(ref, other, text):
                if dtype == "float32":
                    good = att <= TOLERANCE and hid <= TOLERANCE and (logit is None or logit <= TOLERANCE)
                    verdict = "ok" if good else "FAILED"
                else:  # bfloat16: reported; the attention must come back float32
                    good = att_dtype == torch.float32
                    verdict = "reported" if good else "FAILED (attention not float32)"
                ok &= good
                rows.append([name, where, case, f"{att:.2e}", f"{hid:.2e}", "-" if logit is None else f"{logit:.2e}",
                             str(att_dtype).replace("torch.", ""), verdict])
            del other
        del ref
    return rows, ok


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return median(times)


def text_near(model, target: int, shift: int) -> str:
    """A text of about `target` tokens (the last word that keeps it at most `target`), its words rotated by
    `shift` so each shift is a text not read before."""
    words, text = [], ""
    i = shift
    while True:
        candidate = " ".join(words + [WORDS[i % len(WORDS)]])
        if model.token_count(candidate) > target:
            return text or candidate
        words.append(WORDS[i % len(WORDS)])
        text, i = candidate, i + 1


def bare(model, text: str):
    """One forward of `text` through the adapter with no edit and nothing recorded: the floor of every view."""
    from mha_viz.models.points import HeadEdit

    ids = torch.tensor([model.encoding(text).ids])  # (1, T)
    with torch.no_grad():
        return model.forward(ids, HeadEdit(), attentions=True)


def timing(names: list[str], device: str, repeats: int) -> list[list]:
    rows = []
    for name in names:
        rows += time_model(name, device, repeats)
        if device == "cuda":
            torch.cuda.empty_cache()  # the last model's blocks, before the next loads
    return rows


def time_model(name: str, device: str, repeats: int) -> list[list]:
    from mha_viz import circuits, head_census
    from mha_viz.analysis import circuits as C
    from mha_viz.analysis.importance import head_importance
    from mha_viz.models.schedule import budget

    model = load_on(name, device, "float32")
    dev = model.device
    room = budget(dev)
    print(f"[device_check] {name} on {dev}: batch budget {room.tokens} rows x tokens, {room.attention:,} attention "
          f"floats; a 120-token map takes {model.wave_rows(120)} rows a batch", flush=True)
    short = SENTENCE_30
    long = text_near(model, 120, 0)
    n_short, n_long = model.token_count(short), model.token_count(long)
    for _ in range(2):  # warm-up: first calls allocate
        bare(model, short), bare(model, long), model.run(short)
    fwd_short = timed(lambda: bare(model, short), dev, repeats)
    fwd_long = timed(lambda: bare(model, long), dev, repeats)
    sentences = iter([swapped_name(short, i) for i in range(repeats)])
    new = timed(lambda: model.run(next(sentences)), dev, repeats)
    n_maps = max(1, repeats // 2)
    texts = iter([text_near(model, 120, shift) for shift in range(1, n_maps + 1)])  # each read for the first time
    maps = timed(lambda: head_importance(model, next(texts)), dev, n_maps)
    census = timed(lambda: head_census(model), dev, 1)
    C.random_baselines.cache_clear()
    circ = timed(lambda: circuits(model), dev, 1)
    print(f"[device_check] {name}: timed", flush=True)
    at_long = f"{fwd_long * 1e3:.1f} ({n_long} tokens)"
    return [
        [name, str(dev), f"new sentence ({n_short} tokens)", f"{new * 1e3:.1f}", f"{fwd_short * 1e3:.1f}",
         f"{new / fwd_short:.1f}"],
        [name, str(dev), f"head-importance map, exact ({n_long} tokens)", f"{maps * 1e3:.0f}", at_long,
         f"{maps / fwd_long:.0f}"],
        [name, str(dev), "head census, cold", f"{census * 1e3:.0f}", at_long, f"{census / fwd_long:.0f}"],
        [name, str(dev), "circuits, cold", f"{circ * 1e3:.0f}", at_long, f"{circ / fwd_long:.0f}"],
    ]


def swapped_name(text: str, i: int) -> str:
    """A new sentence for each i: the first name of `text` replaced by the i-th of NAMES."""
    return text.replace("Anna", NAMES[i % len(NAMES)], 1) if i else text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-only", action="store_true", help="skip the CUDA part even where a GPU is present")
    ap.add_argument("--models", default="smollm2,minilm")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per cheap measurement (median)")
    ap.add_argument("--no-timing", action="store_true", help="parity only")
    args = ap.parse_args()
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    cuda = torch.cuda.is_available() and not args.cpu_only
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 parity means float32 products, not TF32's
    torch.backends.cudnn.allow_tf32 = False
    print(f"# device_check | {machine()} | torch {torch.__version__} | torch threads {torch.get_num_threads()}")
    if cuda:
        print(f"# device: {torch.cuda.get_device_name(0)}, bfloat16 "
              f"{'supported' if torch.cuda.is_bf16_supported() else 'NOT supported'}")
    else:
        why = "--cpu-only" if args.cpu_only else "torch sees no CUDA device here"
        print(f"# CUDA part skipped ({why}): the device is the CPU. Float32 device-vs-CPU parity is not checked (it "
              "would compare the CPU with itself); bfloat16 is checked against float32 on the CPU, and the timings "
              "are the CPU's.")
    device = "cuda" if cuda else "cpu"
    start = time.perf_counter()
    rows, ok = parity(names, device)
    print()
    print(f"Parity against the CPU in float32 (float32 on the device must be <= {TOLERANCE:g}; hidden states and "
          "logits relative to their largest value):")
    print(table(["model", "run on", "case", "attention, max abs", "hidden, max rel", "logits, max rel",
                 "attention dtype", "check"], rows))
    if not args.no_timing:
        rows = timing(names, device, max(1, args.repeats))
        print()
        print(f"Timing on {device} in float32 (median of {args.repeats} where cheap; census and circuits once, cold):")
        print(table(["model", "device", "what", "ms", "one bare forward, ms", "ratio"], rows))
    print(f"\n# {'all parity checks passed' if ok else 'PARITY FAILED'} in {time.perf_counter() - start:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
