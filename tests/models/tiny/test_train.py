"""Training is reproducible bit for bit (weights, checkpoints, log), saves the steps asked for, and the committed
weights and checkpoints are small and load."""
import json
from dataclasses import replace

import torch
from safetensors.torch import load_file

from mha_viz.models.tiny.adapter import checkpoint_steps, load_tiny
from mha_viz.models.tiny.architecture import TinyConfig, build_model
from mha_viz.models.tiny.train import LOG, TrainConfig, checkpoint_path, sha256, train
from mha_viz.models.tiny.train import TINY_ASSETS as ASSETS
from mha_viz.settings import ASSETS as ALL_ASSETS

SMALL = TinyConfig(n_layers=2, n_heads=4, d_model=32, max_len=32, d_mlp=64)
SHORT = TrainConfig(steps=30, batch_size=8, random_share=0.3, checkpoints=(0, 5, 10), log_every=10, warm_steps=8)


def files(folder) -> list[int]:
    return sorted(int(p.stem.removeprefix("step-")) for p in (folder / "checkpoints").glob("step-*.safetensors"))


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.lm.state_dict().items() if not (k == "head.weight" and model.lm.cfg.tied)}


def test_two_short_runs_give_identical_weights_checkpoints_and_log(tmp_path):
    a = train(tmp_path / "a", SMALL, SHORT, quiet=True)
    b = train(tmp_path / "b", SMALL, SHORT, quiet=True)
    assert sha256(a) == sha256(b)
    for name in ("config.json", "vocab.json", LOG):
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()
    for step in (5, 10):  # the first and the last step are derived, not stored
        assert sha256(checkpoint_path(tmp_path / "a", step)) == sha256(checkpoint_path(tmp_path / "b", step))
    assert files(tmp_path / "a") == [5, 10]
    assert checkpoint_steps(tmp_path / "a") == [0, 5, 10, 30]  # the last step is always saved
    # And training did something: the weights moved away from the seeded start.
    c = train(tmp_path / "c", SMALL, TrainConfig(steps=1, batch_size=8), quiet=True)
    assert sha256(c) != sha256(a)


def test_the_first_and_last_steps_are_float16_copies_of_the_start_and_the_end(tmp_path):
    """Step 0 and the last step have no file: load_tiny derives them, as the float16 file would have held them."""
    out = tmp_path / "run"
    final = load_file(str(train(out, SMALL, SHORT, quiet=True)))
    start = build_model(replace(SMALL, vocab_size=final["tok.weight"].shape[0])).state_dict()
    first, last = weights(load_tiny(folder=out, step=0)), weights(load_tiny(folder=out, step=30))
    for name, value in start.items():
        assert torch.equal(first[name], value.half().float()), name  # step 0 is the seeded initialisation
    for name, value in final.items():
        assert torch.equal(last[name], value.half().float()), name  # the last step is the shipped weights
    middle = load_file(str(checkpoint_path(out, 5)))
    assert all(t.dtype == torch.float16 for t in middle.values())
    assert all(torch.equal(weights(load_tiny(folder=out, step=5))[k], v.float()) for k, v in middle.items())
    log = json.loads((out / LOG).read_text())
    assert log["steps"] == [10, 20, 30] and len(log["loss"]) == 3 and log["checkpoints"] == [0, 5, 10, 30]
    assert all(v > 0 for v in log["loss"])


def test_a_rerun_with_other_steps_leaves_no_stale_checkpoints(tmp_path):
    train(tmp_path, SMALL, SHORT, quiet=True)
    train(tmp_path, SMALL, TrainConfig(steps=4, batch_size=8, checkpoints=(0, 2), warm_steps=2), quiet=True)
    assert files(tmp_path) == [2] and checkpoint_steps(tmp_path) == [0, 2, 4]


def test_committed_assets_exist_are_small_and_load():
    weights = ASSETS / "model.safetensors"
    assert weights.exists(), "run `make train` and commit assets/tiny/"
    cfg = TinyConfig.from_json((ASSETS / "config.json").read_text())
    state = load_file(str(weights))
    assert state["tok.weight"].shape == (cfg.vocab_size, cfg.d_model)
    assert 2 <= cfg.n_layers <= 4 and 4 <= cfg.n_heads <= 8 and 64 <= cfg.d_model <= 128
    # A tied LM head (TinyConfig.tied): the (V, D) table is in the file once, as tok.weight.
    assert "head.weight" not in state or not cfg.tied
    # Issue 51's budget: all of assets/ under 30 MB with every seed and checkpoint. Weights are most of it: the
    # shipped recipe (float32, 7 float16 checkpoints) and three more seeds (float16, 3 checkpoints each).
    total = sum(p.stat().st_size for p in ALL_ASSETS.rglob("*.safetensors"))
    print(f"weights in assets/: {total / 1e6:.2f} MB")
    assert total <= 25 * 1024 * 1024, "all weights in assets/, checkpoints and seeds included, stay under 25 MB"
    # The whole of assets/ (weights, the English, probe files, logs, pictures), about as `du` counts it: whole
    # 4 KiB blocks per file, one per folder.
    every = sum(-(-p.stat().st_size // 4096) * 4096 if p.is_file() else 4096
                for p in [ALL_ASSETS, *ALL_ASSETS.rglob("*")])
    print(f"assets/: {every / 2**20:.2f} MiB")
    assert every < 30 * 2**20, "all of assets/ stays under 30 MB"


def test_committed_checkpoints_cover_the_run():
    log = json.loads((ASSETS / LOG).read_text())
    saved = checkpoint_steps(ASSETS)
    assert saved == log["checkpoints"] and files(ASSETS) == saved[1:-1]
    assert len(saved) >= 6 and saved[0] == 0 and saved[-1] == log["train_config"]["steps"] == log["steps"][-1]
    final = load_file(str(ASSETS / "model.safetensors"))
    last = weights(load_tiny(step=saved[-1]))
    assert all(torch.equal(last[k], v.half().float()) for k, v in final.items())


def test_training_reaches_every_row_of_the_position_table(tmp_path):
    """Texts are n_positions + 1 tokens, so the margin past max_len is trained too (TinyConfig.train_margin): every
    row of the position table, the last included, moved away from the seeded start."""
    cfg = TrainConfig(steps=20, batch_size=8, checkpoints=(0,), log_every=10, warm_steps=10)
    train(tmp_path / "m", SMALL, cfg, quiet=True)
    start = weights(load_tiny(folder=tmp_path / "m", step=0))["pos.weight"]  # (P, D)
    end = weights(load_tiny(folder=tmp_path / "m", step=20))["pos.weight"]  # (P, D)
    assert start.shape[0] == SMALL.n_positions > SMALL.max_len
    moved = (end - start).abs().amax(dim=1)  # (P,)
    assert bool((moved > 0).all()), f"rows never trained: {(moved == 0).nonzero().flatten().tolist()}"
