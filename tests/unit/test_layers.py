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
# bottom contract/ (per-head slicing in contract/head_slices.py among its rooms), training_record.py (the tiny
# model's record types), names.py and settings.py.
HOSTS = ("mha_viz.app", "mha_viz.notebook", "streamlit")
FORBIDDEN = {
    "tiny_probes.py": (*HOSTS, "mha_viz.web", "mha_viz.plotting"),
    "plotting": (*HOSTS, "mha_viz.web"),
    # What the app's Streamlit component and the notebook widget both mount: below both hosts.
    "web": HOSTS,
    "notebook": ("mha_viz.app", "streamlit"),
    # The study command (mha_viz/study/): measures checkpoints with models and analysis; only the app reads it.
    "study": (*HOSTS, "mha_viz.web", "mha_viz.plotting", "mha_viz.tiny_probes"),
    "analysis": (*HOSTS, "mha_viz.web", "mha_viz.plotting", "mha_viz.tiny_probes", "mha_viz.models"),
    "models": (*HOSTS, "mha_viz.web", "mha_viz.plotting", "mha_viz.tiny_probes", "mha_viz.analysis"),
    "contract": (*HOSTS, "mha_viz.web", "mha_viz.plotting", "mha_viz.tiny_probes", "mha_viz.analysis",
                    "mha_viz.models"),
    "training_record.py": ("mha_viz.", "streamlit"),
    "names.py": ("mha_viz.", "streamlit"),
    "settings.py": ("mha_viz.", "streamlit"),
}




def _module(path: Path, root: Path = PKG) -> str:
    """The dotted name of the module at `path` in the package `root` (a package's __init__.py: the package)."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path = PKG) -> dict[str, Path]:
    return {_module(f, root): f for f in sorted(root.rglob("*.py"))}


MODULES = _modules()


def _imports(path: Path, root: Path = PKG, modules: dict[str, Path] | None = None) -> list[str]:
    """Every module `path` imports, at the top or inside a function. `from a import b` is the module a.b where b is
    a module (`from mha_viz.app import patching_kinds` is an edge to patching_kinds, not to the package), else a;
    relative imports are resolved against `path`'s package."""
    modules = MODULES if modules is None else modules
    here = _module(path, root) if path.is_relative_to(root) else ""
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{source}" if source else base
            names += [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
    return list(dict.fromkeys(names))


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


# mha_viz/models/<one model family>/: every folder with an __init__.py, read from the tree, so a new family is checked
# the day it lands.
ADAPTERS = tuple(sorted(p.parent.name for p in (PKG / "models").glob("*/__init__.py")))
# A family built on another's code: a learned twin is tiny's stack (its architecture and trainer's settings) with a
# token head, trained on a written model's outputs.
BUILT_ON = {"twins": ("tiny",)}


def test_the_app_never_imports_one_models_package():
    """Views ask the model (its declared capabilities), never reach into tiny/, bert/, hf/ or compiled/."""
    banned = tuple(f"mha_viz.models.{kind}" for kind in ADAPTERS)
    bad = [f"{f.relative_to(PKG.parent)} imports {name}" for f in sorted((PKG / "app").rglob("*.py"))
           for name in _imports(f) if name.startswith(banned)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("kind", ADAPTERS)
def test_no_adapter_imports_a_sibling_adapter(kind):
    siblings = tuple(f"mha_viz.models.{other}" for other in ADAPTERS if other not in (kind, *BUILT_ON.get(kind, ())))
    bad = [f"{f.relative_to(PKG.parent)} imports {name}" for f in sorted((PKG / "models" / kind).rglob("*.py"))
           for name in _imports(f) if name.startswith(siblings)]
    assert not bad, "\n".join(bad)


def _graph(root: Path = PKG) -> dict[str, set[str]]:
    """Module -> the modules of `root` it imports. A package's __init__ importing its own submodules is not an edge."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for target in _imports(path, root, modules):
            while target and target not in modules:  # `from mha_viz.models.x import y`: the module x
                target = target.rpartition(".")[0]
            is_own_child = path.name == "__init__.py" and target.startswith(name + ".")
            if target and target != name and not is_own_child:
                edges.add(target)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[str]:
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
    return cycles


def test_no_import_cycles():
    """No module imports, directly or through others, a module that imports it back (lazy imports inside
    functions count too: they hide a cycle, they do not remove it)."""
    cycles = _cycles(_graph())
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_cycle_check_sees_a_module_imported_from_its_package(tmp_path):
    """`from pkg import mod` inside a function is an edge to pkg.mod (the cycle the old reader missed)."""
    pkg = tmp_path / "pkg"
    (pkg / "views").mkdir(parents=True)
    for init in (pkg / "__init__.py", pkg / "views" / "__init__.py"):
        init.write_text("")
    lazy = "def render():\n    from pkg import kinds\n\n\n"
    (pkg / "views" / "patching.py").write_text(lazy + "def shared():\n    pass\n")
    (pkg / "kinds.py").write_text("from pkg.views.patching import shared\n")
    assert _cycles(_graph(pkg)) == ["pkg.kinds -> pkg.views.patching -> pkg.kinds"]
    (pkg / "views" / "patching.py").write_text("def shared():\n    pass\n")
    assert _cycles(_graph(pkg)) == []


def test_the_adapter_list_is_every_family_folder():
    folders = {p.name for p in (PKG / "models").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert set(ADAPTERS) == folders and "twins" in ADAPTERS


def test_the_streamlit_page_never_loads_the_notebook():
    """The page and every view imported in a fresh interpreter leave mha_viz.notebook unloaded: `mha_viz.show` and
    its siblings are read from the notebook on first use, so the app, which imports `mha_viz` as every
    `mha_viz.app` module does, does not carry the notebook's code."""
    import subprocess
    import sys

    code = ("import sys, mha_viz.app.page, mha_viz.app.views\n"
            "print(sorted(m for m in sys.modules if m.startswith('mha_viz.notebook')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PKG.parent, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


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


def _column_by_hand(path: Path) -> list[int]:
    """Lines of `path` whose f-string writes a head within its layer as "H<value>" itself (a figure's column)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.JoinedStr):
            for a, b in zip(node.values, node.values[1:]):
                if (isinstance(a, ast.Constant) and re.search(r"(^|[^A-Za-z0-9])H$", str(a.value))
                        and isinstance(b, ast.FormattedValue)):
                    lines.append(node.lineno)
    return lines


# Owned by the helper rewriting the Layer view's head picker this round; its one "H{h}" moves to column_name there.
_COLUMN_PENDING: set[str] = set()


def test_a_column_of_heads_is_labelled_by_names():
    """A figure's head columns ("H2") come from mha_viz.names.column_name / column_names, as heads and layers do."""
    bad = [f"{f.relative_to(PKG.parent)}:{line}" for f in sorted(PKG.rglob("*.py"))
           if f.relative_to(PKG).as_posix() not in {"names.py", *_COLUMN_PENDING} for line in _column_by_hand(f)]
    assert not bad, "a column label spelled by hand (use mha_viz.names.column_name):\n" + "\n".join(bad)


def test_the_column_check_finds_what_it_looks_for(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('h = 2\na = f"H{h}"\nb = [f"H{i}" for i in range(3)]\nc = f"PATH{h}"\nd = f"L{h} H{h}"\n')
    assert sorted(_column_by_hand(sample)) == [2, 3, 5]


# mha_viz/contract/<room>.py, in import order
CONTRACT_ROOMS = ("head_slices", "records", "kinds", "capabilities", "model", "ablation")


def test_the_contract_is_split_by_what_it_holds_and_no_room_is_over_500_lines():
    """head_slices, records, kinds, capabilities, model, then ablation (the meanings of "off", computed through the
    Model interface): each room imports only earlier ones, and none grows past 500 lines; `mha_viz.contract` only
    re-exports them."""
    folder = PKG / "contract"
    rooms = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert rooms == set(CONTRACT_ROOMS), f"a contract module the order above does not place: {rooms}"
    for i, room in enumerate(CONTRACT_ROOMS):
        path = folder / f"{room}.py"
        n = len(path.read_text().splitlines())
        assert n <= 500, f"contract/{room}.py has {n} lines: split it by what it holds"
        later = {f"mha_viz.contract.{r}" for r in CONTRACT_ROOMS[i:]}
        assert not later & set(_imports(path)), f"contract/{room}.py imports a room that comes after it"
    init = ast.parse((folder / "__init__.py").read_text())
    defined = [n for n in init.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert not defined, "mha_viz/contract/__init__.py only re-exports; define things in a room"


MAX_LINES = 500  # past this a module holds more than one thing: split it by what it holds, as contract/ is


def _too_long(root: Path) -> list[str]:
    """Every Python or JavaScript module under `root` longer than MAX_LINES, with its count."""
    files = sorted([*root.rglob("*.py"), *root.rglob("*.js")])
    return [f"{f.relative_to(root.parent)}: {n} lines" for f in files
            if (n := len(f.read_text().splitlines())) > MAX_LINES]


def test_no_module_is_over_500_lines():
    """Every module of the package, Python or the grid's JavaScript, stays within MAX_LINES."""
    bad = _too_long(PKG)
    assert not bad, f"modules over {MAX_LINES} lines (split each by what it holds):\n" + "\n".join(bad)


def test_the_size_check_finds_what_it_looks_for(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "short.py").write_text("x = 1\n" * MAX_LINES)
    (pkg / "sub" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (pkg / "sub" / "long.js").write_text("let x;\n" * (MAX_LINES + 1))
    assert _too_long(pkg) == [f"pkg/sub/long.js: {MAX_LINES + 1} lines", f"pkg/sub/long.py: {MAX_LINES + 1} lines"]


def test_family_specific_abilities_are_capabilities_not_core():
    """The Model interface's abstract methods are what every model answers; a compiled program's output, its
    written heads and a training record are optional capabilities with a 'not available' answer."""
    from mha_viz.contract import Model, ProgramCapabilities, TrainingCapability

    family = {"program_output", "written_heads", "training_evidence"}
    assert not family & Model.__abstractmethods__
    assert {"program_output", "written_heads"} <= set(vars(ProgramCapabilities))
    assert "training_evidence" in vars(TrainingCapability)
    assert not family & set(vars(Model)), "declare a family's ability in contract/capabilities.py"


def _is_reexport_shim(path: Path) -> bool:
    """A module whose whole body (past its docstring) is imports and an __all__: a name kept at an old address."""
    body = [s for s in ast.parse(path.read_text()).body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return bool(body) and all(isinstance(s, (ast.Import, ast.ImportFrom))
                              or (isinstance(s, ast.Assign) and getattr(s.targets[0], "id", "") == "__all__")
                              for s in body)


def test_no_module_only_re_exports_another():
    bad = [str(f.relative_to(PKG.parent)) for f in sorted(PKG.rglob("*.py"))
           if f.name != "__init__.py" and _is_reexport_shim(f)]
    assert not bad, "modules that only re-export (import from where the names live instead):\n" + "\n".join(bad)


def test_the_shim_check_finds_what_it_looks_for(tmp_path):
    shim, real = tmp_path / "shim.py", tmp_path / "real.py"
    shim.write_text('"""Kept for old imports."""\nfrom x import a, b  # noqa: F401\n__all__ = ["a", "b"]\n')
    real.write_text('from x import a\n\n\ndef f():\n    return a\n')
    assert _is_reexport_shim(shim) and not _is_reexport_shim(real)


ENGINE = ("mha_viz.contract", "mha_viz.models.interventions", "mha_viz.models.batching", "mha_viz.models.schedule",
          "mha_viz.models.edits", "mha_viz.models.points", "mha_viz.models.records")


def test_no_module_imports_a_private_name_of_the_contract_or_the_engine():
    """What another module needs from the contract or the engine is public (`check_index`, `encode_text`,
    `head_outputs`, `PerModelCache`); a leading underscore means the module's own."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(ENGINE):
                bad += [f"{f.relative_to(PKG.parent)}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, "\n".join(bad)


def test_the_registry_asks_a_spec_not_a_family_name():
    """registry.py reads what a built-in model can do from its ModelSpec (`seeded`, `untrained`), never by comparing
    its family's name."""
    tree = ast.parse((PKG / "models" / "registry.py").read_text())
    bad = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
           and any(isinstance(side, ast.Attribute) and side.attr == "family"
                   for side in (node.left, *node.comparators))]
    assert not bad, f"models/registry.py compares .family on lines {bad}"


def test_the_analysis_package_lists_every_module_it_holds():
    """analysis/__init__.py's docstring names every module of the folder (a .py file, or a package: a folder with
    an __init__.py), each once, and nothing that is not there."""
    import mha_viz.analysis as analysis

    listed = re.findall(r"^    (\w+)\s{2,}", analysis.__doc__, re.MULTILINE)
    files = {p.stem for p in (PKG / "analysis").glob("*.py") if p.stem != "__init__"}
    files |= {p.parent.name for p in (PKG / "analysis").glob("*/__init__.py")}
    assert sorted(listed) == sorted(set(listed)), "a module listed twice"
    assert set(listed) == files, f"listed, not there: {set(listed) - files}; there, not listed: {files - set(listed)}"


def _page_map(page: str) -> dict[str, list[str]]:
    """The file lists of ARCHITECTURE.md's "Where everything is": {folder: the names listed under it}."""
    block = page.split("## Where everything is", 1)[1].split("```", 2)[1]
    lists: dict[str, list[str]] = {}
    folder = None
    for line in block.splitlines():
        if line.startswith("mha_viz/"):
            folder = line.split()[0]
            lists[folder] = []
        elif line.startswith("  ") and folder and line.strip():
            lists[folder].append(line.split()[0])
    return lists


def _in_tree(folder: Path) -> set[str]:
    """What a folder holds as the page lists it: modules and assets by file name, packages and folders with a '/'."""
    return ({p.name for p in folder.iterdir() if p.is_file() and p.suffix in (".py", ".js", ".css")}
            | {p.name + "/" for p in folder.iterdir() if p.is_dir() and p.name != "__pycache__"})


def test_the_architecture_page_names_what_exists():
    """docs/ARCHITECTURE.md's every rule names its test: each `tests/...py::name` it cites is a test function of
    that file, each `mha_viz/...` path it names exists, every list item (a rule) cites at least one test, and each
    file list of "Where everything is" is its folder's, file for file (no file left out, none that is gone)."""
    page = (PKG.parent / "docs" / "ARCHITECTURE.md").read_text()
    cited = re.findall(r"(tests/[\w/]+\.py)::(\w+)", page)
    assert len(cited) >= 10
    missing = [f"{path}::{name}" for path, name in cited if not (PKG.parent / path).exists()
               or not re.search(rf"^def {name}\(", (PKG.parent / path).read_text(), re.MULTILINE)]
    assert not missing, f"ARCHITECTURE.md cites tests that are not there: {missing}"
    paths = set(re.findall(r"(mha_viz/[\w/]+(?:\.py|/))", page))
    gone = [p for p in paths if not (PKG.parent / p).exists()]
    assert not gone, f"ARCHITECTURE.md names paths that are not there: {gone}"
    prose = re.sub(r"```.*?```", "", page, flags=re.DOTALL)
    rules = re.split(r"\n(?=- |\d\. )", prose)
    uncited = [r.splitlines()[0] for r in rules if re.match(r"- |\d\. ", r) and "tests/" not in r]
    assert not uncited, f"rules without a test: {uncited}"
    lists = _page_map(page)
    assert len(lists) >= 7, sorted(lists)
    wrong = {folder: {"not listed": sorted(_in_tree(PKG.parent / folder) - set(names) - {"__init__.py"}),
                      "not there": sorted(set(names) - _in_tree(PKG.parent / folder))}
             for folder, names in lists.items()}
    wrong = {f: w for f, w in wrong.items() if w["not listed"] or w["not there"]}
    assert not wrong, f"ARCHITECTURE.md's file lists differ from the tree: {wrong}"
