"""The worked notebook in examples/ runs end to end (nbclient, a real kernel), is kept without outputs in the
repository, and its static HTML (nbconvert, as for a notebook saved without widget state) still shows the grid as
it was last drawn: with the previous-token head off, though that happened two cells after the grid was shown."""
from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="needs nbformat (requirements-test.txt)")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ipynb"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; strip them (Edit > Clear Outputs of All Cells)"
    assert "widgets" not in nb.metadata


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    import os

    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "examples" / "induction.ipynb", as_version=4)
    where = tmp_path_factory.mktemp("example")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "HF_HUB_OFFLINE": "1"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        # Widget state is not stored, as JupyterLab saves by default: viewers without a kernel see the fallback.
        # 900 s a cell: MiniLM's census took 294 s at load 20 on 2 cores (15 s when the machine is quiet).
        NotebookClient(nb, kernel_name="python3", timeout=900, store_widget_state=False,
                       resources={"metadata": {"path": str(where)}}).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return nb


def _outputs(nb, source_part: str) -> list:
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and source_part in c.source]
    return cell.outputs


def test_the_example_runs_and_the_induction_pattern_collapses(executed):
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    prev = re.search(r"previous-token head: L(\d) H(\d): (\d+)%", text)
    ind = re.search(r"L(\d) H(\d) induction score: (\d+)% with every head on, (\d+)% with L(\d) H(\d) off", text)
    assert prev and ind, text
    assert (ind.group(5), ind.group(6)) == prev.groups()[:2] and int(ind.group(1)) > int(prev.group(1))
    assert int(ind.group(4)) < int(ind.group(3)) / 2
    # From the weights alone: of the heads before it, the previous-token head feeds the induction head's keys most.
    k = re.search(r"K-composition into L(\d) H(\d)'s keys: strongest from L(\d) H(\d), ([\d.]+) \(random "
                  r"matrices: mean [\d.]+, 99th percentile ([\d.]+)\)", text)
    assert k and k.groups()[:2] == ind.groups()[:2] and k.groups()[2:4] == prev.groups()[:2], text
    assert float(k.group(5)) > float(k.group(6))


def test_the_census_widget_keeps_the_head_selected_from_code(executed):
    """MiniLM's census: show_census's output is the widget and its fallback picture, which a later cell's
    `cw.selected = ...` redrew (that head outlined, its numbers and top examples listed)."""
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    strongest = re.search(r"MiniLM's strongest previous-token head: L(\d+) H(\d+)", text)
    selected = re.search(r"selected: L(\d+) H(\d+); where it scores highest on previous \(text\):\n  \d", text)
    assert strongest and selected and strongest.groups() == selected.groups(), text
    (shown,) = [o for o in _outputs(executed, "cw = mha_viz.show_census(") if "data" in o]
    assert "application/vnd.jupyter.widget-view+json" in shown.data
    picture = shown.data["image/svg+xml"]
    l, h = strongest.groups()
    assert f"Selected: L{l} H{h}" in picture and f'data-lh="{l},{h}" data-tip="L{l} H{h} · previous: ' in picture
    assert 'data-kind="census"' in picture
    (circ,) = [o for o in _outputs(executed, 'cc = mha_viz.show_circuits(c, "k")') if "data" in o]
    assert 'data-map="composition"' in circ.data["image/svg+xml"]


def _previous_token_head(nb) -> str:
    """The head the notebook found by measuring (its output), as the grid names it."""
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    prev = re.search(r"previous-token head: (L\d H\d): \d+%", text)
    assert prev, text
    return prev.group(1)


def test_the_saved_grid_shows_the_last_picture(executed):
    (shown,) = _outputs(executed, "w = mha_viz.show(tiny, text, layer=1)")
    assert "application/vnd.jupyter.widget-view+json" in shown.data
    # The head was switched off two cells later; the display handle updated this output's fallback picture.
    prev = _previous_token_head(executed)
    assert f"tiny, layer 1, off: {prev}" in shown.data["image/svg+xml"]
    from nbconvert import HTMLExporter

    html, _ = HTMLExporter().from_notebook_node(executed)
    # nbconvert draws an SVG output as an <img> with a data: URL.
    pictures = [base64.b64decode(b).decode() for b in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', html)]
    grids = [p for p in pictures if 'data-head="L1 H0"' in p]
    # the grid's fallback, the static SVG(w.to_svg()) cell and show(run): all with the previous-token head off
    assert len(grids) == 3 and all(f"layer 1, off: {prev}" in p for p in grids)
    assert sum(f"tiny, layer 1, off: {prev}" in p for p in grids) == 2
