"""`/openapi.json`, generated from the routes the app serves (streams/apidoc), and the explorer
over it at `/docs` (streams/web/explorer.py)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from streams import apidoc
from streams.apidoc.models import JsonObject
from streams.web import explorer
from streams.web.responses import json_response
from streams.web.routing import RawRoute, routes_of


def routes(served: Callable[[], list[RawRoute]]) -> list[RawRoute]:
    """`/openapi.json`, the document of the routes `served()` gives (the app's, once it is
    built), made once; and the explorer over it at `/docs` (streams/web/explorer.py)."""
    made: list[dict] = []

    def built() -> dict:
        if not made:
            made.append(apidoc.document(served()))
        return made[0]

    @apidoc.operation(
        "getApiDescription",
        "this document: the API in OpenAPI 3.1, generated from the routes served",
        replies={200: apidoc.Reply(JsonObject, "the OpenAPI document")},
        tags=("service",),
    )
    async def openapi_json(request: Request) -> Response:
        return json_response(built())

    return routes_of([("/openapi.json", {"GET": openapi_json})]) + explorer.routes()
