"""The import graph inside each package: no cycle, not even through an import deferred into a
function, and no module too long to read in one sitting (docs/architecture.md).

Every import counts, wherever it is written (module level, in a function, under
`if TYPE_CHECKING`), with the same reading of the source as tests/test_import_rule.py. A cycle
hidden in a function still means neither module can be understood, tested or moved without the
other; deferring the import only hides it from the interpreter.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_import_rule import PACKAGES, ROOT, _module_name, imports_of

LONGEST_MODULE = 600  # lines, in eventstore/, sections/ and streams/
SIZE_CHECKED = ("eventstore", "sections", "streams")


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports (a package's own `__init__` aside)."""
    modules: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        name, _ = _module_name(path.relative_to(root))
        modules[name] = path
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for _, imported in imports_of(
            ast.parse(path.read_text(encoding="utf-8")), name, is_package
        ):
            for dotted in imported:
                target = dotted
                while target and target not in modules:  # `from a.b import c`: c may be a name
                    target = target.rpartition(".")[0]
                # A module importing its own package's __init__ is no arrow: the package is
                # loaded before its modules whoever imports it.
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_the_package_deferred_imports_included(package):
    graph = import_graph(ROOT, package)
    assert len(graph) > 5
    assert cycles(graph) == []


@pytest.mark.parametrize("package", SIZE_CHECKED)
def test_no_module_is_longer_than_the_limit(package):
    too_long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in (ROOT / package).rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > LONGEST_MODULE
    }
    assert too_long == {}


def test_the_checker_finds_a_cycle_through_a_deferred_import_and_ignores_the_package_init(
    tmp_path,
):
    sources = {
        "pkg/__init__.py": "from pkg.a import A\n",
        "pkg/a.py": "from pkg import b\n\nA = 1\n",
        "pkg/b.py": "import pkg\n\n\ndef late():\n    from pkg.c import C\n",
        "pkg/c.py": "from .a import A as C\n",
        "pkg/d.py": "from pkg.a import A\n",
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    graph = import_graph(tmp_path, "pkg")

    assert graph["pkg.b"] == {"pkg.c"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
