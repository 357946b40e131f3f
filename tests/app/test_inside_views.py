"""The two token views through the page (AppTest): Inside a head and Follow a token, the token picker they share,
and the selected token in the URL."""
import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.contract import Ablation

from page_steps import open_view, send_sentence

REPO = Path(__file__).resolve().parents[2]
APP = str(REPO / "app.py")
TEXT = "Dogs chase cats in the yard."  # MiniLM: [CLS] dogs chase cats in the yard . [SEP]


def _app(model: str = "minilm", **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = model
    at.query_params["text"] = TEXT if model != "tiny" else "the keys to the cabinet are on the table ."
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def _view(at: AppTest, view: str) -> AppTest:
    open_view(at, view)
    assert not at.exception, at.exception
    return at


def _chart(at: AppTest, key: str) -> dict:
    charts = [c for c in at.get("plotly_chart") if c.proto.id and key in c.proto.id]
    assert charts, f"no chart {key!r}"
    return json.loads(charts[0].proto.spec)


def _values(array) -> list[float]:
    """A figure's numbers as sent to the browser: a list, or plotly's base64 typed array {dtype, bdata}."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).tolist()
    return list(array)


def test_inside_a_head_follows_the_clicked_token_and_writes_it_to_the_url():
    at = _view(_app(), "Inside a head")
    picker = at.pills(key="token_pick")
    assert list(picker.options) == ["[CLS]", "dogs", "chase", "cats", "in", "the", "yard", ".", "[SEP]"]
    assert picker.value == 7  # default: the last token that is not special ("." before [SEP])
    steps = _chart(at, "inside_steps")
    assert len(steps["data"]) == 3 and "query ." in steps["layout"]["title"]["text"]
    picker.set_value(2).run()  # "chase"
    assert not at.exception, at.exception
    assert at.query_params["token"] == ["2"] or at.query_params["token"] == "2"
    steps = _chart(at, "inside_steps")
    assert "query chase" in steps["layout"]["title"]["text"]
    weights = _values(steps["data"][1]["y"])
    assert abs(sum(weights) - 1) < 1e-4  # a softmax over the keys, read back from the page's figure
    assert any("Weighted sum" in md.value for md in at.markdown)
    for key in ("inside_q", "inside_k", "inside_v"):  # every token's vector, one row each: (9 tokens, 32 dims)
        z = _chart(at, key)["data"][0]["z"]
        assert z["shape"].replace(" ", "") == "9,32" and len(_values(z)) == 9 * 32
    combine = _chart(at, "inside_combine")
    assert len(combine["data"][0]["x"]) == 12  # one bar per head of the layer
    assert combine["data"][1]["x"][-2:] == ["bias", "total"]
    labels = [m.label for m in at.metric]
    assert any(label.startswith("‖residual stream in‖") for label in labels)


def test_a_switched_off_head_shows_zero_in_how_heads_combine():
    at = _app(off="L0H3")
    at = _view(at, "Inside a head")
    at.selectbox(key="inside_head").set_value(3).run()
    assert not at.exception, at.exception
    assert any("switched off" in md.value for md in at.markdown)
    combine = _chart(at, "inside_combine")
    names = combine["data"][0]["x"]
    off = names.index("L0 H3 (off)")
    norms, along = _values(combine["data"][0]["y"]), _values(combine["data"][1]["y"])
    assert norms[off] == 0 and along[off] == 0
    assert all(v > 0 for i, v in enumerate(norms) if i != off)


def test_follow_a_token_has_a_row_per_head_and_every_layer_on_request():
    at = _view(_app(token="3"), "Follow a token")
    assert at.pills(key="token_pick").value == 3  # from the link
    fig = _chart(at, "follow_fig")
    assert len(fig["data"]) == 1 and len(fig["data"][0]["y"]) == 12
    assert "cats" in fig["layout"]["title"]["text"]
    assert fig["data"][0]["text"][0][3] == "cats"  # the sentence itself is in every row
    at.pills(key="token_pick").set_value(1).run()
    assert "dogs" in _chart(at, "follow_fig")["layout"]["title"]["text"]
    at.checkbox(key="follow_all").check().run()
    assert not at.exception, at.exception
    assert len(_chart(at, "follow_fig")["data"][0]["y"]) == 6 * 12


def test_the_token_is_shared_by_both_views():
    at = _view(_app(), "Follow a token")
    at.pills(key="token_pick").set_value(4).run()
    at = _view(at, "Inside a head")
    assert at.pills(key="token_pick").value == 4
    assert "query in" in _chart(at, "inside_steps")["layout"]["title"]["text"]


def test_a_token_beyond_the_text_in_the_link_falls_back_with_a_note():
    at = _view(_app(token="99"), "Inside a head")
    assert at.pills(key="token_pick").value == 7
    assert any("does not exist in this text" in c.value for c in at.caption)
    at = _app(token="banana")
    assert any("not a position" in w.value for w in at.warning)


@pytest.mark.parametrize("model", ["tiny", "smollm2"])
def test_both_views_render_for_causal_models(model):
    at = _view(_app(model), "Inside a head")
    steps = _chart(at, "inside_steps")
    assert "masked" not in steps["data"][0]["text"]  # the default token is the last: it sees every key
    at.pills(key="token_pick").set_value(1).run()
    steps = _chart(at, "inside_steps")
    assert "masked" in steps["data"][0]["text"]  # position 1 cannot see the later keys
    at = _view(at, "Follow a token")
    n_heads = 9 if model == "smollm2" else json.loads((REPO / "assets/tiny/config.json").read_text())["n_heads"]
    assert len(_chart(at, "follow_fig")["data"][0]["y"]) == n_heads
    assert "cannot look at later tokens" in " ".join(c.value for c in at.caption)


def test_a_click_on_the_pattern_is_read_as_its_query_row():
    from mha_viz.app.views.inside import _clicked_row

    state = {"selection": {"points": [{"curve_number": 1, "x": "the", "y": "chase", "customdata": 2}]}}
    assert _clicked_row(state) == 2
    assert _clicked_row({"selection": {"points": []}}) is None
    assert _clicked_row(None) is None


def test_under_mean_ablation_a_switched_off_head_shows_its_mean_output():
    at = _view(_app(off="L0H3", ablation="mean"), "Inside a head")
    at.selectbox(key="inside_head").set_value(3).run()
    assert not at.exception, at.exception
    assert any("mean ablation" in md.value for md in at.markdown)
    mean = Ablation.of("mean")  # the caption says what "off" means in the meaning's own words
    assert any(f"is {mean.describe} before the output projection" in c.value and mean.help in c.value
               for c in at.caption)
    combine = _chart(at, "inside_combine")
    off = combine["data"][0]["x"].index("L0 H3 (off)")
    assert _values(combine["data"][0]["y"])[off] > 0  # its mean output, not zero


REPEATED = "The keys to the old cabinet were on the table, so she took them."  # "the" at 1, 4 and 9 (MiniLM)


@pytest.mark.parametrize("view", ["Inside a head", "Follow a token"])
def test_a_repeated_token_selects_the_position_clicked(view):
    """Picking the first "the" opened the last one, because the picker keyed its options by their
    label. Each repeated label carries its position, and the position picked is the one selected."""
    at = _view(_app(text=REPEATED), view)
    picker = at.pills(key="token_pick")
    labels = list(picker.options)
    firsts = [1, 4, 9]
    assert all(labels[i].startswith("the") for i in firsts), labels
    for position in firsts:
        at.pills(key="token_pick").set_value(position).run()
        assert not at.exception, at.exception
        assert at.session_state["token"] == position, (position, labels)
        assert at.pills(key="token_pick").value == position
    assert len(set(labels)) == len(labels), labels


def test_follow_a_token_thins_long_text_labels_and_keeps_the_followed_one():
    """~120 tokens drew every label at a few pixels under the title; now at most LABELS_UP_TO labels of
    10 px, the followed token's among them, and the title gets a band of its own above them."""
    import torch

    from mha_viz import plotting
    from mha_viz.app.views.follow import LABELS_UP_TO, fit_labels

    for n, query in ((124, 122), (20, 5)):
        tokens = [f"w{i % 17}" for i in range(n)]
        rows = torch.softmax(torch.randn(3, n), dim=-1)  # (R, K)
        fig = plotting.follow_figure(tokens, rows, ["L0 H0", "L0 H1", "L0 H2"], [0, 1, 2], [False] * 3, query, "t")
        height = fig.layout.height
        step = fit_labels(fig, query)
        if n <= 40:  # the words are written in the cells: nothing to thin
            assert step == 1 and fig.layout.xaxis.tickvals is None
            continue
        labels = list(fig.data[0].x)
        shown = [labels.index(v) for v in fig.layout.xaxis.tickvals]
        assert step > 1 and len(shown) <= LABELS_UP_TO + 1 and query in shown
        assert all(abs(i - query) >= step for i in shown if i != query)
        assert fig.layout.xaxis.tickfont.size >= 10 and fig.layout.height > height
        assert fig.layout.title.yref == "container" and fig.layout.margin.t > 40


def test_follow_a_token_says_when_a_word_is_cut_in_its_cell():
    """Words longer than Follow a token's cells are cut with "…" (plotting.cell_words); the page says so, and says
    nothing when every word is whole."""
    app = str(Path(__file__).resolve().parents[2] / "app.py")
    for text, cut in (("The keys to the old cabinet were on the table, so she took them.", True),
                      ("The cat sat on the mat.", False)):
        at = AppTest.from_file(app, default_timeout=300)
        at.run()
        send_sentence(at, text)
        open_view(at, "Follow a token")
        assert not at.exception, at.exception
        said = " ".join(c.value for c in at.caption)
        assert ("is cut with “…”" in said) == cut, (text, said)


FOX = "the quick brown fox jumps over the lazy dog near the quick brown fox"


def test_inside_a_head_reads_its_support_marks_unknowns_and_sets_the_input_against_the_census(monkeypatch):
    """Inside a head says what the head does on this input with how many queries each reading averaged over, marks
    the words the model does not know on the axes, and, once a census of the model is made, whether this input
    agrees with the name the census gave the head."""
    import mha_viz
    from mha_viz.app import cache
    from mha_viz.app.names import UNKNOWN_MARK

    monkeypatch.setattr(cache, "census_made", lambda name, seed=0: None)  # no census yet (an earlier test may make one)
    at = _view(_app("tiny", text=FOX, layer="0"), "Inside a head")
    run = mha_viz.load_model("tiny").run(FOX)
    md = " ".join(m.value for m in at.markdown)
    assert f"{len(run.unknown)} of 14 words are unknown to" in md, md
    assert "queries" in md and "No census of this model has been made yet" in md
    labels = next(d["y"] for d in _chart(at, "inside_pattern")["data"] if d["type"] == "heatmap")  # the query axis
    assert sum(UNKNOWN_MARK in str(t) for t in labels) == len(run.unknown) == 9, labels
    # With the census made, L0 H2 (the census's previous-token head) is set against this input.
    census = mha_viz.head_census(mha_viz.load_model("tiny"))
    monkeypatch.setattr(cache, "census_made", lambda name, seed=0: census if name == "tiny" else None)
    at.selectbox(key="inside_head").set_value(2).run()
    md = " ".join(m.value for m in at.markdown)
    assert "The census names L0 H2 for previous token" in md and "this input agrees" in md, md
