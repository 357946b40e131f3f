"""A copied link restores the view: the heads that were off, and the compared heads."""
import time
from urllib.parse import urlencode

from test_browser import _TITLES, _assert_no_exception

from harness import new_page, wait, wait_idle

TEXT = "Dogs chase cats across the quiet garden."


def test_shared_link_restores_heads_off_and_compare(browser, streamlit_url, page):
    # 1. The Layer view of layer 2 with two of its heads off.
    query = urlencode({"model": "minilm", "text": TEXT, "layer": "2", "off": "L2H3,L2H7", "view": "Layer"})
    page.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
    wait(page, """() => [...document.querySelectorAll('.mhv-grid .mhv-title')]
                     .filter(t => t.textContent.endsWith('(off)')).length === 2""", "two heads drawn as off")
    wait_idle(page)
    _assert_no_exception(page, "opening a shared link")
    titles = page.evaluate(_TITLES)
    assert sorted(t for t in titles if t.endswith("(off)")) == ["L2 H3 (off)", "L2 H7 (off)"], titles
    assert page.get_by_label("Sentence", exact=True).input_value() == TEXT
    heads_off = page.locator("p", has_text="Heads off:").inner_text()
    assert "L2 H3" in heads_off and "L2 H7" in heads_off

    # 2. The Compare view with two heads from different layers, in a fresh browser context (no shared state).
    context, other = new_page(browser, 1400, 1000)
    try:
        query = urlencode({"model": "minilm", "text": TEXT, "compare": "L0H2,L4H5", "view": "Compare",
                           "off": "L1H1"})
        other.goto(f"{streamlit_url}/?{query}", wait_until="domcontentloaded")
        wait(other, """() => [...document.querySelectorAll('.js-plotly-plot .annotation-text')]
                          .map(t => t.textContent).filter(t => t === 'L0 H2' || t === 'L4 H5').length === 2""",
             "the two compared heads drawn")
        wait_idle(other)
        _assert_no_exception(other, "opening a compare link")
        picked = other.locator('[data-testid="stMultiSelect"]').inner_text()
        assert "L0 H2" in picked and "L4 H5" in picked
        assert "L1 H1" in other.locator("p", has_text="Heads off:").inner_text()
        # The page writes its state back into the URL, so copying it again gives the same view.
        deadline = time.monotonic() + 30
        while "compare=" not in other.url and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "compare=L0H2%2CL4H5" in other.url or "compare=L0H2,L4H5" in other.url, other.url
    finally:
        context.close()
