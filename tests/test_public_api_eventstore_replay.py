"""The public faces of `eventstore` and `replay` (their `__init__.py`, docs/api.md):
every name they list resolves, type checkers see the same names, and importing a package
costs nothing until a name is used."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("eventstore", "replay")


def _faces(package: str) -> tuple[set[str], set[str], set[str]]:
    """The names of `__all__`, of the TYPE_CHECKING imports and of the lazy map, read from the
    source as a type checker reads it."""
    tree = ast.parse((ROOT / package / "__init__.py").read_text(encoding="utf-8"))
    found: dict[str, set[str]] = {"__all__": set(), "TYPE_CHECKING": set(), "_MODULE_OF": set()}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in found:
                found[node.targets[0].id] = set(ast.literal_eval(node.value))
        elif isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imported in node.body:
                assert isinstance(imported, ast.ImportFrom)
                found["TYPE_CHECKING"] |= {alias.asname or alias.name for alias in imported.names}
    return found["__all__"], found["TYPE_CHECKING"], found["_MODULE_OF"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_to_the_object_its_module_defines(package):
    face = importlib.import_module(package)
    assert face.__all__ and len(face.__all__) == len(set(face.__all__))
    for name in face.__all__:
        value = getattr(face, name)
        home = importlib.import_module(face._MODULE_OF[name], package)
        assert value is getattr(home, name), name
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(face.__all__)


@pytest.mark.parametrize("package", PACKAGES)
def test_type_checkers_see_the_same_names_as_the_lazy_imports(package):
    listed, checked, lazy = _faces(package)
    assert listed == checked == lazy


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_name_hides_a_module_of_the_package(package):
    for name in _faces(package)[0]:
        assert not (ROOT / package / f"{name}.py").exists(), name
        assert not (ROOT / package / name).is_dir(), name


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_the_package_imports_none_of_its_modules_until_a_name_is_used(package):
    # eventstore.lazy, which makes every face's __getattr__, is the one module a face loads.
    own = f"sorted(m for m in sys.modules if m.startswith('{package}.') and m != 'eventstore.lazy')"
    code = (
        "import sys\n"
        f"import {package}\n"
        f"print({own})\n"
        f"{package}.{_faces(package)[0].pop()}\n"
        f"print(bool({own}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["[]", "True"]


def test_an_unknown_name_is_an_attribute_error_naming_it():
    import eventstore

    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        eventstore.NoSuchThing  # noqa: B018


def _api_section(package: str) -> str:
    """The section of docs/api.md headed `## `package``, up to the next section."""
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    return page.split(f"\n## `{package}`\n", 1)[1].split("\n## ", 1)[0]


def test_the_example_of_the_eventstore_api_runs_and_verifies():
    (example,) = re.findall(r"```python\n(.*?)```", _api_section("eventstore"), re.S)
    done = subprocess.run(
        [sys.executable, "-c", example], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "VALID-LOCAL"


def test_the_page_names_every_public_name():
    for package in PACKAGES:
        section = _api_section(package)
        for name in _faces(package)[0]:
            assert f"`{name}" in section, f"docs/api.md, `{package}`, does not name {name}"
