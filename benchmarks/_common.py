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
