"""The Patching view in a real browser: a shared link opens it with mean ablation; the maps draw; the exact map is
computed on a click and its agreement with the estimate is shown; the strongest head is patched and the
predictions move; the link keeps saying what "off" means."""
import time
from urllib.parse import urlencode

from test_browser import _assert_no_exception

from harness import wait, wait_idle

TEXT = "Anna met Ben at the park. Later Ben gave the book to"

_CHART_TITLES = """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')].map(t => t.textContent)"""


def test_patching_view_from_a_link(page, streamlit_url):
    query = urlencode({"model": "tiny", "text": TEXT, "view": "Patching", "off": "L0H1", "ablation": "mean"})
    page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
    wait(page, """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                     .some(t => t.textContent.startsWith('Direct effect'))""", "the direct-effect map")
    wait_idle(page)
    _assert_no_exception(page, "opening the Patching view from a link")
    titles = page.evaluate(_CHART_TITLES)
    assert any(t.startswith("Attribution estimate") for t in titles), titles
    # What "off" means is on the page and stays in the URL.
    assert page.get_by_text("Off means mean").count() == 1
    assert page.get_by_label("Second sentence (the same number of tokens, one detail changed)").input_value() == \
        "Anna met Ben at the park. Later Anna gave the book to"

    page.get_by_role("button", name="Compute the exact map").click()
    wait(page, """() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]
                     .some(t => t.textContent.startsWith('Exact'))""", "the exact map")
    wait(page, """() => document.body.innerText.includes('rank correlation')""", "the agreement line")
    wait_idle(page)
    _assert_no_exception(page, "computing the exact map")
    assert "KL(before ‖ after)" in page.locator('[data-testid="stMetric"]').all_inner_texts().__str__()
    picked = page.locator('[data-testid="stMultiSelect"]').last.inner_text()
    assert "L" in picked and "H" in picked, picked
    deadline = time.monotonic() + 30
    while "ablation=mean" not in page.url and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "ablation=mean" in page.url and "view=Patching" in page.url, page.url
