"""ledgermem's service over HTTP: the app, the service behind it, and its settings.

An embedder builds the ASGI app with `create_app(Settings(...))` and serves it with any ASGI
server (the app's lifespan starts and stops the `Service`); `ledgermem serve` does the same with
its own uvicorn setup (streams/server/cli_serve.py). docs/api.md has the names and
examples. The Python client is its own face, `streams.client`, which loads none of the service.

The names load on first use (as the websockets package does), so importing `streams.client`
does not import Starlette or uvicorn; a type checker sees them through the `TYPE_CHECKING`
imports below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventstore.lazy import lazy_names

__all__ = [
    # streams.web.app
    "create_app",
    # streams.server.service
    "Service",
    # streams.server.settings
    "Settings",
    "Token",
    "load_settings",
]

if TYPE_CHECKING:
    from streams.server.service import Service
    from streams.server.settings import Settings, Token, load_settings
    from streams.web.app import create_app

_WHERE = {
    "create_app": "streams.web.app",
    "Service": "streams.server.service",
    "Settings": "streams.server.settings",
    "Token": "streams.server.settings",
    "load_settings": "streams.server.settings",
}

__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
