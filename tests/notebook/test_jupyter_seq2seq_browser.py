"""The widget of an encoder-decoder model in JupyterLab, headless Chromium running the cells: the Encoder, Decoder
and Cross buttons redraw the grid with that kind (a cross heatmap as target rows by source columns), a cross head's
switch reruns the model with that cross head off, the readout's table along the target follows, and `w.cross_off`
holds it for the next cell."""
from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs nbformat (requirements-test.txt)")
from jupyter_harness import Page, write_notebook  # noqa: E402

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
SOURCE, TARGET = "the cat sat on the mat", "a dog ran"
CELLS = [
    "import sys, tempfile, torch, transformers\n"
    f"sys.path.insert(0, {str(REPO)!r})\n"
    "from tests.models.hf.test_seq2seq import CONFIGS, _tokenizer\n"
    "import mha_viz\n"
    "folder = tempfile.mkdtemp()\n"
    "torch.manual_seed(0)\n"
    "transformers.BartForConditionalGeneration(CONFIGS['bart']()).save_pretrained(folder)\n"
    "_tokenizer(folder)\n"
    f"w = mha_viz.show(mha_viz.load_model(folder), {SOURCE!r}, target={TARGET!r})",
    "print('kind:', w.kind, 'cross off:', sorted(w.cross_off), 'self off:', sorted(w.heads_off))",
]
CANVASES = """() => [...document.querySelectorAll('.mhw .mhv-grid .mhv-head canvas')].map(c => [c.width, c.height])"""


def test_the_kind_buttons_and_a_cross_switch_in_jupyterlab(browser, server):
    write_notebook(server.root / "seq2seq.ipynb", CELLS)
    p = Page(browser, server)
    try:
        p.open("lab", "seq2seq.ipynb")
        p.run_cell(0)
        page = p.page
        page.wait_for_selector(".mhw[data-drawn-at] .mhv-head[data-head='L0 H0'] canvas", timeout=60000)
        S = page.locator(".mhw .mhv-strip .mhv-tok").count()
        assert S == 7 and all(w == h == S for w, h in page.evaluate(CANVASES))
        page.click(".mhw .mhw-kind:text-is('Cross')")
        page.wait_for_selector(".mhw .mhw-kind[aria-pressed='true']:text-is('Cross')", timeout=60000)
        page.wait_for_function(f"() => ({CANVASES})().every(([w, h]) => w === {S} && h === 4)", timeout=60000)
        page.click(".mhw .mhv-head[data-head='L0 H2'] .mhv-switch")
        page.wait_for_selector(".mhw .mhv-head.mhv-off[data-head='L0 H2']", timeout=60000)
        readout = page.locator("[data-testid=mhw-readout]")
        page.wait_for_function("document.querySelector('[data-testid=mhw-readout]').innerText.includes('1 off')",
                               timeout=60000)
        assert "along the target" in readout.inner_text()
        assert page.locator(".mhw-along tr").count() == 1 + 4  # a header and one row per target position
        p.run_cell(1)
        assert "kind: Cross cross off: [(0, 2)] self off: []" in p.output_text(1)
        assert not p.outside, f"requests left loopback: {p.outside}"
    finally:
        p.close()
