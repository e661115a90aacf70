"""The public faces of `streams` (the service an embedder builds) and `streams.client`: every
name `__all__` promises is there, and `import streams` loads nothing of the service until a name
is used (docs/api.md)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import streams
import streams.client
from streams.client import errors

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("package", ["streams", "streams.client"])
def test_every_name_in_all_resolves_and_is_listed_once(package):
    module = importlib.import_module(package)
    assert len(module.__all__) == len(set(module.__all__))
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []
    assert set(module.__all__) <= set(dir(module))


def test_the_service_names_come_from_the_modules_that_define_them():
    from streams.server.service import Service
    from streams.server.settings import Settings, Token, load_settings
    from streams.web.app import create_app

    assert (streams.create_app, streams.Service) == (create_app, Service)
    assert (streams.Settings, streams.Token, streams.load_settings) == (
        Settings,
        Token,
        load_settings,
    )


def test_a_name_streams_does_not_have_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no_such_name"):
        streams.no_such_name  # noqa: B018


def test_the_client_exports_every_error_it_raises():
    raised = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.ClientError)
    }
    assert raised - set(streams.client.__all__) == set()


def test_importing_streams_loads_none_of_the_service_until_a_name_is_used():
    script = (
        "import sys, streams\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'uvicorn', 'sse_starlette', 'sections') or m.startswith('streams.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
