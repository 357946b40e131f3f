"""The census and circuits widgets: time from `mha_viz.show_census(census)` (and `show_circuits(circuits)`) being
called in a cell to the picture drawn in the browser, for tiny and MiniLM, in JupyterLab 4 (one `jupyter lab`
server on loopback, headless Debian Chromium; tests/notebook/jupyter_harness.py). The census and the circuits are
computed first, in an earlier cell: what is timed is the widget (the picture drawn in Python, the comm message, the
page inserting the SVG and the next frame after it).

Both ends are wall-clock times on this machine: `widget.t_show` (time.time() when show_census() began, in the
kernel) and the widget's `data-drawn-at` (Date.now() in the first animation frame after the picture is in the page).
Printed beside it: the kernel's share (show_census() returning), the picture's size, and the ratio MiniLM / tiny.

    python benchmarks/bench_notebook_maps.py [--reps 3] [--front-ends lab]
"""
from __future__ import annotations

import argparse

from _common import load_avg, machine, median, table, widget_timings

MODELS = ("tiny", "minilm")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--front-ends", default="lab")
    args = parser.parse_args()
    setup = ["import time, mha_viz, mha_viz.notebook.maps_widget\n"
             + "\n".join(f"m_{n} = mha_viz.load_model({n!r})\ncensus_{n} = mha_viz.head_census(m_{n})\n"
                         f"circuits_{n} = mha_viz.circuits(m_{n})" for n in MODELS)]
    order = [(kind, n) for _ in range(args.reps) for n in MODELS for kind in ("census", "circuits")]
    cells = list(setup)
    for i, (kind, n) in enumerate(order):
        cells.append(f"w{i} = mha_viz.show_{kind}({kind}_{n})\n"
                     f"print('T{i}', repr(w{i}.t_show), time.time() - w{i}.t_show, len(w{i}.picture))")
    print(machine(), "| load", load_avg())
    rows = []
    timings = widget_timings(cells, order, ".mhm", args.front_ends.split(","), "bench-maps", setup_timeout_s=900)
    for front_end, timed in timings.items():
        for kind in ("census", "circuits"):
            for n in MODELS:
                t = timed[(kind, n)]
                rows.append([front_end, f"show_{kind}", n, f"{median(t['drawn']):.0f}", f"{median(t['kernel']):.0f}",
                             f"{int(t['more'][-1][0]) / 1000:.0f} kB", " ".join(f"{x:.0f}" for x in t["drawn"])])
            ratio = median(timed[(kind, "minilm")]["drawn"]) / median(timed[(kind, "tiny")]["drawn"])
            rows.append([front_end, f"show_{kind}", "minilm / tiny", f"{ratio:.2f}x", "", "", ""])
    print(table(["front end", "call", "model", "call -> drawn, ms (median)", "in the kernel, ms", "picture",
                 "each (first is the kernel's first widget of its kind)"], rows))


if __name__ == "__main__":
    main()
