"""Screenshots of every step of the Lesson, for the README's "The Lesson" section (docs/lesson/SECTION.md).
Not a test: it asserts nothing; it writes `step-N.png` to `--out` and prints, per step, the title and the first
sentence of its claim as the page shows them, and anything wrong it saw (exception, error or warning box, `nan`/`None`,
JS errors, a step that did not settle).

    PYTHONPATH=. .venv/bin/python tests/e2e/lesson_screens.py --out docs/lesson
    ... --lesson-model tiny --size 1600x1000 --steps 1,3

One server on loopback, one browser; each step is opened by its link (`?view=Lesson&lesson=N`) in its own browser
context (a fresh session, as a reader following the README meets it), closed after use; the server is stopped by
its PID at the end. The shot is the main column (`stMain`), grown to its whole height, at device scale 1; with
Pillow it is then quantized to a palette, and scaled down where it must be, so each file stays under
`MAX_KB`.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from screenshot_matrix import settled  # noqa: E402  (idle, and the main column unchanged over a few polls)

from mha_viz.app.lesson.steps import STEPS  # noqa: E402

from harness import STEP_DRAWN, Server, answer_predictions, chromium, new_page, settle  # noqa: E402

HEADING = """(n) => [...document.querySelectorAll('[data-testid="stMain"] h4')]
  .some(h => h.innerText.startsWith(`Step ${n} of`))"""
# A step's figures are drawn: a plotly chart with its SVG, or the browser-drawn head grid's canvases.
FIGURE = """() => document.querySelectorAll('[data-testid="stMain"] .js-plotly-plot .main-svg').length > 0
  || document.querySelectorAll('[data-testid="stMain"] .mhv-grid .mhv-head canvas').length > 0"""
# The step's heading ("Step N of 7: Title") and its claim: the first Markdown block after it that is bold throughout.
TITLE_CLAIM = """() => {
  const blocks = [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stMarkdownContainer"]')];
  const at = blocks.findIndex(b => b.querySelector('h4') && b.innerText.trim().startsWith('Step '));
  if (at < 0) return null;
  const claim = blocks.slice(at + 1).find(b => {
    const s = b.querySelector('strong');
    return s && s.innerText.trim() === b.innerText.trim();
  });
  return {heading: blocks[at].innerText.trim(), claim: claim ? claim.innerText.trim() : ''};
}"""
PROBLEMS = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const pick = sel => [...main.querySelectorAll(sel)].map(e => e.innerText.slice(0, 300));
  const text = main.innerText || '';
  return {exceptions: pick('[data-testid="stException"]'), errors: pick('[data-testid="stAlertContentError"]'),
          warnings: pick('[data-testid="stAlertContentWarning"]'),
          nan: (text.match(/.{0,40}\\b(nan|NaN|inf|None)\\b.{0,40}/g) || []).slice(0, 5)};
}"""
MAIN_HEIGHT = """() => Math.max(...['stMain', 'stAppViewContainer']
  .map(id => document.querySelector(`[data-testid="${id}"]`)).filter(Boolean).map(el => el.scrollHeight),
  document.documentElement.scrollHeight)"""


def wait_for(page, js: str, timeout_s: float, arg=None) -> bool:
    """Wait (bounded) for the JS predicate; False on timeout instead of raising."""
    try:
        page.wait_for_function(js, arg=arg, polling=200, timeout=timeout_s * 1000)
        return True
    except Exception as err:
        if type(err).__name__ != "TimeoutError":
            raise
        return False


def first_sentence(text: str) -> str:
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z])", text.strip(), maxsplit=1)
    return parts[0] if parts else ""


MAX_KB = 150  # a screenshot for the docs stays under this


def shrink(path: Path, margin: int = 32) -> str:
    """With Pillow: cut the empty band below the step (the main column is at least the window's height) to `margin`
    px and quantize to a 256-colour palette; the size before and after, for the log."""
    before = path.stat().st_size
    try:
        from PIL import Image, ImageChops
    except ImportError:
        return f"{before / 1024:.0f} KB (no Pillow: not trimmed nor quantized)"
    with Image.open(path) as im:
        rgb = im.convert("RGB")
    w, h = rgb.size
    body = rgb.crop((8, 0, w, h))  # past the column's left border line, which runs the whole height
    box = ImageChops.difference(body, Image.new("RGB", body.size, rgb.getpixel((w - 1, h - 1)))).getbbox()
    if box:
        rgb = rgb.crop((0, 0, w, min(h, box[3] + margin)))
    rgb.quantize(colors=256, dither=Image.Dither.NONE).save(path, optimize=True)
    for colors in (128, 64, 32):  # fewer colours first (the figures' scales survive it), then a smaller picture
        if path.stat().st_size <= MAX_KB * 1024:
            break
        rgb.quantize(colors=colors, dither=Image.Dither.NONE).save(path, optimize=True)
    while path.stat().st_size > MAX_KB * 1024 and rgb.size[0] > 600:
        rgb = rgb.resize((int(rgb.size[0] * 0.85), int(rgb.size[1] * 0.85)), Image.Resampling.LANCZOS)
        rgb.quantize(colors=64, dither=Image.Dither.NONE).save(path, optimize=True)
    return f"{before / 1024:.0f} KB -> {path.stat().st_size / 1024:.0f} KB, {rgb.size[0]}x{rgb.size[1]} px"


def shoot(browser, url: str, out: Path, n: int, lesson_model: str, size: tuple[int, int],
          timeout_s: float) -> dict:
    width, height = size
    query = urlencode({"view": "Lesson", "lesson": n, "lesson_model": lesson_model})
    context, page = new_page(browser, width, height)
    t0 = time.monotonic()
    path = out / f"step-{n}.png"
    try:
        page.goto(f"{url}/?{query}", wait_until="domcontentloaded")
        found = {"heading": wait_for(page, HEADING, timeout_s, arg=n), "drawn": wait_for(page, STEP_DRAWN, timeout_s)}
        settled(page, timeout_s)
        # Each step asks first: the picture shows the step after the student's prediction (the first choice).
        answer_predictions(page, lambda p: settled(p, timeout_s))
        if STEPS[n - 1].text:  # the closing step has no figure
            found["figure"] = wait_for(page, FIGURE, timeout_s)
        found["settled"] = settled(page, timeout_s)
        page.wait_for_timeout(400)  # plotly's relayout once the chart box settles
        settle(page)
        # Streamlit scrolls inside its main column: grow the window to the column's height, then shoot the column.
        full = int(page.evaluate(MAIN_HEIGHT))
        page.set_viewport_size({"width": width, "height": min(full + 40, 8_000)})
        settled(page, min(timeout_s, 60))
        page.wait_for_timeout(400)
        settle(page)
        page.locator('[data-testid="stMain"]').screenshot(path=str(path))
        tc = page.evaluate(TITLE_CLAIM) or {}
        return {"step": n, "seconds": round(time.monotonic() - t0, 1), "height": full,
                "heading": tc.get("heading", ""), "claim": first_sentence(tc.get("claim", "")),
                "size": shrink(path), "waits": found, "js_errors": page.js_errors[:5], **page.evaluate(PROBLEMS)}
    except Exception as err:  # one step failing must not lose the others
        return {"step": n, "failed": f"{type(err).__name__}: {str(err).splitlines()[0]}",
                "seconds": round(time.monotonic() - t0, 1)}
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lesson-model", default="tiny", help="the lesson's learned model (?lesson_model=)")
    parser.add_argument("--size", default="1600x1000", help="the browser window, WIDTHxHEIGHT")
    parser.add_argument("--steps", default=",".join(str(i) for i in range(1, len(STEPS) + 1)))
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds to wait for each step to draw")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    size = tuple(int(v) for v in args.size.split("x"))
    steps = [int(s) for s in args.steps.split(",") if s]
    bad = [s for s in steps if not 1 <= s <= len(STEPS)]
    if bad:
        parser.error(f"no such steps {bad}: the lesson has steps 1-{len(STEPS)}")
    log = Path("/tmp") / f"lesson_screens_server_{int(time.time())}.log"  # not in --out: docs/ keeps only pictures
    server = Server(log)
    print(f"server {server.url} pid {server.proc.pid} (log {log})", flush=True)
    results = []
    try:
        with chromium() as browser:
            for n in steps:
                r = shoot(browser, server.url, args.out, n, args.lesson_model, size, args.timeout)
                results.append(r)
                if "failed" in r:
                    print(f"step {n}: FAILED after {r['seconds']} s: {r['failed']}", flush=True)
                    continue
                print(f"step {n}: {r['heading']}\n  claim: {r['claim']}\n  {r['seconds']} s, height {r['height']} px, "
                      f"{r['size']}", flush=True)
                flags = {k: r[k] for k in ("exceptions", "errors", "warnings", "nan", "js_errors") if r[k]}
                flags.update({f"no {k}": True for k, ok in r["waits"].items() if not ok})
                if flags:
                    print(f"  PROBLEMS: {json.dumps(flags)}", flush=True)
    finally:
        server.stop()
    print(f"{sum('failed' not in r for r in results)} of {len(results)} steps shot to {args.out}")


if __name__ == "__main__":
    main()
