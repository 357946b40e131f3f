"""Learned twins of the written models: they load by name, rebuild bit for bit, are not shipped below the accuracy
they must reach, and compare_twins reads a written model against itself as a perfect match."""
import json
from dataclasses import replace

import pytest

import mha_viz
from mha_viz import load_model, seeds
from mha_viz.cli import main as cli
from mha_viz.contract import ModelLoadError
from mha_viz.models.registry import is_shipped, twins
from mha_viz.models.twin_records import SHIP_AT, TWIN_ASSETS, held_out, tried
from mha_viz.models.twins.adapter import TwinModel
from mha_viz.models.twins.train import RECIPES, TwinRecipe, sha256, train_twin, train_twins
from mha_viz.settings import ASSETS

PAIRS = {"written-induction": "induction", "written-three-heads": "three_heads"}
# A test-sized schedule: seconds, not the shipped minutes.
SMALL = TwinRecipe(d_model=24, d_mlp=48, steps=25, batch_size=16, n_texts=300, n_held_out=60)


@pytest.fixture(scope="module")
def written():
    return {name: load_model(name) for name in PAIRS}


@pytest.mark.parametrize("name, stem", PAIRS.items())
def test_twins_load_by_name_and_read_like_the_written_model(written, name, stem):
    w = written[name]
    names = twins(name)
    base = "learned-" + stem.replace("_", "-")
    assert names == seeds(base) == [base, f"{base}#seed1", f"{base}#seed2"]
    for n in names:
        assert is_shipped(n)
        twin = load_model(n)
        assert isinstance(twin, TwinModel) and twin.name == n
        assert (twin.n_layers, twin.n_heads) == (w.n_layers, w.n_heads)  # the written model's layers x heads
        assert twin.written_name == name and twin.written_heads() == {}
        assert twin.held_out_accuracy >= SHIP_AT
        text = " ".join(w.config.vocab[i % len(w.config.vocab)] for i in range(w.config.max_seq_len))
        run = twin.run(text)
        out = twin.program_output(run)
        assert len(out) == len(run.tokens) and out[0] == w.config.bos
        assert set(out[1:]) <= set(w.config.decoding)
        assert run.logits is None and run.tokens == w.run(text).tokens
        # The recorded recipe is the one `make train-twins` runs, so it rebuilds these weights.
        recorded = json.loads((TWIN_ASSETS / stem / "seed0" / "twin.json").read_text())["recipe"]
        assert recorded == json.loads(json.dumps(RECIPES[stem].__dict__))


def test_histogram_has_no_twin_and_unknown_seeds_say_why():
    assert twins("written-histogram") == [] and twins("tiny") == []
    assert not is_shipped("learned-induction#seed7")
    with pytest.raises(ModelLoadError, match="seed 7"):
        load_model("learned-induction#seed7")


def test_training_rebuilds_bit_for_bit_from_a_fixed_seed(written, tmp_path):
    w = written["written-induction"]
    a = train_twin(w, tmp_path / "a", seed=1, recipe=SMALL)
    b = train_twin(w, tmp_path / "b", seed=1, recipe=SMALL)
    train_twin(w, tmp_path / "c", seed=2, recipe=SMALL)
    for f in ("model.safetensors", "twin.json", "config.json"):
        assert sha256(tmp_path / "a" / f) == sha256(tmp_path / "b" / f)
    assert sha256(tmp_path / "a" / "model.safetensors") != sha256(tmp_path / "c" / "model.safetensors")
    assert a == b and a["held_out"]["positions"] > 0
    twin = load_model(str(tmp_path / "a"))  # a folder written by the trainer loads by its path
    assert twin.program_output(twin.run("a b a"))[0] == "BOS"


def test_held_out_texts_are_never_trained_on(written, tmp_path):
    from mha_viz.models.twin_records import held_out_texts, random_texts

    w = written["written-three-heads"]
    train = random_texts(w.config.vocab, w.config.max_seq_len, 400, 5, False)
    test = held_out_texts(w, 100)
    assert not set(train) & set(test)
    assert all(held_out(t) for t in test) and not any(held_out(t) for t in train)


def test_a_twin_below_the_bar_is_not_shipped(written, tmp_path):
    w = written["written-three-heads"]
    rows = train_twins(w, tmp_path, seeds=(0,), recipe=replace(SMALL, steps=1), quiet=True)
    assert rows[0]["accuracy"] < SHIP_AT and rows[0]["shipped"] is False
    assert not (tmp_path / "seed0").exists()  # removed: it did not learn the task
    assert tried(tmp_path)["seeds"][0]["accuracy"] == rows[0]["accuracy"]


def test_cli_trains_twins_of_any_compiled_folder(tmp_path, capsys):
    import shutil

    folder = tmp_path / "my_program"
    shutil.copytree(ASSETS / "compiled" / "induction", folder)
    code = cli(["train-twin", str(folder), "--seeds", "2", "--steps", "2", "--texts", "100", "--out",
                str(tmp_path / "out")])
    said = capsys.readouterr()
    assert code == 1 and "0 of 2 twins written" in said.out  # two steps learn nothing: nothing shipped, said so
    assert [r["seed"] for r in tried(tmp_path / "out")["seeds"]] == [0, 1]
    code = cli(["train-twin", str(tmp_path / "nowhere"), "--seeds", "1"])
    assert code == 2 and "nowhere" in capsys.readouterr().err
    code = cli(["train-twin", str(ASSETS / "compiled" / "histogram"), "--seeds", "1", "--out", str(tmp_path / "h")])
    assert code == 2 and "not causal" in capsys.readouterr().err  # a causal stack cannot see what it reads


@pytest.mark.parametrize("name", PAIRS)
def test_a_written_model_against_itself_is_a_perfect_match(written, name):
    c = mha_viz.compare_twins(written[name], written[name], n_texts=40)
    assert c.perfect
    assert c.accuracy_written == c.accuracy_learned == 1.0
    for t in c.heads:
        assert t.matches == ((t.written, 0.0),) and t.matched
        assert t.learned_names[t.written] == t.written_names
        assert t.written_off == t.learned_off
    assert c.path_matches is (True if name == "written-induction" else None)
    assert any("as clean as the written model" in s for s in c.sentences())


def test_the_induction_twin_against_its_written_model(written):
    c = mha_viz.compare_twins(written["written-induction"], "learned-induction", n_texts=60)
    assert not c.perfect  # learned attention is never exactly the program's
    assert c.accuracy_learned >= SHIP_AT
    assert [t.matched for t in c.heads] == [True, True]
    assert c.path == ((0, 0), (1, 0), "k")
    assert c.path_matches is True and c.learned_top[:2] == ((0, 0), (1, 0))
    rows = c.rows()
    assert [r["written head"] for r in rows] == ["L0 H0", "L1 H0"]
    assert all("bits" in r["best-matching learned head(s)"] for r in rows)


def test_compare_twins_refuses_models_that_are_not_twins(written):
    from mha_viz.contract import InputError

    with pytest.raises(InputError, match="layers x"):
        mha_viz.compare_twins(written["written-induction"], "learned-three-heads", n_texts=5)
    with pytest.raises(InputError, match="no written heads"):
        mha_viz.compare_twins("learned-induction", "learned-induction#seed1", n_texts=5)
