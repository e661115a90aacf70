"""The public faces of `streams` (the service an embedder builds) and `streams.client`: every
name `__all__` promises is there, and `import streams` loads nothing of the service until a name
is used (docs/api.md)."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import streams
import streams.client
from streams.client import errors
from tests.server import Server

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


def _examples() -> dict[str, str]:
    """docs/api.md's `streams` examples, by the title of their heading."""
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = page.split("\n## `streams`\n", 1)[1].split("\n## ", 1)[0]
    found = {}
    for part in section.split("\n### Example: ")[1:]:
        title, rest = part.split("\n", 1)
        found[title] = rest.split("```python\n", 1)[1].split("```", 1)[0]
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _run(example: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", example],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_serve_example_of_the_api_page_serves_and_a_client_sees_its_records(tmp_path):
    example = _examples()["serve a data directory in-process"]
    assert "8765" in example
    ran = _run(example.replace("8765", str(_free_port())), tmp_path)

    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines()[:2] == ["1 session.created", "2 item.added"]
    assert (tmp_path / "data" / "log").is_dir()


def test_the_websocket_example_of_the_api_page_follows_a_running_service(tmp_path):
    example = _examples()["a client subscribing (asyncio, over WebSocket)"]
    with Server(tmp_path / "data").start() as server:
        with streams.client.Client(server.url) as client:
            client.create_session("s1")
            client.add_item("s1", "messages", "hello", role="user")
        ran = _run(example.replace("http://127.0.0.1:8765", server.url), tmp_path)

    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[:2] == ["1 session.created", "2 item.added"]
    cursor, last_h = lines[2].split()
    assert cursor == "2" and len(last_h) == 64
