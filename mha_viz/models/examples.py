"""The example sentences (assets/examples.json) that models with no corpus of their own offer as one-click examples
(MiniLM, SmolLM2, a user's own model); the tiny model offers its corpus's relations instead."""
from __future__ import annotations

import json

from mha_viz.settings import ASSETS


def shipped_examples() -> list[tuple[str, str, str]]:
    """(button label, sentence, what to look for) triples, as `Model.examples` returns them; [] without the file."""
    path = ASSETS / "examples.json"
    if not path.exists():
        return []
    return [(e["label"], e["text"], e["text"]) for e in json.loads(path.read_text())]
