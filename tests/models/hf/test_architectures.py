"""The architecture matrix: one tiny random model per transformers architecture (tests/models/hf/architectures.py),
built here, loaded as a user's folder, and checked against transformers itself (tests/models/hf/matrix.py says
what each check compares). What fails today is marked `xfail(strict=True)` with its reason, so a fix flips it and
a regression fails; docs/models.md's compatibility table is rendered from the same marks (`compat_table.py`)."""
from __future__ import annotations

import functools

import pytest

from tests.models.hf import matrix
from tests.models.hf.architectures import ARCHS, REFUSED, build
from tests.models.hf.expected import FAILING, NOT_LOADING


def expected(arch: str, check: str) -> str | None:
    """Why `check` fails on `arch` today, or None where it passes."""
    if arch in NOT_LOADING:
        return NOT_LOADING[arch]
    return FAILING.get((arch, check))


def _cases():
    for arch in ARCHS:  # architecture by architecture, so one model at a time is held
        for check in ("load", *matrix.CHECKS):
            why = expected(arch.name, check)
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            yield pytest.param(arch.name, check, marks=marks, id=f"{arch.name}-{check}")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("architectures")


@functools.lru_cache(maxsize=1)
def _loaded(name: str, root) -> matrix.Loaded | Exception:
    """The architecture built and loaded once (the last one only is kept), or what loading raised."""
    from tests.models.hf.architectures import BY_NAME

    arch = BY_NAME[name]
    with matrix.offline():
        folder = build(arch, root / name.replace(" ", "_"), (matrix.TEXT, matrix.SOURCE, matrix.OTHER))
        try:
            return matrix.load(arch, folder)
        except Exception as err:  # every check of an architecture that does not load fails with this
            return err


@pytest.mark.parametrize("arch,check", list(_cases()))
def test_architecture(arch, check, root):
    loaded = _loaded(arch, root)
    if isinstance(loaded, Exception):
        raise loaded
    if check != "load":
        with matrix.offline():
            matrix.run_check(loaded, check)


@pytest.mark.parametrize("arch", [*sorted(NOT_LOADING), *(a.name for a in REFUSED)])
def test_refused_before_any_weights_load(arch, root, monkeypatch):
    """A refused architecture is refused from its config alone, with the reason, and no model class is built."""
    import transformers

    import mha_viz
    from tests.models.hf.architectures import BY_NAME

    folder = build({**BY_NAME, **{a.name: a for a in REFUSED}}[arch], root / f"refused-{arch}")

    def no_weights(*args, **kwargs):
        raise AssertionError("weights were loaded before the architecture was refused")

    for auto in (transformers.AutoModel, transformers.AutoModelForCausalLM, transformers.AutoModelForMaskedLM):
        monkeypatch.setattr(auto, "from_pretrained", no_weights)
    with matrix.offline(), pytest.raises(mha_viz.ModelLoadError, match="attention interface") as refused:
        mha_viz.load_model(str(folder))
    assert "Try a model" in str(refused.value)


def test_the_models_page_table_is_current():
    from tests.models.hf import compat_table

    assert compat_table.current() == compat_table.render(), (
        "docs/models.md's architecture table differs from the matrix's expectations (tests/models/hf/expected.py); "
        "regenerate it with: python -m tests.models.hf.compat_table")
