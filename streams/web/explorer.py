"""`/docs`: the interactive API explorer (Swagger UI) over `/openapi.json`, served from here.

Swagger UI's built assets come from the `swagger-ui-py` wheel, which ships them (a 5.x bundle,
which reads OpenAPI 3.1); nothing is fetched from a CDN. Our own page and initializer live in
`streams/web/explorer/`, so the page runs under the dashboard's content security policy (streams/web/ui.py), images
from `data:` URLs aside: no inline script or style, no request to another origin.

Only the files the page loads are served, read once when the routes are built and looked up by
name, as the dashboard's assets are: no path from a request reaches the file system.
"""

from __future__ import annotations

from importlib import metadata, resources
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

from streams.apidoc import undescribed
from streams.web.routing import RawRoute, routes_of
from streams.web.ui import CSP, HEADERS, MEDIA_TYPES, server_of

# What the page loads from Swagger UI's distribution (swagger-ui-py puts it in swagger_ui/static).
SWAGGER_FILES = ("swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png", "LICENSE")
OWN_FILES = ("index.html", "explorer.js", "explorer.css")
# The dashboard's policy, but for images: Swagger UI's stylesheet draws its icons as `data:` SVG
# images. An image cannot run script, so scripts, styles and connections stay the service's own.
EXPLORER_CSP = CSP.replace("img-src 'self';", "img-src 'self' data:;")
EXPLORER_HEADERS = {**HEADERS, "content-security-policy": EXPLORER_CSP}
_MEDIA = {**MEDIA_TYPES, ".png": "image/png", "": "text/plain; charset=utf-8"}


def _media_type(name: str) -> str:
    suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
    return _MEDIA[suffix]


def load_assets() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, media type): Swagger UI's files and our own page and initializer."""
    distribution = metadata.distribution("swagger-ui-py")
    assets = {}
    for name in SWAGGER_FILES:
        path = Path(str(distribution.locate_file(f"swagger_ui/static/{name}")))
        assets[name] = (path.read_bytes(), _media_type(name))
    own = resources.files(__package__).joinpath("explorer")
    for name in OWN_FILES:
        assets[name] = (own.joinpath(name).read_bytes(), _media_type(name))
    return assets


def routes() -> list[RawRoute]:
    serve = server_of(load_assets(), EXPLORER_HEADERS, "the API explorer")

    @undescribed("the API explorer's page (a browser page over /openapi.json)")
    async def page(request: Request) -> Response:
        return serve("index.html")

    @undescribed("the API explorer's static assets")
    async def asset(request: Request) -> Response:
        return serve(request.path_params["asset"])

    return routes_of([("/docs", {"GET": page}), ("/docs/assets/{asset}", {"GET": asset})])
