"""One engine for every model: the contract declares every keyword a page passes to `Model.run`, every model's run
takes the same ones, what a new family must write is abstract, and the kinds of an encoder-decoder model are named
once, in the contract (issue 53, item 1)."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from mha_viz.contract import Model

PKG = Path(__file__).resolve().parents[2] / "mha_viz"
KIND_NAMES = {"Encoder", "Decoder", "Cross"}
# What app/cache.get_run hands Model.run besides the text and the heads off, for either kind of model.
PAGE_KEYWORDS = {"logits_at", "on_layer", "target", "ablate_cross", "patch_cross"}


def _kind_definitions(root: Path) -> list[str]:
    """Every module-level assignment under `root` whose value is a kind's name or holds one, as 'path:line'."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            names = {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
            if names & KIND_NAMES:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_the_kinds_are_named_once_in_the_contract():
    """Encoder, Decoder and Cross are defined in mha_viz/contract/kinds.py only; the grid, the models and the
    analysis read them from there."""
    from mha_viz.contract import kinds
    from mha_viz.web import kinds as web_kinds

    where = {found.partition(":")[0] for found in _kind_definitions(PKG)}
    assert where == {"mha_viz/contract/kinds.py"}, _kind_definitions(PKG)
    assert web_kinds.KINDS is kinds.KINDS


def test_the_kind_check_finds_a_second_definition(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text('CROSS = "Cross"\nOTHER = ("x", "Decoder")\nplain = "Cross section"\n')
    assert _kind_definitions(tmp_path / "pkg") == ["pkg/a.py:1", "pkg/a.py:2"]


def _model_classes() -> list[type]:
    from mha_viz.models.hf.seq2seq import Seq2SeqModel
    from mha_viz.models.interventions import EditableModel

    return [EditableModel, Seq2SeqModel]


def test_model_run_declares_what_the_page_passes_and_every_engine_takes_it():
    """`Model.run` names every keyword app/cache.get_run passes, and each implementation of it takes the contract's
    parameters, in its order, with its defaults."""
    contract = inspect.signature(Model.run).parameters
    assert PAGE_KEYWORDS <= set(contract), f"Model.run does not declare {PAGE_KEYWORDS - set(contract)}"
    for cls in _model_classes():
        own = inspect.signature(cls.run).parameters
        assert list(own)[:len(contract)] == list(contract), cls.__name__
        assert [p.default for p in own.values()][:len(contract)] == [p.default for p in contract.values()], \
            cls.__name__


def test_what_a_new_family_writes_is_abstract():
    """A family that leaves out `encoding` or `forward` cannot be made: Python says which at construction, not a
    NotImplementedError at the first run."""
    from mha_viz.models.interventions import EditableModel

    assert {"encoding", "forward"} <= EditableModel.__abstractmethods__

    class Half(EditableModel):
        def encoding(self, text):
            raise AssertionError("not reached")

    with pytest.raises(TypeError, match="forward"):
        Half()
