"""An encoder-decoder folder's Layer view: a source box and a target box, and a switch between the grids of its
Encoder, Decoder and Cross attention, each drawn from the run's own attention (cross-attention: target tokens as
rows, source tokens as columns); a cross head switched off in its grid is switched off with ablate_cross, and the
decoder's prediction along the target follows. Bad input is a message, never a traceback."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import app_at, grid_data, grid_layers, open_link, seq2seq_page

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SOURCE = "the cat sat on the mat"
TARGET = "a dog ran"  # shorter than the source: the cross grid is not square


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    from tests.models.hf.test_seq2seq import seq2seq_folder

    return seq2seq_folder(tmp_path_factory.mktemp("bart"))


def _page(folder: Path, target: str = TARGET):
    return seq2seq_page(folder, SOURCE, target)


def _weights(data: dict, held: dict) -> torch.Tensor:
    """(L, H, Q, T) weights as the browser decodes them, from the layers this run sent and those `held` from earlier
    ones (updated); Q = T but for cross-attention."""
    held.update(grid_layers(data))
    layers = held
    Q = data.get("Q", data["T"])
    codes = torch.frombuffer(bytearray(b"".join(layers[l] for l in range(data["L"]))), dtype=torch.uint8)
    codes = codes.view(data["L"], data["H"], Q, data["T"]).float()  # (L, H, Q, T)
    return codes / 255 * torch.tensor(data["scale"]).view(data["L"], data["H"], 1, 1)


def _along(at):
    """The table of the decoder's predictions along the target."""
    tables = [d.value for d in at.dataframe if "reads" in d.value.columns]
    assert len(tables) == 1, len(tables)
    return tables[0]


def test_three_grids_each_draw_their_kind_of_attention(folder):
    from mha_viz.models.hf.loading import load_custom

    at = _page(folder)
    held = {"Encoder": grid_layers(grid_data(at)), "Decoder": {}, "Cross": {}}  # what the page holds, per grid
    run = load_custom(str(folder)).run(SOURCE, target=TARGET)
    source = [t.strip() or t for t in run.tokens]
    expected = {"Encoder": (run.attentions, len(run.tokens), None),
                "Decoder": (run.decoder_attentions, len(run.target_tokens), None),
                "Cross": (run.cross_attentions, len(run.tokens), len(run.target_tokens))}
    for kind, (att, T, Q) in expected.items():
        at.session_state["grid_kind"] = kind
        at.run()
        assert not at.exception, (kind, at.exception)
        data = grid_data(at)
        assert (data["L"], data["T"], data.get("Q")) == (att.shape[0], T, Q), kind
        got = _weights(data, held[kind])
        assert torch.allclose(got, att, atol=att.amax() / 255 + 1e-6), kind
    assert len(data["qtokens"]) == len(run.target_tokens) and len(source) == data["T"]  # Cross: rows, columns


def test_a_cross_switch_ablates_that_cross_head_and_the_readout_follows(folder):
    from mha_viz.models.hf.loading import load_custom

    at = _page(folder)
    at.session_state["grid_kind"] = "Cross"
    at.run()
    held = grid_layers(grid_data(at))
    before = _along(at)
    switches = [t for t in at.toggle if t.label.startswith("Cross ")]
    assert len(switches) == 4
    switches[2].set_value(False).run()  # Cross layer 0, head 2
    assert not at.exception, at.exception
    data = grid_data(at)
    assert data["off"] == [[0, 2]]
    model = load_custom(str(folder))
    want = model.run(SOURCE, target=TARGET, ablate_cross={(0, 2)})
    assert torch.allclose(_weights(data, held), want.cross_attentions, atol=want.cross_attentions.amax() / 255)
    after = _along(at)
    assert list(after["reads"]) == list(before["reads"])  # one row per target position
    assert (after["KL (nats)"] > 0).any() and (before["KL (nats)"] == 0).all()
    at.session_state["grid_kind"] = "Encoder"
    at.run()
    assert grid_data(at)["off"] == []  # a cross head is not an encoder head


def test_an_empty_target_runs_the_greedy_continuation_and_a_long_one_says_why(folder):
    at = _page(folder, target="")
    assert not at.exception and not at.warning
    at.session_state["grid_kind"] = "Decoder"
    at.run()
    assert grid_data(at)["L"] == 3
    at.text_area(key="target_box").input(" ".join([TARGET] * 12))
    at.button[0].click().run()
    assert not at.exception, at.exception
    assert any("decoder accepts at most" in w.value for w in at.warning), [w.value for w in at.warning]


def test_a_one_text_model_draws_no_kind_switch_and_no_target_box():
    at = app_at("tiny")
    assert not at.exception
    assert "target_box" not in [t.key for t in at.text_area]
    assert not [s for s in at.get("button_group")]  # the segmented control (kind switch) is a button group


def test_every_view_opens_with_heads_of_every_kind_off(folder):
    """Decoder and cross heads are in the page's one set beyond the encoder's layers: no view may read them as
    encoder heads (an index past its layers) or fail."""
    from test_seq2seq_page import VIEWS

    at = _page(folder)
    for kind, head in (("Decoder", 1), ("Cross", 3)):
        at.session_state["grid_kind"] = kind
        at.run()
        [t for t in at.toggle if t.label.startswith(f"{kind} ")][head].set_value(False).run()
        assert not at.exception, (kind, at.exception)
    assert grid_data(at)["off"] == [[0, 3]]
    summary = [m.value for m in at.markdown if m.value.startswith("**Heads off:**")]
    assert summary == ["**Heads off:** `Decoder L0 H1`, `Cross L0 H3`"], summary  # named by kind, not as L2, L5
    for view in VIEWS:
        at.session_state["view"] = view
        at.run()
        assert not at.exception, (view, at.exception)


def test_the_kind_is_kept_across_other_views(folder):
    at = _page(folder)
    at.get("button_group")[0]  # the switch is drawn
    at.session_state["grid_kind"] = "Decoder"
    at.run()
    at.session_state["view"] = "Rollout & norms"
    at.run()
    at.session_state["view"] = "Layer"
    at.run()
    assert not at.exception and not at.warning, [w.value for w in at.warning]
    assert grid_data(at)["L"] == 3 and "Q" not in grid_data(at)  # still the decoder's grid


@pytest.fixture(scope="module")
def deep_decoder(tmp_path_factory) -> Path:
    """A BART folder whose decoder has two more layers than its encoder: its last decoder layers have no encoder
    layer of the same number."""
    from tests.models.hf.test_seq2seq import CONFIGS, seq2seq_folder

    config = CONFIGS["bart"]()
    config.decoder_layers = config.encoder_layers + 2
    return seq2seq_folder(tmp_path_factory.mktemp("bart_deep"), config, seed=1)


def test_a_link_keeps_the_kind_the_target_and_a_decoder_layer_past_the_encoders(deep_decoder):
    """The page's link carries the kind its grid shows and the target, and a later decoder layer than the encoder
    has: opened in a new session, it shows the same grid (kind, layer, target tokens), not the Encoder's layer 0."""
    from mha_viz.models.hf.loading import load_custom

    model = load_custom(str(deep_decoder))
    last = model.decoder_layers() - 1
    assert last >= model.n_layers  # the layer the encoder lacks
    at = _page(deep_decoder)
    at.session_state["grid_kind"] = "Cross"
    at.session_state[f"layer|{deep_decoder}"] = last
    at.run()
    assert not at.exception, at.exception
    link = {key: at.query_params[key] for key in at.query_params}
    link = {key: value[0] if isinstance(value, list) else value for key, value in link.items()}
    assert (link.get("kind"), link.get("target"), link.get("layer")) == ("Cross", TARGET, str(last)), link

    again = open_link(link)
    again.button(key="link_model_load").click().run()  # a link's custom folder loads once the visitor confirms
    assert not again.exception, again.exception
    data = grid_data(again)
    run = model.run(SOURCE, target=TARGET)
    assert data["layer"] == last and data["L"] == model.decoder_layers()
    assert len(data["qtokens"]) == len(run.target_tokens) and data["T"] == len(run.tokens)  # Cross: target rows
    assert again.query_params["kind"] in ("Cross", ["Cross"])


def test_a_link_with_an_unknown_kind_says_so(folder):
    at = open_link({"model": str(folder), "kind": "Sideways"})
    assert any("kind=" in w.value and "ignored" in w.value for w in at.warning), [w.value for w in at.warning]


def test_decoder_heads_carry_readings_of_the_decoders_own_attention_and_cross_heads_say_why_not(folder):
    """The Decoder grid's badges are the measures read on the decoder's self-attention as a causal run over the
    target (computed here from the model's own run, independently of the page's code path); the Cross grid has none,
    and its caption says why (the measures relate positions in one text)."""
    from mha_viz import analysis, measures
    from mha_viz.models.hf.loading import load_custom
    from mha_viz.web import kinds

    at = _page(folder)
    run = load_custom(str(folder)).run(SOURCE, target=TARGET)
    at.session_state["grid_kind"] = "Decoder"
    at.run()
    assert not at.exception, at.exception
    badges = grid_data(at)["badges"]
    scores, baselines = analysis.run_scores(
        analysis_run := kinds.AttentionRun(tokens=run.target_tokens, attentions=run.decoder_attentions,
                                           ablated=frozenset(), output=run.output, token_ids=run.target_ids,
                                           special=run.target_special), True, names=measures.BADGES)
    support = analysis.run_support(analysis_run, True, names=measures.BADGES)
    L, H = run.decoder_attentions.shape[:2]
    assert len(badges) == L * H
    for layer in range(L):
        for head in range(H):
            assert badges[f"{layer},{head}"] == analysis.badge_caption(scores, baselines, support, layer, head, n=2)
    assert run.target_special == (0,)  # the decoder's start token is special: `first` reads it
    at.session_state["grid_kind"] = "Cross"
    at.run()
    assert not grid_data(at)["badges"]
    assert any("carry no readings" in c.value for c in at.caption), [c.value for c in at.caption]


@pytest.mark.parametrize("view, words", [
    ("Census", ("encoder's self-attention heads", "carry no readings")),
    ("Rollout & norms", ("two (a source and a target)",)),
])
def test_views_that_hold_for_one_text_say_why(folder, view, words):
    at = _page(folder)
    at.session_state["view"] = view
    at.run()
    assert not at.exception, at.exception
    notes = [i.value for i in at.info]
    assert any(all(w in n for w in words) for n in notes), notes


def test_a_cross_head_in_the_link_reads_as_the_page_names_it_and_old_links_still_open(folder):
    """The link writes a cross head as the page names it ("Cross L0 H3"), not by its index in the page's one set
    (L_enc + L_dec + layer); a link of either spelling opens with that cross head off."""
    from mha_viz.models.hf.loading import load_custom

    at = _page(folder)
    at.session_state["grid_kind"] = "Cross"
    at.run()
    [t for t in at.toggle if t.label.startswith("Cross ")][3].set_value(False).run()
    off = at.query_params["off"]
    assert (off[0] if isinstance(off, list) else off) == "Cross L0 H3"
    model = load_custom(str(folder))
    old = f"L{model.n_layers + model.decoder_layers()}H3"  # as links were written before the kinds
    for spelling in ("Cross L0 H3", "cross l0h3", old):
        again = open_link({"model": str(folder), "text": SOURCE, "target": TARGET, "kind": "Cross", "off": spelling})
        again.button(key="link_model_load").click().run()
        assert not again.exception, again.exception
        assert not [w.value for w in again.warning if "off" in w.value], spelling
        assert grid_data(again)["off"] == [[0, 3]], spelling


def test_an_encoder_decoder_model_opens_on_an_example_pair_and_offers_pairs(folder):
    """Loaded after a one-text model, the Source box holds a sentence of the examples file and the Target its
    pair, so the first run is teacher-forced on a real target, not a greedy continuation of the default sentence;
    the Examples menu sets both boxes at once."""
    from mha_viz.app.cache import TARGET as SENT_TARGET
    from mha_viz.models.examples import shipped_pairs

    pairs = shipped_pairs()
    assert pairs
    at = app_at()
    at.sidebar.selectbox(key="model_choice").set_value("custom").run()
    at.sidebar.text_input(key="custom_id").input(str(folder)).run()
    assert not at.exception, at.exception
    _, source, target = pairs[0]
    assert (at.session_state["text"], at.session_state[SENT_TARGET]) == (source, target)
    assert at.text_area(key="target_box").value == target
    assert grid_data(at)["T"] == len(load_model_tokens(folder, source))  # the first run read the pair's source
    label, source, target = pairs[1]
    at.button(key="pair1").click().run()
    assert not at.exception, at.exception
    assert (at.session_state["text"], at.session_state[SENT_TARGET], label) == (source, target, pairs[1][0])


def load_model_tokens(folder, source):
    from mha_viz.models.hf.loading import load_custom

    return load_custom(str(folder)).run(source).tokens


def test_the_mean_ablation_help_is_true_for_each_model(folder):
    """The sidebar's help for mean ablation says which positions the mean takes as this model computes it: the
    one-text engine's ordinary tokens, each sentence weighed the same; an encoder-decoder model's every position,
    each token weighed the same."""
    at = _page(folder)
    seq2seq = at.sidebar.radio(key="ablation").help
    assert "special tokens included" in seq2seq and "each token weighted equally" in seq2seq
    assert "left out" not in seq2seq and "each sentence weighted equally" not in seq2seq
    one_text = app_at("tiny").sidebar.radio(key="ablation").help
    assert "left out" in one_text and "each sentence weighted equally" in one_text
