"""show_census and show_circuits: the census's and the circuits' maps as SVG, each cell the measured value (read
back from the cell's hover title and compared with the census / circuits object), the notable heads outlined."""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

import pytest
import torch

import mha_viz

NS = {"s": "http://www.w3.org/2000/svg"}


@pytest.fixture(scope="module")
def tiny():
    return mha_viz.load_model("tiny")


def _cells(svg: str, group: int) -> list[tuple[str, str, float, bool]]:
    """(row, column, value, outlined) of every cell of the group-th map."""
    g = ET.fromstring(svg).findall("s:g", NS)[group]
    out = []
    for rect in g.findall("s:rect", NS):
        m = re.fullmatch(r"(.+) → (.+): (.+)", rect.find("s:title", NS).text)
        value = float("nan") if m.group(3) == "n/a" else float(m.group(3))
        out.append((m.group(1), m.group(2), value, rect.get("stroke") == "#d62728"))
    return out


def test_show_circuits_draws_every_composition_score(tiny):
    c = mha_viz.circuits(tiny)
    pic = mha_viz.show_circuits(c)
    svg = pic.to_svg()
    assert pic._repr_mimebundle_()["image/svg+xml"] == svg
    L, H = c.n_layers, c.n_heads
    for g, mode in enumerate(("q", "k", "v")):
        cells = _cells(svg, g)
        assert len(cells) == (L * H) ** 2
        for row, col, value, _ in cells:
            (l1, h1), (l2, h2) = (tuple(int(x) for x in re.findall(r"\d+", name)) for name in (row, col))
            want = float(c.composition[mode][l1, h1, l2, h2])
            assert (math.isnan(value) and math.isnan(want)) or value == pytest.approx(want, abs=5e-4)
        outlined = {(r, k) for r, k, _, o in cells if o}
        assert outlined == {(f"L{a[0]} H{a[1]}", f"L{b[0]} H{b[1]}") for a, b, _ in c.top_pairs(mode, 3)}
    copying = _cells(svg, 3)
    assert [v for _, _, v, _ in copying] == pytest.approx(c.copying.flatten().tolist(), abs=5e-4)
    with pytest.raises(ValueError, match="kind of composition"):
        mha_viz.show_circuits(c, modes=("x",))


def test_show_census_draws_each_score_with_its_baseline(tiny):
    cfg = mha_viz.CensusConfig(n_random=2, random_length=10, n_repeated=2, n_templates=4, n_loss=2, n_boot=10)
    census = mha_viz.head_census(tiny, texts=["anna berg went to the market .", "one , two , three ."],
                                 config=cfg, control=None)
    pic = mha_viz.show_census(census, scores=["previous", "induction"])
    svg = pic.to_svg()
    for g, name in enumerate(["previous", "induction"]):
        cells = _cells(svg, g)
        values = torch.tensor([v for _, _, v, _ in cells]).view(census.n_layers, census.n_heads)
        assert torch.allclose(values, census.scores[name].float(), atol=5e-4, equal_nan=True)
        outlined = {(r, k) for r, k, _, o in cells if o}
        assert outlined == {(f"L{l}", f"H{h}") for (l, h), _ in census.top(name, 3)}
        assert f"uniform attention: {census.uniform[name]:.3g}" in svg
    with pytest.raises(ValueError, match="not scores of this census"):
        mha_viz.show_census(census, scores=["nope"])
