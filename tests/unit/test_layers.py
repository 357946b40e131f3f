"""The folders are the layers and imports point one way: app -> plotting -> analysis -> models -> contract/settings.
Only the app imports streamlit. Checked on the source, so a shortcut across layers fails here, not in review."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "mha_viz"
# What each layer must not import (the layers above it).
FORBIDDEN = {
    "models": ("mha_viz.analysis", "mha_viz.plotting", "mha_viz.app", "streamlit"),
    "analysis": ("mha_viz.plotting", "mha_viz.app", "streamlit"),
    "plotting": ("mha_viz.app", "mha_viz.notebook", "mha_viz.web", "streamlit"),
    "contract.py": ("mha_viz.models", "mha_viz.analysis", "mha_viz.plotting", "mha_viz.app", "streamlit"),
    "settings.py": ("mha_viz.", "streamlit"),
}


# The tiny model's probe command measures its checkpoints with the page's pair scorers (analysis/pairs.py: one
# definition of each score); it is a consumer of analysis/ that issue 18 moves out of models/. Only that import.
EXEMPT = {("models/tiny/probes.py", "mha_viz.analysis.pairs")}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module if node.level == 0 else "mha_viz." + node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_imports_point_one_way(layer):
    target = PKG / layer
    files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
    assert files, f"{target} is missing"
    bad = [f"{f.relative_to(PKG.parent)} imports {name}" for f in files for name in _imports(f)
           if name.startswith(FORBIDDEN[layer]) and (f.relative_to(PKG).as_posix(), name) not in EXEMPT]
    assert not bad, "\n".join(bad)


def test_every_view_is_registered_and_has_render():
    from mha_viz.app import views

    files = {p.stem for p in (PKG / "app" / "views").glob("*.py") if p.stem != "__init__"}
    registered = {fn.__module__.rsplit(".", 1)[-1] for fn in views.VIEWS.values()}
    assert files == registered, f"view files without a registry line, or the reverse: {files ^ registered}"
    assert all(fn.__name__ == "render" for fn in views.VIEWS.values())


ADAPTERS = ("tiny", "bert", "hf")  # mha_viz/models/<one model kind>/


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_app_never_imports_one_models_package():
    """Views ask the model (its declared capabilities), never reach into tiny/, bert/ or hf/."""
    banned = tuple(f"mha_viz.models.{kind}" for kind in ADAPTERS)
    bad = [f"{f.relative_to(PKG.parent)} imports {name}" for f in sorted((PKG / "app").rglob("*.py"))
           for name in _imports(f) if name.startswith(banned)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("kind", ADAPTERS)
def test_no_adapter_imports_a_sibling_adapter(kind):
    siblings = tuple(f"mha_viz.models.{other}" for other in ADAPTERS if other != kind)
    bad = [f"{f.relative_to(PKG.parent)} imports {name}" for f in sorted((PKG / "models" / kind).rglob("*.py"))
           for name in _imports(f) if name.startswith(siblings)]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    """No module imports, directly or through others, a module that imports it back (lazy imports inside
    functions count too: they hide a cycle, they do not remove it). A package's __init__ re-exporting its own
    submodules is not an edge."""
    files = sorted(PKG.rglob("*.py"))
    modules = {_module(f): f for f in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for target in _imports(path):
            while target and target not in modules:  # `from mha_viz.models.x import y`: the module x
                target = target.rpartition(".")[0]
            is_own_child = path.name == "__init__.py" and target.startswith(name + ".")
            if target and target != name and not is_own_child:
                edges.add(target)
        graph[name] = edges

    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
