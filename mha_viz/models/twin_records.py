"""What the learned twins ship as and are judged on, read by the registry, the app and the notebook without the
training script (models/twins/train.py, which writes them): where they live, the held-out accuracy a seed must
reach to ship, the record of every seed tried, and the held-out texts no twin is ever trained on."""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from mha_viz.settings import ASSETS

TWIN_ASSETS = ASSETS / "twins"
SHIP_AT = 0.95  # held-out accuracy a twin must reach to ship as having learned the task
HELD_OUT_EVERY = 5  # one text in five (by its hash) is held out
TRIED = "tried.json"


def held_out(text: str) -> bool:
    """Whether `text` is on the held-out side (a fixed function of the text, never trained on)."""
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % HELD_OUT_EVERY == 0


def random_texts(vocab: tuple[str, ...], max_items: int, n: int, seed: int, side_held_out: bool) -> list[str]:
    """n random texts of 1..max_items items of `vocab` (length uniform), all on one side of the split; seeded."""
    rng = random.Random(seed)
    out: list[str] = []
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 200 * n:
            raise ValueError(f"only {len(out)} of {n} texts found on the {'held-out' if side_held_out else 'training'}"
                             f" side: the program's input space ({len(vocab)} items, at most {max_items}) is too "
                             "small; ask for fewer texts")
        text = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, max_items)))
        if held_out(text) == side_held_out:
            out.append(text)
    return out


def held_out_texts(model, n: int = 200, seed: int = 0) -> list[str]:
    """n held-out texts (never trained on by any twin) for `model`, a written model or a twin: random texts of its
    program's vocabulary (`lexicon().words`) up to its length limit; seeded."""
    return random_texts(tuple(model.lexicon().words), model.info.max_tokens - 1, n, 10_000 + seed, True)


def seed_folder(root: str | Path, seed: int) -> Path:
    return Path(root) / f"seed{seed}"


def tried(root: str | Path) -> dict:
    """What `train_twins` recorded in root/tried.json (every seed's held-out accuracy, shipped or not); {} if none."""
    path = Path(root) / TRIED
    return json.loads(path.read_text()) if path.exists() else {}
