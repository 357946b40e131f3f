"""The folders are the layers and imports point one way: app -> plotting -> analysis -> models -> contract/settings.
Only the app imports streamlit. The app and the notebook import nothing from each other: what both hosts of the
head grid share is mha_viz.web, below both. A head's name is spelled by mha_viz.names only. Checked on the source,
so a shortcut across layers fails here, not in review."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "mha_viz"
# What each layer must not import (the layers above it). From the top: the two hosts (app/, notebook/), the browser
# code both mount (web/), figures (plotting/), the probe command (tiny_probes.py, a consumer of analysis and the tiny
# model), analysis/ (pure functions on tensors, handed any model it runs: never loads one), models/, and at the
# bottom contract.py, training_record.py (the tiny model's record types), heads.py (per-head slicing), names.py
# and settings.py.
HOSTS = ("mha_viz.app", "mha_viz.notebook", "streamlit")
FORBIDDEN = {
    "tiny_probes.py": (*HOSTS, "mha_viz.web", "mha_viz.plotting"),
    "plotting": (*HOSTS, "mha_viz.web"),
    # What the app's Streamlit component and the notebook widget both mount: below both hosts.
    "web": HOSTS,
    "notebook": ("mha_viz.app", "streamlit"),
    "analysis": (*HOSTS, "mha_viz.web", "mha_viz.plotting", "mha_viz.tiny_probes", "mha_viz.models"),
    "models": (*HOSTS, "mha_viz.web", "mha_viz.plotting", "mha_viz.tiny_probes", "mha_viz.analysis"),
    "contract.py": (*HOSTS, "mha_viz.web", "mha_viz.plotting", "mha_viz.tiny_probes", "mha_viz.analysis",
                    "mha_viz.models"),
    "heads.py": ("mha_viz.", "streamlit"),
    "training_record.py": ("mha_viz.", "streamlit"),
    "names.py": ("mha_viz.", "streamlit"),
    "settings.py": ("mha_viz.", "streamlit"),
}




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
           if name.startswith(FORBIDDEN[layer])]
    assert not bad, "\n".join(bad)


def test_every_view_is_registered_and_has_render():
    from mha_viz.app import views

    files = {p.stem for p in (PKG / "app" / "views").glob("*.py") if p.stem != "__init__"}
    registered = {fn.__module__.rsplit(".", 1)[-1] for fn in views.VIEWS.values()}
    assert files == registered, f"view files without a registry line, or the reverse: {files ^ registered}"
    assert all(fn.__name__ == "render" for fn in views.VIEWS.values())


ADAPTERS = ("tiny", "bert", "hf", "compiled")  # mha_viz/models/<one model kind>/


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_app_never_imports_one_models_package():
    """Views ask the model (its declared capabilities), never reach into tiny/, bert/, hf/ or compiled/."""
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


def test_the_app_and_the_notebook_import_nothing_from_each_other():
    """Two hosts of the same browser code: the grid's JS, its payload and palette are mha_viz.web, which both import."""
    bad = [f"{f.relative_to(PKG.parent)} imports {name}"
           for host, other in (("app", "mha_viz.notebook"), ("notebook", "mha_viz.app"))
           for f in sorted((PKG / host).rglob("*.py")) for name in _imports(f) if name.startswith(other)]
    assert not bad, "\n".join(bad)
    js = [p.relative_to(PKG).as_posix() for p in (PKG / "notebook").rglob("*.py") if "app/components" in p.read_text()]
    assert not js, f"read the app's files by path: {js}"


_SPELLED_IN_TEXT = re.compile(r"L%d H%d|L%s H%s|L\{\w*\} H\{\w*\}")  # "L%d H%d" % ..., "L{} H{}".format(...)
_SPELLED_IN_JS = re.compile(r"L\$\{[^}]*\}\s*H\$\{|\"L\"\s*\+")  # `L${l} H${h}`, "L" + l


def _spelled_by_hand(path: Path) -> list[int]:
    """Lines of `path` that write a head as "L<layer> H<head>" themselves: an f-string whose text reads "L", a
    value, " H", a value; or a %- / .format template of the same."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            parts = node.values
            for i in range(len(parts) - 3):
                a, b, c, d = parts[i:i + 4]
                if (isinstance(a, ast.Constant) and str(a.value).endswith("L") and isinstance(b, ast.FormattedValue)
                        and isinstance(c, ast.Constant) and str(c.value).startswith(" H")
                        and isinstance(d, ast.FormattedValue)):
                    lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _SPELLED_IN_TEXT.search(node.value):
            lines.append(node.lineno)
    return lines


def test_a_head_is_named_by_one_function():
    """mha_viz.names.head_name / layer_name / head_names spell a head everywhere; no module writes "L{l} H{h}"."""
    bad = [f"{f.relative_to(PKG.parent)}:{line}" for f in sorted(PKG.rglob("*.py"))
           if f.relative_to(PKG).as_posix() != "names.py" for line in _spelled_by_hand(f)]
    bad += [f"{f.relative_to(PKG.parent)}" for f in sorted(PKG.rglob("*.js")) if _SPELLED_IN_JS.search(f.read_text())]
    assert not bad, "a head's name spelled by hand (use mha_viz.names):\n" + "\n".join(bad)


def test_the_hand_spelling_check_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('l, h = 1, 2\na = f"L{l} H{h}"\nb = "L%d H%d" % (l, h)\nc = f"{l}"\nd = f"rollout of L{l}"\n')
    assert _spelled_by_hand(sample) == [2, 3]
