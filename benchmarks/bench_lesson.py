"""How long each Lesson step takes to settle after Next, on the default lesson model (tiny), in a real browser.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_lesson.py --reps 3 --size 1000x800

One server on loopback. Walk 0 opens the Lesson on a fresh server (its first visitor: each lesson model's census and
the twins' comparison are made then) and is reported on its own. Then `--reps` walks, each in a fresh browser
context (a new session; the run cache is the server's, as for every visitor after the first). Per step, two
timings, each from the click until the expected content is drawn and Streamlit is idle (benchmarks/_app.Page.timed):

    Next     the Next click until the new step's heading and its question are drawn (its prediction not yet made)
    answer   the first choice picked until the step's figure and its "What you just saw" lines are drawn

Target: each step settles within 1.5 s of Next (median of the walks). The load average is printed with the table.
"""
from __future__ import annotations

import argparse
import sys
from urllib.parse import urlencode

from _app import Page, Server, chromium
from _common import REPO, load_avg, machine, median, table, verdict

sys.path.insert(0, str(REPO / "tests" / "e2e"))
from mha_viz.app.lesson.steps import STEPS  # noqa: E402

from harness import OPEN_PREDICTION, STEP_DRAWN  # noqa: E402

TARGET_S = 1.5
HEADING = """(n) => [...document.querySelectorAll('[data-testid="stMain"] h4')]
  .some(h => h.innerText.startsWith(`Step ${n} of`))"""
ASKED = f"""(n) => ({HEADING})(n) && ({STEP_DRAWN})()"""
# The reveal: the step's measured lines (the closing step: its three questions' answers).
SAW = """() => [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stMarkdownContainer"]')]
  .some(m => m.innerText.startsWith('What you just saw'))"""
# The questions still open (radios with no pick): a pick's run has ended when there are fewer.
OPEN_COUNT = f"""() => new Set([...document.querySelectorAll('{OPEN_PREDICTION}')]
  .map(o => o.closest('[data-testid="stRadio"]'))).size"""
FEWER = f"""(k) => ({OPEN_COUNT})() < k"""


def walk(page: Page, url: str) -> dict[int, tuple[float, float]]:
    """{step: (Next seconds, answer seconds)} for one walk from step 1 (step 1 opened by its link, not timed)."""
    page.page.set_default_timeout(60_000)
    out = {}
    page.page.goto(f"{url}/?{urlencode({'model': 'tiny', 'view': 'Lesson', 'lesson': 1})}",
                   wait_until="domcontentloaded")
    page.wait(ASKED, 1)
    page.wait_idle()
    for n in range(1, len(STEPS) + 1):
        if n > 1:
            t_next, _ = page.timed(lambda: page.page.get_by_role("button", name="Next →").last.click(), ASKED, n)
            server_next = page.last_server
        else:
            t_next = server_next = float("nan")
        t_answer = 0.0
        for _ in range(4):  # a step asks one question; the closing step three
            choices = page.page.locator(OPEN_PREDICTION)
            if choices.count() == 0:
                break
            before = page.page.evaluate(OPEN_COUNT)
            if STEPS[n - 1].text:
                t, _ = page.timed(lambda: choices.first.locator("div").last.click(), SAW)
            else:  # a check-yourself question: answered when its choices are no longer open
                t, _ = page.timed(lambda: choices.first.locator("div").last.click(), FEWER, before)
            t_answer += t
        out[n] = (t_next, t_answer)
        print(f"  step {n}: Next {t_next:.2f} s (server's last frame at {server_next:.2f} s), answer {t_answer:.2f} s",
              flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--size", default="1000x800")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))
    print(machine())
    server = Server("bench_lesson.log")
    walks = []
    try:
        with chromium() as browser:
            for rep in range(args.reps + 1):
                page = Page(browser, width, height)
                try:
                    walks.append(walk(page, server.url))
                finally:
                    page.close()
                print(f"walk {rep} done, load {load_avg()}", flush=True)
    finally:
        server.stop()
    first, rest = walks[0], walks[1:]
    rows = []
    for n, step in enumerate(STEPS, 1):
        nexts = [w[n][0] for w in rest]
        answers = [w[n][1] for w in rest]
        m = median(nexts)
        rows.append([f"{n}. {step.title}", "—" if n == 1 else f"{first[n][0]:.2f} s",
                     f"{first[n][1]:.2f} s", "—" if n == 1 else f"{m:.2f} s ({', '.join(f'{x:.2f}' for x in nexts)})",
                     f"{median(answers):.2f} s", "—" if n == 1 else verdict(m, TARGET_S)])
    print(f"\nLesson on tiny at {args.size}, {args.reps} walks after a first one on a fresh server; load {load_avg()}")
    print(table(["step", "first walk: Next", "first walk: answer", f"Next, median of {args.reps}",
                 f"answer, median of {args.reps}", f"Next <= {TARGET_S} s"], rows))


if __name__ == "__main__":
    main()
