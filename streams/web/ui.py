"""The dashboard: one HTML page and its static assets, served from `streams/web/ui/` (docs/dashboard.md).

The page is plain HTML, CSS and JavaScript modules with no build step. It reads the public API
like any other client (as reader `operator`, so it never moves lru or lfu) and follows
`/v1/stream/sse`; nothing here touches the memory or the log.

The assets are read once, when the routes are built, into a table keyed by file name. A request
names a key or gets the usual JSON 404: no path from a request ever reaches the file system, so
`..`, `%2F` or absolute paths cannot escape the directory.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

from streams.apidoc import undescribed
from streams.server.service import Service
from streams.web.errors import ApiError
from streams.web.routing import RawRoute, routes_of

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Only the service's own origin, for every kind of request: the browser itself then refuses any
# external request, and inline scripts and styles (the usual way in for injected content).
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE = "the dashboard: a page for a browser and its static assets, no API (docs/dashboard.md)"
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    # Revalidate every time: a service upgrade must never leave a stale app.js next to new HTML.
    "cache-control": "no-cache",
}


def load_assets() -> dict[str, tuple[bytes, str]]:
    """Every file of streams/web/ui/ with a known suffix, as name -> (bytes, media type)."""
    assets = {}
    for entry in resources.files(__package__).joinpath("ui").iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1] if "." in entry.name else ""
        if entry.is_file() and suffix in MEDIA_TYPES:
            assets[entry.name] = (entry.read_bytes(), MEDIA_TYPES[suffix])
    return assets


def server_of(
    assets: dict[str, tuple[bytes, str]], headers: dict[str, str], what: str
) -> Callable[[str], Response]:
    """name -> the asset's answer from `assets` (read once), or the usual JSON 404 naming
    `what` has no such asset: a request's name is only ever a key, never a path."""

    def serve(name: str) -> Response:
        found = assets.get(name)
        if found is None:
            raise ApiError(404, "not_found", f"{what} has no asset {name[:80]!r}")
        body, media_type = found
        return Response(body, headers=headers, media_type=media_type)

    return serve


def routes(service: Service) -> list[RawRoute]:
    # `service` is unused: the page needs no credentials to load, only its API calls do, and
    # that is how it can ask for a token. It is taken so app.py builds every route set alike.
    serve = server_of(load_assets(), HEADERS, "the dashboard")

    @undescribed(PAGE)
    async def page(request: Request) -> Response:
        return serve("index.html")

    @undescribed(PAGE)
    async def asset(request: Request) -> Response:
        return serve(request.path_params["asset"])

    get_page = {"GET": page}
    return routes_of(
        [("/", get_page), ("/ui", get_page), ("/ui/", get_page), ("/ui/{asset}", {"GET": asset})]
    )
