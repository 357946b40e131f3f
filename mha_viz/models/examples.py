"""The example sentences (assets/examples.json) that models with no corpus of their own offer as one-click examples
(MiniLM, SmolLM2, a user's own model); the tiny model offers its corpus's relations instead."""
from __future__ import annotations

import json

from mha_viz.contract import Model
from mha_viz.settings import ASSETS


def shipped_examples() -> list[tuple[str, str, str]]:
    """(button label, sentence, what to look for) triples, as `Model.examples` returns them; [] without the file."""
    path = ASSETS / "examples.json"
    if not path.exists():
        return []
    return [(e["label"], e["text"], e["text"]) for e in json.loads(path.read_text())]


def shipped_pairs() -> list[tuple[str, str, str]]:
    """(button label, source, target) for an encoder-decoder model: the shipped sentences the file gives a target
    (`"target"`: the sentence in German, what a translation model's decoder reads); [] without the file."""
    path = ASSETS / "examples.json"
    if not path.exists():
        return []
    return [(f"{e['label']} → German", e["text"], e["target"]) for e in json.loads(path.read_text()) if e.get("target")]


def census_texts(model: Model) -> tuple[str, ...]:
    """The natural text a census of `model` reads when none is given: its own example sentences, the shipped ones
    for a model without its own. The analysis layer loads nothing, so its callers (`mha_viz.head_census`, the Census
    view) hand these in."""
    texts = [t for _, t, _ in model.examples()] or [t for _, t, _ in shipped_examples()]
    return tuple(texts) or ("The cat sat on the mat.",)
