"""No import cycle inside `eventstore` or `replay` (issue 27), deferred imports included.

Every import counts as test_import_rule.py counts it: at module level, inside a function, under
`if TYPE_CHECKING`. A package's `__init__` may name its modules lazily (its `__getattr__` and
`TYPE_CHECKING` block), so an edge into a package's own `__init__` from inside the package would
make a cycle; none may exist.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_import_rule import _module_name, imports_of

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("eventstore", "replay")


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """module -> the modules of `packages` it imports (a `from m import name` counts as m)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for top in packages:
        for path in sorted((root / top).rglob("*.py")):
            name, is_package = _module_name(path.relative_to(root))
            modules[name] = (path, is_package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for _, targets in imports_of(tree, name, is_package):
            for target in targets:
                module = target if target in modules else target.rpartition(".")[0]
                if module in modules and module != name:
                    graph[name].add(module)
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
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
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
    return found


def test_eventstore_and_replay_have_no_import_cycle_deferred_imports_included():
    graph = import_graph(ROOT, PACKAGES)
    assert "eventstore.writer" in graph and "replay.bundle" in graph
    assert cycles(graph) == []


def test_the_cycle_finder_sees_a_cycle_held_open_by_a_deferred_import(tmp_path):
    sources = {
        "eventstore/__init__.py": "",
        "eventstore/a.py": "from .b import B\n",
        "eventstore/b.py": "def late():\n    from . import a\n",
        "eventstore/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import B\n",
        "replay/__init__.py": "",
        "replay/d.py": "from eventstore import a\n",
    }
    for name, text in sources.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    assert cycles(import_graph(tmp_path, PACKAGES)) == [["eventstore.a", "eventstore.b"]]
