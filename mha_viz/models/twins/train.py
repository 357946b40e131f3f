"""Train learned twins of a written model, reproducibly, on the CPU: the in-repo stack from scratch on input/output
pairs the compiled model itself produces (run in torch, decoded with its `program_output`; no jax).

    python -m mha_viz.models.twins.train                  # every shipped program's twins (make train-twins)
    python -m mha_viz.models.twins.train induction        # one of them
    mha-viz train-twin COMPILED_FOLDER --seeds 3 --out DIR   # any compiled folder, one the user compiled included

Inputs: random texts of the program's vocabulary, of every length up to its limit. Each text falls on the training
or the held-out side by a hash of the text itself (one in five held out), so no held-out text is ever trained on,
whichever seed draws it. Labels: the program's output at each position; a position where the program has no value
(`program_output` gives None: an induction query whose token never came before) and BOS are not scored.

Same seed, same code, same torch version -> bit-identical weights (as `models.tiny.train`: fixed data, fixed
order, one thread, deterministic mode). Seeds change the initialisation and the order batches are visited in; the
data and the schedule stay. A twin whose held-out accuracy stays below `SHIP_AT` is not written as a loadable
folder: `tried.json` beside the seeds records what every seed reached, shipped or not.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from safetensors.torch import save_file

from mha_viz.models.tiny.architecture import TinyConfig
from mha_viz.models.tiny.train import THREADS
from mha_viz.models.twin_records import (
    SHIP_AT,
    TRIED,
    TWIN_ASSETS,
    random_texts,
    seed_folder,
)
from mha_viz.models.twins.adapter import CONFIG_FILE, FORMAT, TWIN_FILE, WEIGHTS_FILE
from mha_viz.models.twins.architecture import TwinLM, build_twin

IGNORE = -100  # label of a position that is not scored


@dataclass(frozen=True)
class TwinRecipe:
    # Small: assets/ keeps all its weights under 10 MB (tests/models/tiny/test_train.py), and the twins share what
    # tiny and its seeds leave. 24 (3 heads of 8) and 16 (1 head) learn the shipped programs to 100% on every seed,
    # as 48 and 32 did at three times the bytes.
    d_model: int = 24
    d_mlp: int = 48  # 2 x d_model: the programs are small
    steps: int = 1500
    batch_size: int = 64
    lr: float = 3e-3
    warmup: int = 100  # linear warm-up, then cosine decay to 10% of lr
    weight_decay: float = 0.01
    n_texts: int = 20_000  # training texts, generated once (held-out ones are drawn apart)
    n_held_out: int = 1000
    data_seed: int = 1234
    # Length-scaled attention (TinyConfig.length_scaled) as in tiny: the same stack, nothing changed for the twin.
    length_scaled: bool = True


# Per shipped program: what the stack needs beyond the default (the written model's layers x heads are taken from
# it). histogram is not trained: its program is not causal (each position counts the later equal tokens too), and
# the in-repo stack is; a causal twin cannot see what the program reads.
RECIPES: dict[str, TwinRecipe] = {
    "induction": TwinRecipe(d_model=16, d_mlp=32),
    "three_heads": TwinRecipe(),
}
SEEDS = (0, 1, 2)  # seed 0 ships as learned-<program>, the others as learned-<program>#seed<N>


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def labelled(written, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The texts as ids (N, T) right-padded with the written model's pad id, and the program's output at each
    position as an index into its output values (N, T), IGNORE at BOS, padding and where the program has no value;
    from the written model run in torch and decoded with `program_output`."""
    cfg = written.config
    values = {v: i for i, v in enumerate(cfg.decoding)}
    outputs = written.run_many(texts, lambda i, run: written.program_output(run))
    n_pos = cfg.max_seq_len + 1
    ids = torch.full((len(texts), n_pos), cfg.encoding[cfg.pad], dtype=torch.long)  # (N, T)
    labels = torch.full((len(texts), n_pos), IGNORE, dtype=torch.long)  # (N, T)
    for i, (text, out) in enumerate(zip(texts, outputs)):
        items = text.split()
        ids[i, : len(items) + 1] = torch.tensor([cfg.encoding[cfg.bos]] + [cfg.encoding[t] for t in items])
        for t, v in enumerate(out[1:], start=1):
            if v is not None:
                labels[i, t] = values[v]
    return ids, labels


def model_config(written, recipe: TwinRecipe, seed: int) -> TinyConfig:
    cfg = written.config
    if not cfg.causal:
        raise ValueError(f"{cfg.name} is not causal (each position reads later ones too), and the in-repo stack is: "
                         "a causal twin cannot see what the program reads. Train twins of causal programs only")
    if recipe.d_model % cfg.n_heads:
        raise ValueError(f"d_model {recipe.d_model} is not divisible by {cfg.n_heads} heads; pick a multiple")
    return TinyConfig(vocab_size=len(cfg.encoding), n_layers=cfg.n_layers, n_heads=cfg.n_heads,
                      d_model=recipe.d_model, max_len=cfg.max_seq_len + 1, train_margin=0, d_mlp=recipe.d_mlp,
                      length_scaled=recipe.length_scaled, seed=seed)


def accuracy(lm: TwinLM, ids: torch.Tensor, labels: torch.Tensor) -> float:
    """The share of scored positions whose readout names the program's value."""
    with torch.no_grad():
        scores, _, _ = lm(ids, patterns=False)  # (N, T, O)
    scored = labels != IGNORE  # (N, T)
    return float((scores.argmax(-1)[scored] == labels[scored]).float().mean())


def _state(lm: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to(torch.float16).contiguous() for k, v in sorted(lm.state_dict().items())}


def train_twin(written, out: str | Path, seed: int = 0, recipe: TwinRecipe = TwinRecipe(),
               data: tuple | None = None) -> dict:
    """Train one twin of `written` (a compiled model) from `seed` into `out`; returns its twin.json contents.
    `data` ((ids, labels) for training, (ids, labels) held out), when the caller made it once for several seeds."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    try:
        return _train(written, Path(out), seed, recipe, data or make_data(written, recipe))
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def make_data(written, recipe: TwinRecipe) -> tuple:
    cfg = written.config
    train_texts = random_texts(cfg.vocab, cfg.max_seq_len, recipe.n_texts, recipe.data_seed, False)
    test_texts = random_texts(cfg.vocab, cfg.max_seq_len, recipe.n_held_out, recipe.data_seed + 1, True)
    return labelled(written, train_texts), labelled(written, test_texts)


def _train(written, out: Path, seed: int, recipe: TwinRecipe, data: tuple) -> dict:
    (ids, labels), (test_ids, test_labels) = data
    cfg = written.config
    lm = build_twin(model_config(written, recipe, seed), len(cfg.decoding))
    lm.train()
    decay, no_decay = [], []
    for name, p in lm.named_parameters():  # as tiny: decay matrices, not biases, gains or embeddings
        (decay if p.dim() >= 2 and "tok" not in name and "pos" not in name else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": recipe.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=recipe.lr, betas=(0.9, 0.98))

    def lr_at(step: int) -> float:
        if step < recipe.warmup:
            return recipe.lr * (step + 1) / recipe.warmup
        t = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
        return recipe.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    order_rng = random.Random(seed)
    order: list[int] = []
    losses: list[float] = []
    window: list[float] = []
    for step in range(recipe.steps):
        if len(order) < recipe.batch_size:  # a fresh deterministic shuffle each pass
            perm = list(range(len(ids)))
            order_rng.shuffle(perm)
            order += perm
        idx, order = order[: recipe.batch_size], order[recipe.batch_size:]
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        scores, _, _ = lm(ids[idx], patterns=False)  # (B, T, O)
        loss = torch.nn.functional.cross_entropy(scores.reshape(-1, scores.shape[-1]), labels[idx].reshape(-1),
                                                 ignore_index=IGNORE)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 1.0)
        opt.step()
        window.append(loss.item())
        if len(window) == 50 or step == recipe.steps - 1:
            losses.append(round(sum(window) / len(window), 4))
            window = []
    lm.eval()
    state = _state(lm)
    # Measured on the weights as shipped (rounded to float16), so the figure is the loaded model's.
    lm.load_state_dict({k: v.float() for k, v in state.items()})
    acc = accuracy(lm, test_ids, test_labels)
    twin = {"format": FORMAT, "written": written.name, "program": cfg.name, "vocab": list(cfg.vocab),
            "encoding": dict(cfg.encoding), "bos": cfg.bos, "pad": cfg.pad, "max_seq_len": cfg.max_seq_len,
            "decoding": list(cfg.decoding), "seed": seed, "recipe": asdict(recipe),
            "held_out": {"accuracy": round(acc, 6), "texts": int(len(test_ids)),
                         "positions": int((test_labels != IGNORE).sum()), "ship_at": SHIP_AT},
            "loss_every_50_steps": losses}
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / CONFIG_FILE).write_text(lm.cfg.to_json() + "\n")
    (out / TWIN_FILE).write_text(json.dumps(twin, indent=1, ensure_ascii=False) + "\n")
    return twin


def train_twins(written, root: str | Path, seeds=SEEDS, recipe: TwinRecipe = TwinRecipe(),
                quiet: bool = False) -> list[dict]:
    """Train `written`'s twins from each seed into root/seed<N>; a seed below SHIP_AT held-out accuracy is removed
    again (not shipped as if it had learned), and root/tried.json lists every seed's figure. Returns those rows."""
    root = Path(root)
    model_config(written, recipe, 0)  # a program no twin can copy is refused before its data is made
    data = make_data(written, recipe)
    rows = []
    for seed in seeds:
        folder = seed_folder(root, seed)
        if folder.exists():
            shutil.rmtree(folder)
        twin = train_twin(written, folder, seed, recipe, data)
        acc = twin["held_out"]["accuracy"]
        shipped = acc >= SHIP_AT
        if not shipped:
            shutil.rmtree(folder)
        rows.append({"seed": seed, "accuracy": acc, "positions": twin["held_out"]["positions"], "shipped": shipped,
                     "final_loss": twin["loss_every_50_steps"][-1]})
        if not quiet:
            print(f"{written.name} twin, seed {seed}: {100 * acc:.2f}% of {twin['held_out']['positions']} held-out "
                  f"positions right" + ("" if shipped else f", below {100 * SHIP_AT:.0f}%: not shipped"))
    (root / TRIED).write_text(json.dumps({"written": written.name, "recipe": asdict(recipe), "ship_at": SHIP_AT,
                                          "seeds": rows}, indent=1) + "\n")
    return rows


def recipe_for(stem: str, steps: int | None = None, n_heads: int = 1, texts: int | None = None) -> TwinRecipe:
    """The shipped program `stem`'s recipe, else the default one with d_model rounded up to a multiple of
    `n_heads` (a program the user compiled); `steps` replaces the schedule's length, `texts` the training texts."""
    recipe = RECIPES.get(stem)
    if recipe is None:
        d = -(-TwinRecipe.d_model // n_heads) * n_heads
        recipe = TwinRecipe(d_model=d, d_mlp=2 * d)
    recipe = recipe if steps is None else replace(recipe, steps=steps)
    return recipe if texts is None else replace(recipe, n_texts=texts)


def main(argv: list[str] | None = None) -> None:
    from mha_viz.models.registry import load_model  # the written model by its name: no adapter reaches a sibling

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("programs", nargs="*", default=list(RECIPES), help=f"shipped programs ({', '.join(RECIPES)})")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the recipe's)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    for stem in args.programs:
        if stem not in RECIPES:
            parser.error(f"{stem!r} has no twin recipe; pick from {', '.join(RECIPES)} (histogram is not causal)")
        written = load_model(f"written-{stem.replace('_', '-')}")
        train_twins(written, TWIN_ASSETS / stem, SEEDS, recipe_for(stem, args.steps), args.quiet)


if __name__ == "__main__":
    main()
