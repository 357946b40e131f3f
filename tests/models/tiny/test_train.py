"""Training is reproducible bit for bit, and the committed weights are small and load."""

from safetensors.torch import load_file

from mha_viz.models.tiny.architecture import TinyConfig
from mha_viz.models.tiny.train import TINY_ASSETS as ASSETS, TrainConfig, sha256, train

SMALL = TinyConfig(n_layers=2, n_heads=4, d_model=32, max_len=32, d_mlp=64)


def test_two_short_runs_give_identical_weights(tmp_path):
    cfg = TrainConfig(steps=30, batch_size=8)
    a = train(tmp_path / "a", SMALL, cfg, quiet=True)
    b = train(tmp_path / "b", SMALL, cfg, quiet=True)
    assert sha256(a) == sha256(b)
    for name in ("config.json", "vocab.json"):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    # And training did something: the weights moved away from the seeded start.
    c = train(tmp_path / "c", SMALL, TrainConfig(steps=1, batch_size=8), quiet=True)
    assert sha256(c) != sha256(a)


def test_committed_assets_exist_are_small_and_load():
    weights = ASSETS / "model.safetensors"
    assert weights.exists(), "run `make train` and commit assets/tiny/"
    assert weights.stat().st_size <= 5 * 1024 * 1024
    cfg = TinyConfig.from_json((ASSETS / "config.json").read_text())
    state = load_file(str(weights))
    assert state["tok.weight"].shape == (cfg.vocab_size, cfg.d_model)
    assert 2 <= cfg.n_layers <= 4 and 4 <= cfg.n_heads <= 8 and 64 <= cfg.d_model <= 128
