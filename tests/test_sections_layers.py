"""The layers of `sections` (docs/architecture.md): errors <- model <- retrieval <- specs <- runtime
<- adapters. A module imports only from its own subpackage or from those before it, deferred and
TYPE_CHECKING imports included; the package's face (sections/__init__.py) stands above them all."""

from __future__ import annotations

from tests.test_import_graph import import_graph
from tests.test_import_rule import ROOT

LAYERS = ("errors", "model", "retrieval", "specs", "runtime", "adapters")


def layer(module: str) -> int:
    return LAYERS.index(module.split(".")[1])


def test_every_module_is_in_a_layer():
    graph = import_graph(ROOT, "sections")

    assert {m.split(".")[1] for m in graph if m != "sections"} == set(LAYERS)


def test_no_module_imports_from_a_later_layer():
    graph = import_graph(ROOT, "sections")
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module != "sections"
        for target in targets
        if layer(target) > layer(module)
    )

    assert upward == []
