"""The Circuits view in a real browser for each built-in model: it draws the composition map and one head's maps
with no exception. Its screenshots (circuits-<model>.png: one head's maps; circuits-<model>-composition.png: the
composition map and the causal check) go to artifacts/, copied to assets/ only with MHA_VIZ_UPDATE_SCREENSHOT=1 so
a plain run leaves git clean."""
from __future__ import annotations

import os
import shutil
from urllib.parse import urlencode

import pytest
from test_browser import REPO, _assert_no_exception, _settle

from harness import wait, wait_idle

_TITLES = "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')].map(t => t.textContent)"
SHOTS = {"tiny": "the keys to the cabinet are on the table .", "minilm": "Dogs chase cats in the yard.",
         "smollm2": "Alice put the book on the shelf, and later Alice took the"}
FIRST_MEASURE_MS = 600_000  # SmolLM2's circuits are measured once per server, tens of seconds on two busy cores


def _shot(page, artifacts, name: str, heading: str) -> None:
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": 1500})
    wait_idle(page)
    page.evaluate("""(h) => [...document.querySelectorAll('h3, h4')].find(e => e.textContent.startsWith(h))
        .scrollIntoView({block: 'start'})""", heading)
    _settle(page)
    path = artifacts / name
    try:
        page.screenshot(path=str(path))
    finally:
        page.set_viewport_size(size)
    if os.environ.get("MHA_VIZ_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(path, REPO / "assets" / name)


@pytest.mark.parametrize("model", list(SHOTS))
def test_circuits_view_draws_for_each_model(browser, streamlit_url, page, artifacts, model):
    query = urlencode({"model": model, "text": SHOTS[model], "view": "Circuits", "layer": 1})
    page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
    page.wait_for_function(f"() => ({_TITLES})().some(t => t.includes('K-composition'))", timeout=FIRST_MEASURE_MS,
                           polling=500)
    wait(page, f"() => ({_TITLES})().some(t => t.includes('induction score'))", f"the causal check of {model}")
    wait_idle(page)
    _assert_no_exception(page, f"the Circuits view for {model}")
    _shot(page, artifacts, f"circuits-{model}.png", "Circuits")
    _shot(page, artifacts, f"circuits-{model}-composition.png", "Which earlier heads")
