"""No import circles among the core's modules, nor inside any backend package: every import counts,
deferred ones (inside functions) and type-only ones (under TYPE_CHECKING) included, read from the
source with ``ast`` (import-linter checks the layers in pyproject.toml; it cannot see a circle
closed inside one layer's line). A circle means a module does two jobs: split it.

The layers diagram in docs/architecture.md is the one scripts/layers_doc.py prints from the
layers contract in pyproject.toml.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, the same parser before it joined the stdlib (the Makefile installs it there)
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _modules(package: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every module of the package in folder ``package`` by dotted name; a compiled extension (a C or
    C++ source beside the modules, as opcore's _fastrun and _torchguard) is a module with no imports."""
    found: dict[str, pathlib.Path] = {}
    for path in sorted(package.rglob("*")):
        if path.suffix not in (".py", ".c", ".cpp") or "__pycache__" in path.parts:
            continue
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.setdefault(name, path)
    return found


def _imported(module: str, path: pathlib.Path, node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, ...]]:
    """Per name an import statement brings in, the dotted names it may be, first choice first:
    ``from a import b`` is the module ``a.b`` where there is one, else ``a``."""
    if isinstance(node, ast.Import):
        yield from ((alias.name,) for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    for alias in node.names:
        yield (f"{base}.{alias.name}", base)


# module -> the modules it imports -> the lines that import them
Graph = dict[str, dict[str, list[int]]]


def import_graph(package: pathlib.Path) -> Graph:
    """The package's modules and their imports of each other, each edge with the lines that make it."""
    modules = _modules(package)
    graph: Graph = {module: {} for module in modules}
    for module, path in modules.items():
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for choices in _imported(module, path, node):
                target = next((name for name in choices if name in modules), choices[-1])
                while target and target not in modules:  # a name inside a module: that module
                    target = target.rpartition(".")[0]
                if target and target != module:
                    lines = graph[module].setdefault(target, [])
                    if node.lineno not in lines:
                        lines.append(node.lineno)
    return graph


def circles(graph: Graph) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Kosaraju: the modules in the order
    a depth-first walk finishes them, then walked back along reversed edges)."""
    order: list[str] = []
    seen: set[str] = set()
    for start in graph:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(graph[start]))]
        while stack:
            module, rest = stack[-1]
            following = next((m for m in rest if m not in seen), None)
            if following is None:
                order.append(module)
                stack.pop()
            else:
                seen.add(following)
                stack.append((following, iter(graph[following])))
    importers: dict[str, list[str]] = {module: [] for module in graph}
    for module, imported in graph.items():
        for target in imported:
            importers[target].append(module)
    found, placed = [], set()
    for start in reversed(order):
        if start in placed:
            continue
        component, todo = set(), [start]
        placed.add(start)
        while todo:
            module = todo.pop()
            component.add(module)
            for importer in importers[module]:
                if importer not in placed:
                    placed.add(importer)
                    todo.append(importer)
        if len(component) > 1:
            found.append(frozenset(component))
    return found


def describe(graph: Graph, component: frozenset[str], package: pathlib.Path) -> str:
    """The circle's modules and every import edge between them, with file and lines."""
    lines = [f"circle of {len(component)}: {', '.join(sorted(component))}"]
    modules = _modules(package)
    for a in sorted(component):
        for b in sorted(set(graph[a]) & component):
            where = modules[a].relative_to(package.parent)
            lines.append(f"  {a} -> {b}   ({where}: lines {', '.join(map(str, graph[a][b]))})")
    return "\n".join(lines)


def _backend_packages() -> dict[str, pathlib.Path]:
    """The backend packages import-linter knows (pyproject's root packages other than opcore), each
    found in its distribution's folder."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    found = {}
    for name in config["root_packages"]:
        if name == "opcore":
            continue
        folders = [p.parent for p in ROOT.glob(f"**/{name}/__init__.py") if ".venv" not in p.parts]
        assert len(folders) == 1, f"the backend package {name} (pyproject.toml's root_packages) was found at {folders}"
        found[name] = folders[0]
    return found


def test_the_core_has_no_import_circles() -> None:
    package = ROOT / "opcore"
    graph = import_graph(package)
    found = circles(graph)
    assert not found, "import circles in opcore:\n" + "\n".join(describe(graph, c, package) for c in found)


def test_no_core_module_imports_another_modules_private_name() -> None:
    """A name one module reads from another is that module's public name (issue 24: 27 such imports,
    18 of them dispatch's, closed the circles); a module's own package may not reach in either."""
    found = []
    for path in sorted((ROOT / "opcore").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opcore"):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                # the compiled parts (opcore._fastrun, opcore._torchguard) are modules, not private names
                private = [n for n in private if not list((ROOT / "opcore").glob(f"{n}.*"))]
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {n}" for n in private]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


@pytest.mark.parametrize("name", sorted(_backend_packages()))
def test_a_backend_package_has_no_import_circles(name: str) -> None:
    package = _backend_packages()[name]
    graph = import_graph(package)
    found = circles(graph)
    assert not found, f"import circles in {name}:\n" + "\n".join(describe(graph, c, package) for c in found)


def test_a_circle_is_found_with_its_edges_and_lines(tmp_path: pathlib.Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from .. import a\n")  # deferred and relative
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    graph = import_graph(package)
    assert circles(graph) == [frozenset({"pkg.a", "pkg.sub.b"})]
    text = describe(graph, circles(graph)[0], package)
    assert "pkg.sub.b -> pkg.a" in text and "lines 2" in text and "pkg.a -> pkg.sub.b" in text


def test_the_layers_diagram_in_the_docs_is_the_contracts() -> None:
    printed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "layers_doc.py")], capture_output=True, text=True, check=True
    ).stdout
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert printed.strip() and printed in doc, (
        "docs/architecture.md's layers diagram differs from pyproject.toml's contracts: "
        "run `python scripts/layers_doc.py --write`"
    )
