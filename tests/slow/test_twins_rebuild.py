"""`make train-twins` rebuilds the shipped twins bit for bit: one shipped twin retrained with its recorded recipe."""
from mha_viz import load_model
from mha_viz.models.twins.train import RECIPES, TWIN_ASSETS, sha256, train_twin


def test_the_shipped_induction_twin_rebuilds_bit_for_bit(tmp_path):
    written = load_model("written-induction")
    train_twin(written, tmp_path, seed=0, recipe=RECIPES["induction"])
    shipped = TWIN_ASSETS / "induction" / "seed0"
    for name in ("model.safetensors", "twin.json", "config.json"):
        assert sha256(tmp_path / name) == sha256(shipped / name), name
