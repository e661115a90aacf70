"""CPU per request of finding the route for a single-item POST: trying the routes in order
(Starlette's router, a818173) or one `RouteTable` lookup (`app.router.table`), in-process.

Usage: PYTHONPATH=<checkout> .venv/bin/python bench/route_lookup.py   (prints one JSON line)
"""

from __future__ import annotations

import json
import time

from starlette.routing import Match

from streams.server.settings import Settings
from streams.web.app import create_app

PATH = b"/v1/sessions/s-17/sections/messages/items"


def scope() -> dict:
    return {"type": "http", "method": "POST", "raw_path": PATH, "path": PATH.decode()}


def main() -> None:
    app = create_app(Settings())
    routes = app.routes
    table = getattr(app.router, "table", None)

    def tried():
        s, partial = scope(), None
        for route in routes:
            match, _ = route.matches(s)
            if match is Match.FULL:
                return route
            if match is Match.PARTIAL and partial is None:
                partial = route
        return partial

    def looked():
        return table.matches(scope())

    find = looked if table is not None else tried
    n, best = 20_000, float("inf")
    for _ in range(5):
        start = time.thread_time_ns()
        for _ in range(n):
            find()
        best = min(best, (time.thread_time_ns() - start) / n / 1000)
    print(json.dumps({"how": find.__name__, "routes": len(routes), "cpu_us_per_request": best}))


if __name__ == "__main__":
    main()
