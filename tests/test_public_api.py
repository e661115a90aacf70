"""The public face of `sections` (sections/__init__.py, docs/api.md): every name of
`__all__` resolves to the object its module defines, type checkers see the same names, and
importing the package loads none of its modules until a name is used."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys

import pytest

import sections
from tests.test_import_rule import ROOT

INIT = ROOT / "sections" / "__init__.py"


@pytest.mark.parametrize("name", sections.__all__)
def test_every_public_name_resolves_to_the_object_its_module_defines(name):
    found = getattr(sections, name)

    assert found is getattr(importlib.import_module(sections._WHERE[name]), name)


def test_the_names_are_listed_once_and_each_has_a_module():
    assert len(sections.__all__) == len(set(sections.__all__))
    assert set(sections.__all__) == set(sections._WHERE)


def test_type_checkers_import_exactly_the_public_names_from_their_modules():
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    checked = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)
    )
    imported = {
        alias.name: node.module
        for node in checked.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }

    assert imported == sections._WHERE


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Memroy'"):
        sections.Memroy  # noqa: B018


def test_importing_the_package_loads_none_of_its_modules():
    probe = (
        "import sys, sections; print(sorted(m for m in sys.modules if m.startswith('sections.')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )

    assert loaded.stdout.strip() == "[]"


def test_the_example_of_the_api_page_runs(tmp_path):
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = page.split("\n## `sections`\n", 1)[1].split("\n## ", 1)[0]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    ran = subprocess.run(
        [sys.executable, "-c", example], cwd=tmp_path, env=env, capture_output=True, text=True
    )

    assert ran.returncode == 0, ran.stderr
    assert "user What changed in Q3 revenue?" in ran.stdout
