"""What both hosts of the head grid share: the Streamlit component (app/components/head_grid.py) and the notebook
widget (notebook/widget.py) mount the same browser code on the same payload, and import both from here.

- `grid_js()`: the grid's ES modules (`grid/`, one concern each: the entry main.js, layers, tabs, heads, hover,
  the enlarged head, labels, colours, controls, export, lines, dom) bundled into the one module both hosts load,
  `grid_css()` its styles;
- `payload`: tensors and tokens -> the data the grid draws from (no streamlit, no Jupyter);
- `palette`: every colour the grid draws with, sent in the payload, which the notebook's SVG picture reads too.
Head and layer names come from mha_viz.names. Nothing here imports the app, the notebook or streamlit.

Why a bundle: neither host can load a module that imports another file. A Streamlit component's inline `js` and
an anywidget's `_esm` are each one module's text (imported from a blob: URL, where "./heads.js" names nothing), so
`grid_js()` inlines the imports: every module once, the ones it imports before it, `import` lines dropped and
`export` kept only on the entry's default. Each file stays a real module (a browser loads them one by one from a
folder: tests/e2e/test_grid_modules_browser.py), and the bundle is checked as it is built: every imported name is
exported by the file named, and no two modules declare the same top-level name (in one scope they would collide).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

GRID = Path(__file__).resolve().parent / "grid"
ENTRY = "main.js"  # the module with the one `export default`: the grid's render function

# The one import form the modules use: named imports from a file beside them, on lines of their own.
_IMPORT = re.compile(r'^import\s*\{([^}]*)\}\s*from\s*"\./([\w.-]+\.js)";[ \t]*\n', re.M)
_OTHER_IMPORT = re.compile(r"^\s*import\b(?!\s*\()", re.M)
_EXPORT = re.compile(r"^export\s+(?!default\b)(?:async\s+)?(?:function\*?|const|let|class)\s+([A-Za-z_$][\w$]*)",
                     re.M)
_EXPORT_KEYWORD = re.compile(r"^export\s+(?!default\b)", re.M)
_DEFAULT = re.compile(r"^export\s+default\b", re.M)
# A top-level declaration starts its line (the modules are written so: one declaration per line).
_TOP = re.compile(r"^(?:export\s+(?:default\s+)?)?(?:async\s+)?(?:function\*?|const|let|var|class)\s+"
                  r"([A-Za-z_$][\w$]*)", re.M)


class BundleError(ValueError):
    """The grid's modules cannot be bundled as written; the message names the file and what to change."""


@dataclass(frozen=True)
class Module:
    """One file of grid/: what it imports ({file: names}), what it exports, its top-level names, and its text
    without the import lines."""

    name: str
    imports: dict[str, tuple[str, ...]]
    exports: tuple[str, ...]
    top: tuple[str, ...]
    body: str


def read_module(name: str) -> Module:
    source = (GRID / name).read_text()
    imports: dict[str, tuple[str, ...]] = {}
    for names, file in _IMPORT.findall(source):
        listed = tuple(n.strip() for n in names.split(",") if n.strip())
        if any(" as " in n for n in listed):
            raise BundleError(f"{name}: 'import {{ a as b }}' is not bundled (one scope); import the name as it is "
                              "exported")
        imports[file] = imports.get(file, ()) + listed
    body = _IMPORT.sub("", source)
    if _OTHER_IMPORT.search(body):
        raise BundleError(f"{name}: only `import {{ names }} from \"./file.js\";` on a line of its own is bundled")
    if _DEFAULT.search(body) and name != ENTRY:
        raise BundleError(f"{name}: only the entry ({ENTRY}) has an `export default`; export names instead")
    return Module(name, imports, tuple(_EXPORT.findall(body)), tuple(_TOP.findall(body)), body)


def module_order(entry: str = ENTRY) -> tuple[str, ...]:
    """The files the entry reaches, each after the files it imports (depth first, in import order). Where two
    import each other the first reached goes second; any order runs, since top-level code only declares and the
    functions run once every module is in."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        if not (GRID / name).is_file():
            raise BundleError(f"{name} is imported but is not a file of {GRID}")
        for dependency in read_module(name).imports:
            visit(dependency)
        order.append(name)

    visit(entry)
    return tuple(order)


def check_modules(names: tuple[str, ...]) -> dict[str, Module]:
    """Every import resolves to a name its file exports, and no top-level name is declared twice."""
    modules = {name: read_module(name) for name in names}
    owner: dict[str, str] = {}
    for module in modules.values():
        for file, imported in module.imports.items():
            missing = [n for n in imported if n not in modules[file].exports]
            if missing:
                raise BundleError(f"{module.name} imports {', '.join(missing)} from {file}, which does not export "
                                  f"{'it' if len(missing) == 1 else 'them'}")
        for top in module.top:
            if top in owner:
                raise BundleError(f"{top} is declared at the top of both {owner[top]} and {module.name}: rename one "
                                  "(the bundle is one scope)")
            owner[top] = module.name
    return modules


# Every module of grid/, in the order the bundle holds them (the wheel ships each file: tests/notebook/test_install).
GRID_FILES = module_order()


@lru_cache(maxsize=1)
def grid_js() -> str:
    """The head grid as one ES module: the files of `grid/` from ENTRY, each after what it imports, with their
    imports inlined (see the module's docstring). Both hosts load this text."""
    modules = check_modules(GRID_FILES)
    parts = []
    for name in GRID_FILES:
        body = modules[name].body if name == ENTRY else _EXPORT_KEYWORD.sub("", modules[name].body)
        parts.append(f"// ---- {name}\n{body}")
    return "\n".join(parts)


@lru_cache(maxsize=1)
def grid_css() -> str:
    """The head grid's styles (every class prefixed `mhv-`: the page mounts it without a shadow root)."""
    return (GRID / "grid.css").read_text()
