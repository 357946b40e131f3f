"""Shared helpers for the benchmarks: machine line, sentences of a given token length, tables, medians.

Every benchmark prints ratios measured in ONE run, interleaved, because this 2-core machine is shared and its
load moves absolute times around; the ratio of two things measured side by side is what the targets are about.
"""
from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "out"  # gitignored: npm files, logs, html
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Plain words that are one token in both WordPiece (MiniLM) and SmolLM2's BPE (with a leading space), mostly.
WORDS = ("the cat sat on the mat while Anna gave the old keys to Ben because the table was near the door and "
         "every bird in the small garden sang a song about rain wind and the long road home").split()
SENTENCE_30 = "The keys to the old cabinet are on the table, so Anna gave the keys to Ben."  # the app's default


def machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{time.strftime('%Y-%m-%d %H:%M %Z')} | nproc {os.cpu_count()} | {cpu} | load avg {load}"


def load_avg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def text_of_tokens(count_tokens, target: int) -> str:
    """A sentence whose token count (by `count_tokens(text)`, specials included) is as close to `target` as we get."""
    words: list[str] = []
    i = 0
    text = ""
    while True:
        candidate = " ".join(words + [WORDS[i % len(WORDS)]])
        if count_tokens(candidate) > target:
            return text or candidate
        words.append(WORDS[i % len(WORDS)])
        text = candidate
        i += 1


def median(xs) -> float:
    return statistics.median(xs)


def table(headers: list[str], rows: list[list]) -> str:
    """A GitHub-markdown table, so it can be pasted into RESULTS.md as printed."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    def line(r):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"

    return "\n".join([line(headers), "| " + " | ".join("-" * w for w in widths) + " |"] + [line(r) for r in cells])


def verdict(value: float, target: float, lower_is_better: bool = True) -> str:
    ok = value <= target if lower_is_better else value >= target
    return "met" if ok else "MISSED"


def widget_timings(cells: list[str], keys: list, box: str, front_ends: list[str], name: str,
                   setup_timeout_s: float = 180) -> dict[str, dict]:
    """Run a notebook in each front end ("lab", "notebook7") of one `jupyter lab` server on loopback, in headless
    Debian Chromium (tests/notebook/jupyter_harness.py), and time its widgets from the call to drawn in the page.

    `cells[0]` is the setup, run first and not timed. Each later cell `i + 1` shows one widget and prints
    `T{i} <widget.t_show> <seconds the call took in the kernel> [more fields]`; the widget's element matching `box`
    (".mhw", ".mhm") gets `data-drawn-at` (Date.now()) once drawn. `keys[i]` says what cell `i + 1` measures (its
    repetitions share a key). -> {front end: {key: {"drawn": [call -> drawn, ms], "kernel": [the call in the
    kernel, ms], "more": [more fields]}}}, each list in the cells' order. Both ends are wall-clock times here."""
    import re
    import tempfile

    from playwright.sync_api import sync_playwright

    sys.path.insert(0, str(REPO / "tests" / "notebook"))
    from jupyter_harness import CHROMIUM, JupyterServer, Page, write_notebook

    out = {}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        root = Path(tmp) / "root"
        root.mkdir()
        server = JupyterServer(root, Path(tmp) / "jupyter.log")
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-proxy-server"])
        try:
            for front_end in front_ends:
                notebook = f"{name}-{front_end}.ipynb"
                write_notebook(root / notebook, cells)
                page = Page(browser, server)
                try:
                    page.open(front_end, notebook)
                    page.run_cell(0, timeout_s=setup_timeout_s)
                    timed = {key: {"drawn": [], "kernel": [], "more": []} for key in keys}
                    for i, key in enumerate(keys):
                        page.run_cell(i + 1)
                        drawn = page.page.locator(".jp-Notebook .jp-Cell").nth(i + 1).locator(f"{box}[data-drawn-at]")
                        drawn.wait_for(timeout=60000)
                        t_show, t_kernel, more = re.search(rf"T{i} ([\d.]+) ([\d.e-]+)(.*)",
                                                           page.output_text(i + 1)).groups()
                        timed[key]["drawn"].append(int(drawn.get_attribute("data-drawn-at")) - float(t_show) * 1000)
                        timed[key]["kernel"].append(float(t_kernel) * 1000)
                        timed[key]["more"].append(more.split())
                    assert not page.outside, page.outside
                finally:
                    page.close()
                out[front_end] = timed
        finally:
            browser.close()
            server.stop()
    return out
