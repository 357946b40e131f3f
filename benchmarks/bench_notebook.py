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
import re
import sys
import tempfile
from pathlib import Path

from _common import load_avg, machine, median, table, text_of_tokens

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "notebook"))
from jupyter_harness import CHROMIUM, JupyterServer, Page, write_notebook  # noqa: E402

LENGTHS = (16, 128)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--front-ends", default="lab,notebook7")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads(N) in the kernel first (0: torch's default, as a user gets)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

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
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        root = Path(tmp) / "root"
        root.mkdir()
        server = JupyterServer(root, Path(tmp) / "jupyter.log")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-proxy-server"])
        try:
            for front_end in args.front_ends.split(","):
                name = f"bench-{front_end}.ipynb"
                write_notebook(root / name, cells)
                page = Page(browser, server)
                try:
                    page.open(front_end, name)
                    page.run_cell(0)
                    drawn = {n: [] for n in LENGTHS}
                    kernel = {n: [] for n in LENGTHS}
                    for i, n in enumerate(order):
                        page.run_cell(i + 1)
                        box = page.page.locator(".jp-Notebook .jp-Cell").nth(i + 1).locator(".mhw[data-drawn-at]")
                        box.wait_for(timeout=60000)
                        out = page.output_text(i + 1)
                        t_show, t_kernel = re.search(rf"T{i} ([\d.]+) ([\d.e-]+)", out).groups()
                        drawn[n].append(int(box.get_attribute("data-drawn-at")) - float(t_show) * 1000)
                        kernel[n].append(float(t_kernel) * 1000)
                    assert not page.outside, page.outside
                finally:
                    page.close()
                for n in LENGTHS:
                    rows.append([front_end, counts[n], f"{median(drawn[n]):.0f}", f"{median(kernel[n]):.0f}",
                                 " ".join(f"{x:.0f}" for x in drawn[n])])
                ratio = median(drawn[128]) / median(drawn[16])
                rows.append([front_end, "128 / 16", f"{ratio:.2f}x", "", ""])
        finally:
            browser.close()
            server.stop()
    print(table(["front end", "tokens", "show() -> drawn, ms (median)", "show() in the kernel, ms", "each"], rows))


if __name__ == "__main__":
    main()
