"""The grid's JavaScript is ES modules (mha_viz/web/grid/): every file says what it imports, each import names
something its file exports, and the one bundle built from them (mha_viz.web.grid_js) is what both hosts load."""
from __future__ import annotations

import re

import pytest

from mha_viz import web

_REGEX_BEFORE = set("(,=:[!&|?{};+-*%<>~^")


def code_only(src: str) -> str:
    """`src` with comments and the text of strings and regex literals blanked (a template's ${...} kept): what is
    left names only code."""
    out, i, n, stack, depth, prev = [], 0, len(src), [], 0, ""
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.index("*/", i + 2) + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c in "'\"":
            j = i + 1
            while src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i, prev = j + 1, c
        elif c == "/" and (prev in _REGEX_BEFORE or prev == ""):  # a regex literal
            j, in_class = i + 1, False
            while in_class or src[j] != "/":
                j += 2 if src[j] == "\\" else 1
                in_class = (in_class or src[j - 1] == "[") and src[j - 1] != "]"
            j += 1
            while j < n and src[j].isalpha():
                j += 1
            out.append(" " * (j - i))
            i, prev = j, "/"
        elif c == "`" or (c == "}" and stack and stack[-1] == depth):  # a template's text, up to ${ or its end
            if c == "}":
                stack.pop()
            out.append(" ")
            i += 1
            while src[i] != "`":
                if src[i] == "\\":
                    out.append("  ")
                    i += 2
                elif src.startswith("${", i):
                    stack.append(depth)
                    out.append("  ")
                    i += 2
                    break
                else:
                    out.append("\n" if src[i] == "\n" else " ")
                    i += 1
            else:
                out.append(" ")
                i += 1
            prev = "`"
        else:
            depth += (c == "{") - (c == "}")
            out.append(c)
            prev = c if not c.isspace() else prev
            i += 1
    return "".join(out)


def test_code_only_keeps_code_and_drops_words():
    src = 'const a = "b c"; // d\nf(/"/g, `e ${g(h)} i`, \'j\'); /* k */ l'
    kept = set(re.findall(r"[A-Za-z_]\w*", code_only(src)))
    assert kept == {"const", "a", "f", "g", "h", "l"}, kept


def test_every_module_of_the_folder_is_in_the_bundle():
    assert sorted(web.GRID_FILES) == sorted(p.name for p in web.GRID.glob("*.js"))
    assert web.GRID_FILES[-1] == web.ENTRY


def test_each_module_imports_what_it_uses_from_another():
    """A top-level name of one module used in another is imported there, from that module, which exports it:
    the files run as they are, one by one, and no file leans on the shared scope of the bundle."""
    modules = web.check_modules(web.GRID_FILES)
    owner = {top: m.name for m in modules.values() for top in m.top}
    for module in modules.values():
        code = code_only(module.body)
        imported = {n: file for file, names in module.imports.items() for n in names}
        for name, home in owner.items():
            if home == module.name or not re.search(rf"(?<![\w$.]){re.escape(name)}(?![\w$])", code):
                continue
            assert imported.get(name) == home, f"{module.name} uses {name} of {home} without importing it"
            assert name in modules[home].exports
        for name, file in imported.items():  # and imports nothing it does not use
            assert re.search(rf"(?<![\w$.]){re.escape(name)}(?![\w$])", code), f"{module.name} imports {name} unused"


def test_an_import_that_names_nothing_stops_the_bundle(tmp_path, monkeypatch):
    for name in ("main.js", "dom.js"):
        (tmp_path / name).write_text((web.GRID / name).read_text())
    (tmp_path / "main.js").write_text('import { nothing } from "./dom.js";\nexport default function () {}\n')
    monkeypatch.setattr(web, "GRID", tmp_path)
    with pytest.raises(web.BundleError, match="main.js imports nothing from dom.js, which does not export it"):
        web.check_modules(web.module_order())
    (tmp_path / "main.js").write_text('import { el } from "./dom.js";\nfunction headName() {}\n'
                                      "export default function () { el(); }\n")
    with pytest.raises(web.BundleError, match="headName is declared at the top of both"):
        web.check_modules(web.module_order())


def test_the_bundle_is_one_module_that_both_hosts_load():
    from mha_viz.app.components import head_grid
    from mha_viz.notebook.widget import HeadGrid

    bundle = web.grid_js()
    assert not re.search(r"^\s*import\b", bundle, re.M), "every import is inlined"
    assert re.findall(r"^export\b.*", bundle, re.M) == ["export default function (component) {"]
    assert head_grid.JS == bundle
    assert HeadGrid.class_traits()["_grid_js"].default_value == bundle
    # Each module once, after the modules it imports (main.js, the entry, last).
    at = {name: bundle.index(f"// ---- {name}\n") for name in web.GRID_FILES}
    assert list(at) == sorted(at, key=at.get)
