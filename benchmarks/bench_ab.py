"""Ours now against ours at another commit, interleaved in one run: a head toggled off and on again after the page
is settled, and a new sentence timed on the page's own clock. Separates the two apps better than bench_bertviz's
table, where each toggle follows a new sentence and head_view's pages share the browser.

    python benchmarks/bench_ab.py --before 3cc4241 [--tokens 16,64,128] [--reps 8]
"""
from __future__ import annotations

import argparse

import _app as A
from _common import load_avg, machine, median, table
from bench_bertviz import OurApp, export, sized_sentence


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="the commit to compare with, e.g. 3cc4241")
    ap.add_argument("--tokens", default="16,64,128")
    ap.add_argument("--reps", type=int, default=8)
    args = ap.parse_args()
    from mha_viz.models.hf import load_minilm_hf

    print(f"# bench_ab | {machine()} | reps {args.reps} | tokens {args.tokens} | before {args.before}", flush=True)
    model = load_minilm_hf()
    times: dict[tuple, list[float]] = {}
    with A.chromium() as browser:
        apps = [OurApp(browser, "after"), OurApp(browser, f"before {args.before}", repo=export(args.before))]
        try:
            for n in [int(x) for x in args.tokens.split(",")]:
                for rep in range(args.reps):
                    word = A.MARKERS[rep % len(A.MARKERS)]
                    text = f"{sized_sentence(model, word, n)} {rep}"  # never seen before: no cached run
                    for app in apps:
                        ms = app.type_in_page(text, word)
                        times.setdefault((n, app.label, "new sentence, in-page (ms)"), []).append(ms)
                        head = f"L0 H{rep % 12}"
                        secs = app.toggle(head, True)
                        times.setdefault((n, app.label, "toggle a head off -> updated (s)"), []).append(secs)
                        app.toggle(head, False)
                print(f"[ab] {n} tokens done (load avg {load_avg()})", flush=True)
        finally:
            for app in apps:
                app.stop()
    rows = [[n, step, who, f"{median(v):.3f}", f"{min(v):.3f}", f"{max(v):.3f}"]
            for (n, who, step), v in sorted(times.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1]))]
    print(f"\nMiniLM, median of {args.reps}, load avg at end {load_avg()}")
    print(table(["tokens", "step", "who", "median", "min", "max"], rows))


if __name__ == "__main__":
    main()
