"""A real `ledgermem serve` with two tenants' tokens: A (tenant "acme", admin too) and B
(tenant "globex"), for the HTTP tests that check tenant isolation."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
from server import Server

A = {"Authorization": "Bearer tok-a"}
B = {"Authorization": "Bearer tok-b"}


@contextlib.contextmanager
def two_tenants(root: Path) -> Iterator[httpx.Client]:
    config = root / "settings.toml"
    config.write_text(
        '[[tokens]]\ntoken = "tok-a"\ntenant = "acme"\nscopes = ["read", "write", "admin"]\n'
        '[[tokens]]\ntoken = "tok-b"\ntenant = "globex"\nscopes = ["read", "write"]\n'
    )
    with (
        Server(root / "data", "--config", str(config)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        yield client


def head(client: httpx.Client) -> int:
    return client.get("/readyz").json()["head"]
