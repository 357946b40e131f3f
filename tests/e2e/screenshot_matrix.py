"""The screenshot matrix: every view x model x text length x window size, full-page, in headless
Chromium, for a person to look at as a newcomer would. Not a test: it asserts nothing, it writes pictures and a
list of what each page showed (exceptions, error and warning boxes, `nan`, JS errors) to `--out`.

    PYTHONPATH=. /work/main/.venv/bin/python tests/e2e/screenshot_matrix.py --out /tmp/shots
    ... --sizes 1600x1000 --models minilm --views Layer,Compare --lengths short

One server, one browser; each shot in its own browser context (a fresh session, as a newcomer meets the page),
closed after use; the server is stopped by its PID at the end. Views about the model in general (Census, Circuits,
Training, ...) do not read the sentence: they are taken with the short text only.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from mha_viz.app.views import NOT_ABOUT_THIS_RUN, VIEWS  # noqa: E402

from harness import IDLE, Server, chromium, new_page, settle  # noqa: E402

# Short (16-20 tokens) and long (~120 tokens) texts; the causal LMs' short one is an IOI-style pair of names, so the
# Patching view has names to swap. tiny knows only its corpus's lowercase words and reads at most 64 tokens: its
# long text is its own examples, one after another, past that limit, to see what the page says.
TEXTS = {
    "minilm": {
        "short": "The keys to the old cabinet were on the table, so she took them.",
        "long": ("When Mary and John went to the store after a long day at work, John gave a small bottle of milk "
                 "to Mary. The weather had been cold all week, and the streets near the old market were still wet "
                 "from the rain that fell during the night. Inside, the shop smelled of fresh bread and coffee, and "
                 "a radio in the corner played a song that neither of them knew. They walked slowly between the "
                 "shelves, talking about their plans for the summer, the friends they had not seen in years, and "
                 "the house by the lake that they hoped to rent again before the end of August."),
    },
    "tiny": {
        "short": "anna berg went to the market . tom lind saw anna berg at the park .",
        "long": ("mia frost and leo hart walked to the river . later leo hart found the keys . mia frost gave leo "
                 "hart a red cup . anna berg said : red lamp river cup . then tom lind said : red lamp river cup . "
                 "the old dog near the tall trees is happy . once upon a time there was a little house . at the "
                 "end of the day we went home ."),
    },
}
TEXTS["smollm2"] = {
    "short": "When Mary and John went to the store, John gave a drink to Mary.",
    "long": TEXTS["minilm"]["long"],
}

# Done: idle (harness.IDLE) with the main column's content and height unchanged over a few polls.
SHAPE = """() => { const m = document.querySelector('[data-testid="stMain"]');
  return m ? [m.querySelectorAll('*').length, m.scrollHeight].join('x') : ''; }"""
PROBLEMS = """() => {
  const pick = sel => [...document.querySelectorAll(sel)].map(e => e.innerText.slice(0, 300));
  const text = document.querySelector('[data-testid="stMain"]')?.innerText || '';
  return {exceptions: pick('[data-testid="stException"]'), errors: pick('[data-testid="stAlertContentError"]'),
          warnings: pick('[data-testid="stAlertContentWarning"]'),
          nan: (text.match(/.{0,40}\\b(nan|NaN|inf)\\b.{0,40}/g) || []).slice(0, 5)};
}"""
FULL_HEIGHT = """() => Math.max(...['stMain', 'stAppViewContainer', 'stSidebarContent']
  .map(id => document.querySelector(`[data-testid="${id}"]`)).filter(Boolean).map(el => el.scrollHeight),
  document.documentElement.scrollHeight)"""


def settled(page, timeout_s: float = 240.0, quiet_polls: int = 4) -> bool:
    """Wait until Streamlit is idle and the main column stops changing; False on timeout."""
    end = time.monotonic() + timeout_s
    last, same = None, 0
    while time.monotonic() < end:
        shape = page.evaluate(SHAPE) if page.evaluate(IDLE) else None
        same = same + 1 if shape and shape == last else 0
        if same >= quiet_polls:
            return True
        last = shape
        page.wait_for_timeout(500)
    return False


def shoot(browser, url: str, out: Path, model: str, view: str, length: str, size: tuple[int, int]) -> dict:
    width, height = size
    name = f"{model}_{view.replace(' ', '-').replace('&', 'and')}_{length}_{width}x{height}"
    query = urlencode({"model": model, "view": view, "text": TEXTS[model][length]})
    context, page = new_page(browser, width, height)
    t0 = time.monotonic()
    try:
        page.goto(f"{url}/?{query}", wait_until="domcontentloaded")
        page.wait_for_selector('[data-testid="stMain"]')
        ok = settled(page)
        settle(page)
        page.screenshot(path=str(out / f"{name}_first.png"))  # the first screen, as the window shows it
        full = page.evaluate(FULL_HEIGHT)
        page.set_viewport_size({"width": width, "height": min(int(full) + 40, 12_000)})
        settled(page, timeout_s=60)
        settle(page)
        page.screenshot(path=str(out / f"{name}.png"), full_page=True)
        found = page.evaluate(PROBLEMS)
        return {"shot": name, "settled": ok, "seconds": round(time.monotonic() - t0, 1), "height": full,
                "js_errors": page.js_errors[:5], **found}
    except Exception as err:  # one view failing to load must not lose the rest of the matrix
        return {"shot": name, "failed": f"{type(err).__name__}: {str(err).splitlines()[0]}",
                "seconds": round(time.monotonic() - t0, 1)}
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="minilm,smollm2,tiny")
    parser.add_argument("--views", default=",".join(VIEWS), help="comma-separated names from views/__init__.py")
    parser.add_argument("--lengths", default="short,long")
    parser.add_argument("--sizes", default="1600x1000,1000x800")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    views = [v for v in args.views.split(",") if v]
    unknown = [v for v in views if v not in VIEWS]
    if unknown:
        parser.error(f"unknown views {unknown}; the views are {list(VIEWS)}")
    sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",")]
    server = Server(args.out / "server.log")
    print(f"server {server.url} pid {server.proc.pid}", flush=True)
    results = []
    try:
        with chromium() as browser:
            for size in sizes:
                for model in args.models.split(","):
                    for view in views:
                        for length in args.lengths.split(","):
                            if view in NOT_ABOUT_THIS_RUN and length != "short":
                                continue  # the view does not read the sentence
                            r = shoot(browser, server.url, args.out, model, view, length, size)
                            results.append(r)
                            flags = {k: v for k, v in r.items() if v and k not in ("shot", "seconds", "height",
                                                                                 "settled")}
                            print(f"{r['shot']}: {r['seconds']} s{'' if r.get('settled', True) else ' UNSETTLED'} "
                                  f"{json.dumps(flags) if flags else ''}", flush=True)
                            (args.out / "results.json").write_text(json.dumps(results, indent=1))
    finally:
        server.stop()
    print(f"{len(results)} shots in {args.out}")


if __name__ == "__main__":
    main()
