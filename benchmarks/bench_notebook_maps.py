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
import re
import sys
import tempfile
from pathlib import Path

from _common import load_avg, machine, median, table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "notebook"))
from jupyter_harness import CHROMIUM, JupyterServer, Page, write_notebook  # noqa: E402

MODELS = ("tiny", "minilm")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--front-ends", default="lab")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

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
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        root = Path(tmp) / "root"
        root.mkdir()
        server = JupyterServer(root, Path(tmp) / "jupyter.log")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-proxy-server"])
        try:
            for front_end in args.front_ends.split(","):
                name = f"bench-maps-{front_end}.ipynb"
                write_notebook(root / name, cells)
                page = Page(browser, server)
                try:
                    page.open(front_end, name)
                    page.run_cell(0, timeout_s=900)
                    drawn = {key: [] for key in set(order)}
                    kernel = {key: [] for key in set(order)}
                    size = {}
                    for i, key in enumerate(order):
                        page.run_cell(i + 1)
                        box = page.page.locator(".jp-Notebook .jp-Cell").nth(i + 1).locator(".mhm[data-drawn-at]")
                        box.wait_for(timeout=60000)
                        out = page.output_text(i + 1)
                        t_show, t_kernel, n_chars = re.search(rf"T{i} ([\d.]+) ([\d.e-]+) (\d+)", out).groups()
                        drawn[key].append(int(box.get_attribute("data-drawn-at")) - float(t_show) * 1000)
                        kernel[key].append(float(t_kernel) * 1000)
                        size[key] = int(n_chars)
                    assert not page.outside, page.outside
                finally:
                    page.close()
                for kind in ("census", "circuits"):
                    for n in MODELS:
                        key = (kind, n)
                        rows.append([front_end, f"show_{kind}", n, f"{median(drawn[key]):.0f}",
                                     f"{median(kernel[key]):.0f}", f"{size[key] / 1000:.0f} kB",
                                     " ".join(f"{x:.0f}" for x in drawn[key])])
                    ratio = median(drawn[(kind, "minilm")]) / median(drawn[(kind, "tiny")])
                    rows.append([front_end, f"show_{kind}", "minilm / tiny", f"{ratio:.2f}x", "", "", ""])
        finally:
            browser.close()
            server.stop()
    print(table(["front end", "call", "model", "call -> drawn, ms (median)", "in the kernel, ms", "picture",
                 "each (first is the kernel's first widget of its kind)"], rows))


if __name__ == "__main__":
    main()
