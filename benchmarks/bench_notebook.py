"""The notebook widget: time from `mha_viz.show(minilm, text)` being called in a cell to the grid drawn in the
browser, at 16 and 128 tokens, in JupyterLab 4 and Notebook 7 (one `jupyter lab` server on loopback, headless
Debian Chromium; tests/notebook/jupyter_harness.py).

Both ends are wall-clock times on this machine: `widget.t_show` (time.time() when show() began, in the kernel) and
the widget's `data-drawn-at` (Date.now() after head_grid.js drew the layer, in the page). Between them: the run of
the model, the payload (scores, codes, deflate), the comm message, the import of head_grid.js, inflate and draw.
Printed beside it: the kernel's share (show() returning), and the ratio of 128 to 16 tokens.

    python benchmarks/bench_notebook.py [--reps 3] [--front-ends lab,notebook7] [--threads 1]
"""
from __future__ import annotations

import argparse

from _common import load_avg, machine, median, table, text_of_tokens, widget_timings

LENGTHS = (16, 128)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--front-ends", default="lab,notebook7")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads(N) in the kernel first (0: torch's default, as a user gets)")
    args = parser.parse_args()
    import mha_viz

    model = mha_viz.load_model("minilm")
    texts = {n: text_of_tokens(model.token_count, n) for n in LENGTHS}
    counts = {n: model.token_count(t) for n, t in texts.items()}
    threads = f"import torch\ntorch.set_num_threads({args.threads})\n" if args.threads else ""
    cells = [threads + "import time, mha_viz\nm = mha_viz.load_model('minilm')\nm.run('warm up')"]
    order = [n for _ in range(args.reps) for n in LENGTHS]
    for i, n in enumerate(order):
        cells.append(f"t = time.time()\nw{i} = mha_viz.show(m, {texts[n]!r})\n"
                     f"print('T{i}', repr(w{i}.t_show), time.time() - w{i}.t_show)")
    print(machine(), "| load", load_avg())
    print(f"MiniLM, tokens: {counts}, {args.reps} reps each, interleaved, kernel torch threads: "
          f"{args.threads or 'default'}")
    rows = []
    for front_end, timed in widget_timings(cells, order, ".mhw", args.front_ends.split(","), "bench").items():
        for n in LENGTHS:
            rows.append([front_end, counts[n], f"{median(timed[n]['drawn']):.0f}",
                         f"{median(timed[n]['kernel']):.0f}", " ".join(f"{x:.0f}" for x in timed[n]["drawn"])])
        ratio = median(timed[128]["drawn"]) / median(timed[16]["drawn"])
        rows.append([front_end, "128 / 16", f"{ratio:.2f}x", "", ""])
    print(table(["front end", "tokens", "show() -> drawn, ms (median)", "show() in the kernel, ms", "each"], rows))


if __name__ == "__main__":
    main()
