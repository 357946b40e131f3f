"""A damaged compiled folder is refused whole: a copy of the shipped written-induction folder, damaged one way at a
time (a tensor dropped or reshaped, a field of compiled.json of the wrong type, out of range or missing, a file
missing or not JSON), loads through `load_model(folder)` as the page loads a folder, and each gives a one-line
ModelLoadError naming the file, the field or tensor, and the fix, with nothing written in the folder or the cache.
torch and safetensors only: no program is compiled."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mha_viz.contract import ModelLoadError
from mha_viz.models.registry import load_model
from mha_viz.settings import ASSETS

SHIPPED = ASSETS / "compiled" / "induction"
CONFIG, WEIGHTS = "compiled.json", "weights.safetensors"


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """An undamaged copy of the shipped induction folder, with this test's own empty cache folder."""
    monkeypatch.setenv("MHA_VIZ_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    return Path(shutil.copytree(SHIPPED, tmp_path / "induction"))


def _files(root: Path) -> dict:
    """Every file and folder under `root`, with its size and modification time."""
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def _refused(folder: Path, *names: str) -> str:
    """load_model(folder)'s ModelLoadError, checked to be one line naming each of `names` and a fix, with nothing
    written in the folder or the cache on the way."""
    cache = folder.parent / "cache"
    before = (_files(folder), _files(cache))
    with pytest.raises(ModelLoadError) as err:
        load_model(str(folder))
    text = str(err.value)
    assert "\n" not in text, text
    for name in names:
        assert name in text, (name, text)
    assert "mha-viz compile" in text, text  # the fix
    assert (_files(folder), _files(cache)) == before, "a failed load wrote something"
    return text


def _edit_weights(folder: Path, edit) -> None:
    stored = load_file(str(folder / WEIGHTS))
    edit(stored)
    save_file(stored, str(folder / WEIGHTS))


def _edit_config(folder: Path, edit) -> None:
    data = json.loads((folder / CONFIG).read_text())
    edit(data)
    (folder / CONFIG).write_text(json.dumps(data))


def test_the_undamaged_copy_loads_and_runs(folder):
    model = load_model(str(folder))
    run = model.run("a b c d a b c d")
    assert tuple(run.attentions.shape) == (2, 1, 9, 9)
    assert model.program_output(run)[5:] == ["b", "c", "d", "a"]  # the induction program's output


def _drop(name):
    def edit(stored):
        for part in ("shape", "index", "value"):
            del stored[f"{name}/{part}"]
    return edit


def _drop_part(key):
    def edit(stored):
        del stored[key]
    return edit


def _set(key, value):
    def edit(stored):
        stored[key] = value
    return edit


def _add(name, shape):
    def edit(stored):
        stored[f"{name}/shape"] = torch.tensor(shape, dtype=torch.int64)
        stored[f"{name}/index"] = torch.tensor([0], dtype=torch.int64)
        stored[f"{name}/value"] = torch.tensor([1.0])
    return edit


def _nan(name):
    def edit(stored):
        value = stored[f"{name}/value"].clone()
        value[0] = float("nan")
        stored[f"{name}/value"] = value
    return edit


@pytest.mark.parametrize("edit, names", [
    (_drop("layers.1.attn.query.w"), ("layers.1.attn.query.w", "missing")),  # the damage the issue found
    (_drop("unembed"), ("unembed", "missing")),
    (_drop_part("layers.0.attn.key.w/value"), ("layers.0.attn.key.w",)),
    (_drop_part("pos_embed/index"), ("pos_embed",)),
    (_set("token_embed/shape", torch.tensor([7, 29])), ("token_embed", "(7, 29)", "(7, 28)")),  # larger
    (_set("pos_embed/shape", torch.tensor([4, 28])), ("pos_embed",)),  # smaller: its stored entries fall outside
    (_set("layers.0.mlp.linear_1.b/shape", torch.tensor([1, 1])), ("layers.0.mlp.linear_1.b", "(1,)")),
    (_add("layers.2.attn.query.w", [28, 12]), ("layers.2.attn.query.w", "n_layers")),  # a third layer
    (_add("scratch", [3]), ("scratch",)),
    (_nan("token_embed"), ("token_embed",)),
    (_set("unembed/value", torch.ones(3)), ("unembed",)),  # values and positions of different lengths
])
def test_damaged_weights_are_refused_naming_the_tensor(folder, edit, names):
    _edit_weights(folder, edit)
    _refused(folder, WEIGHTS, *names)


def _put(key, value):
    def edit(data):
        data[key] = value
    return edit


def _remove(key):
    def edit(data):
        del data[key]
    return edit


def _head(i, key, value=None):
    def edit(data):
        if value is None:
            del data["heads"][i][key]
        else:
            data["heads"][i][key] = value
    return edit


def _vocab_twice(data):
    data["vocab"] = ["a", "a", "b", "c", "d"]


def _one_label_fewer(data):
    data["residual_labels"] = data["residual_labels"][:-1]


def _one_output_fewer(data):
    data["decoding"] = data["decoding"][:-1]


def _encoding_lacks(data):
    del data["encoding"]["e"]


def _encoding_gap(data):
    data["encoding"]["e"] = 9


@pytest.mark.parametrize("edit, names", [
    # the wrong type
    (_put("n_heads", "x"), ("n_heads", "'x'")),  # the raw TypeError
    (_put("n_heads", True), ("n_heads",)),  # a bool is not a count
    (_put("key_size", 2.5), ("key_size",)),
    (_put("causal", "yes"), ("causal",)),
    (_put("vocab", "abcde"), ("vocab",)),
    (_put("encoding", [["a", 1]]), ("encoding",)),
    (_put("residual_labels", 28), ("residual_labels",)),
    (_put("decoding", {"a": 0}), ("decoding",)),
    (_put("name", 7), ("name",)),
    (_put("heads", {}), ("heads",)),
    (_put("extra", []), ("extra",)),
    (_head(1, "layer", "1"), ("heads[1].layer",)),
    (_head(0, "text", None), ("heads[0].text", "missing")),
    # out of range
    (_put("n_layers", 0), ("n_layers",)),
    (_put("n_heads", -1), ("n_heads",)),
    (_put("max_seq_len", 0), ("max_seq_len",)),
    (_put("mlp_hidden", 0), ("mlp_hidden",)),
    (_put("name", ""), ("name",)),
    (_vocab_twice, ("vocab", "'a'")),
    (_encoding_lacks, ("encoding", "'e'")),
    (_encoding_gap, ("encoding",)),
    (_put("bos", "a"), ("bos",)),
    (_put("pad", "BOS"), ("pad",)),
    (_put("categorical", False), ("decoding",)),  # a numerical output decodes nothing
    (_head(1, "layer", 2), ("heads[1].layer", "n_layers")),
    (_head(0, "head", 1), ("heads[0].head", "n_heads")),
    (_head(1, "kind", "Map"), ("heads[1].kind",)),
    (_head(0, "pattern", "previous token"), ("heads[0].pattern", "registered measure")),  # a label, not a name
    (_put("format", "mha-viz compiled model 0"), ("format",)),
    # lengths the weights disagree with
    (_one_label_fewer, ("residual_labels", "token_embed")),
    (_one_output_fewer, ("decoding", "unembed")),
    (_put("max_seq_len", 12), ("max_seq_len", "pos_embed")),
    (_put("key_size", 6), ("key_size", "layers.0.attn.query.w")),
    # a field missing, or one this version does not know
    (_remove("n_heads"), ("n_heads", "missing")),
    (_remove("vocab"), ("vocab", "missing")),
    (_remove("format"), ("format",)),
    (_put("colour", "red"), ("colour",)),
])
def test_damaged_config_is_refused_naming_the_field(folder, edit, names):
    _edit_config(folder, edit)
    _refused(folder, CONFIG, *names)


def test_a_config_that_is_not_one_json_object(folder):
    (folder / CONFIG).write_text("{not json")
    _refused(folder, CONFIG, "not valid JSON")
    (folder / CONFIG).write_text("[1, 2]")
    _refused(folder, CONFIG, "object")
    (folder / CONFIG).write_bytes(b"\xff\xfe")
    _refused(folder, CONFIG)


def test_missing_or_unreadable_weights(folder):
    (folder / WEIGHTS).write_bytes(b"not safetensors")
    _refused(folder, WEIGHTS, "could not be read")
    (folder / WEIGHTS).unlink()
    _refused(folder, WEIGHTS, "no weights.safetensors")


def test_a_folder_without_compiled_json_says_what_each_kind_of_folder_needs(folder):
    """Without compiled.json the folder is not taken for a compiled one; with no config.json either, the message
    says what a compiled folder and a Hugging Face folder each hold."""
    (folder / CONFIG).unlink()
    text = _refused(folder, "compiled.json", "weights.safetensors", "config.json", "*.safetensors")
    empty = folder.parent / "empty"
    empty.mkdir()
    assert _refused(empty, "compiled.json", "config.json") == text.replace(str(folder), str(empty))


# -- damages that cost something before they were refused: each is refused before anything is allocated or iterated
# in proportion to what the damaged field claims, so the refusal is quick and small (`_refused_cheaply`).

THREE_HEADS = ASSETS / "compiled" / "three_heads"
PEAK_BYTES = 50 * 2 ** 20  # far below the 3.15 GB that n_layers 1,000,000 cost, and the 4 TB a 1e6 x 1e6 shape asked
SECONDS = 10.0  # far above what each takes (well under a second), far below the 35 s that n_layers 1,000,000 took


def _refused_cheaply(folder: Path, *names: str) -> str:
    """`_refused`, with Python's peak allocation during the load under PEAK_BYTES and its time under SECONDS; the
    shipped folder loads first, so that what the first load imports is not counted."""
    import time
    import tracemalloc

    load_model(str(SHIPPED))
    tracemalloc.start()
    began = time.perf_counter()
    try:
        text = _refused(folder, *names)
        took, (_, peak) = time.perf_counter() - began, tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"the refusal allocated {peak / 2 ** 20:.0f} MB"
    assert took < SECONDS, f"the refusal took {took:.1f} s"
    return text


def _write_text(folder: Path, edit) -> None:
    """compiled.json's text edited as text: for what json.dumps would not write (a 5000-digit number, depth)."""
    (folder / CONFIG).write_text(edit((folder / CONFIG).read_text()))


def test_json_nested_100000_deep_is_refused_naming_the_field(folder):
    _edit_config(folder, _put("extra", {"deep": "HERE"}))
    _write_text(folder, lambda text: text.replace('"HERE"', "[" * 100_000 + "]" * 100_000))
    _refused_cheaply(folder, CONFIG, "extra", "nested")


def test_a_5000_digit_n_layers_is_refused_naming_the_field(folder):
    _write_text(folder, lambda text: text.replace('"n_layers": 2', '"n_layers": ' + "9" * 5000))
    _refused_cheaply(folder, CONFIG, "n_layers", "5000-digit")


def test_n_layers_1000000_is_refused_before_a_million_layers_are_listed(folder):
    _edit_config(folder, _put("n_layers", 1_000_000))
    _refused_cheaply(folder, CONFIG, "n_layers", "1000000", WEIGHTS)


def test_a_shape_of_1e6_by_1e6_is_refused_before_it_is_allocated(folder):
    _edit_weights(folder, _set("token_embed/shape", torch.tensor([10 ** 6, 10 ** 6])))
    _refused_cheaply(folder, WEIGHTS, "token_embed", "(1000000, 1000000)", "(7, 28)")


def test_a_shape_the_config_agrees_with_is_still_bounded_by_the_files_size(folder):
    """max_seq_len and pos_embed damaged together, so that the two files agree on a position table of 2.8e12
    entries (11 TB dense) that an 8 kB file cannot hold: refused before it is allocated."""
    n = 10 ** 11
    _edit_config(folder, _put("max_seq_len", n))
    _edit_weights(folder, _set("pos_embed/shape", torch.tensor([n + 1, 28])))
    _refused_cheaply(folder, WEIGHTS, "pos_embed", "max_seq_len")


def test_a_duplicated_sparse_index_is_refused(folder):
    """The same position stored twice, with a second value 1e5 larger: which one is kept would be up to the
    scatter, so the file is refused rather than read with one weight 1e5 off."""
    def edit(stored):
        index, value = stored["layers.0.attn.query.w/index"], stored["layers.0.attn.query.w/value"]
        stored["layers.0.attn.query.w/index"] = torch.cat([index, index[:1]])
        stored["layers.0.attn.query.w/value"] = torch.cat([value, value[:1] + 1e5])
    _edit_weights(folder, edit)
    _refused(folder, WEIGHTS, "layers.0.attn.query.w", "twice")


def test_a_vocabulary_item_with_a_space_is_refused(folder):
    """Items are typed separated by spaces, so an item holding one could never be typed."""
    def edit(data):
        data["vocab"][0] = "a x"
        data["encoding"]["a x"] = data["encoding"].pop("a")
    _edit_config(folder, edit)
    _refused(folder, CONFIG, "vocab", "'a x'", "space")


def test_a_nan_in_the_decoding_table_is_refused(folder):
    def edit(data):
        data["decoding"][0] = float("nan")  # json.dumps writes the literal NaN, which json.loads reads back
    _edit_config(folder, edit)
    assert "NaN" in (folder / CONFIG).read_text()
    _refused(folder, CONFIG, "decoding", "NaN")


def test_a_written_head_moved_onto_a_head_with_no_query_or_key_weights_is_refused(tmp_path, monkeypatch):
    """three_heads writes its three heads in layer 1; layer 0's attention is empty (all zeros). A written head
    moved there would show its program line on a head that attends uniformly."""
    monkeypatch.setenv("MHA_VIZ_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    copy = Path(shutil.copytree(THREE_HEADS, tmp_path / "three_heads"))
    assert not load_file(str(copy / WEIGHTS))["layers.0.attn.query.w/index"].numel()  # empty, as the test needs
    _edit_config(copy, _head(0, "layer", 0))
    _refused(copy, CONFIG, "heads[0]", "L0 H0", "zero")
