"""The API explorer at /docs (streams/web/explorer.py): Swagger UI over /openapi.json, from assets the
service ships, under the dashboard's content security policy (`data:` images aside).

The browser test opens the page in Debian's chromium (tests/helpers/chromium.py) and checks what
a reader sees: one entry per operation the document describes, no script error, no request the
policy refused and no request to another origin.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
import pytest
from helpers.chromium import launched_browser

from streams.web.explorer import EXPLORER_CSP
from streams.web.ui import CSP
from tests.server import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("explorer")) as running:
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


def _directives(policy: str) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in policy.split(";"))


def _operations(client: httpx.Client) -> int:
    paths = client.get("/openapi.json").json()["paths"]
    return sum(len(methods) for methods in paths.values())


def test_the_page_and_its_assets_come_from_the_service_under_its_policy(client):
    page = client.get("/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    # The dashboard's policy, `data:` images aside (Swagger UI's icons).
    assert page.headers["content-security-policy"] == EXPLORER_CSP
    explorer, dashboard = _directives(EXPLORER_CSP), _directives(CSP)
    assert explorer.pop("img-src") == "'self' data:"
    assert explorer == {k: v for k, v in dashboard.items() if k != "img-src"}
    assert "<script>" not in page.text  # the initializer is a file: no inline script
    for asset, media_type in (
        ("swagger-ui-bundle.js", "text/javascript"),
        ("swagger-ui.css", "text/css"),
        ("explorer.js", "text/javascript"),
    ):
        answer = client.get(f"/docs/assets/{asset}")
        assert answer.status_code == 200, asset
        assert answer.headers["content-type"].startswith(media_type)
        assert answer.headers["content-security-policy"] == EXPLORER_CSP
    assert "SwaggerUIBundle" in client.get("/docs/assets/swagger-ui-bundle.js").text


@pytest.mark.parametrize("name", ["nothing.js", "..%2Fui.py", "%2Fetc%2Fpasswd", "index.css"])
def test_an_asset_not_shipped_is_a_json_404(client, name):
    answer = client.get(f"/docs/assets/{name}")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"


@pytest.fixture(scope="module")
def browser():
    yield from launched_browser()


def test_the_explorer_shows_every_operation_with_nothing_refused(server, client, browser):
    context = browser.new_context()
    page = context.new_page()
    problems: list[str] = []
    foreign: list[str] = []
    own = urlsplit(server.url).netloc
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    # A refused load under the policy is reported on the console as an error.
    page.on(
        "console",
        lambda message: (
            problems.append(f"console: {message.text}") if message.type == "error" else None
        ),
    )
    page.on(
        "request",
        lambda request: (
            foreign.append(request.url)
            if urlsplit(request.url).scheme in ("http", "https")
            and urlsplit(request.url).netloc != own
            else None
        ),
    )
    page.goto(server.url + "/docs")
    page.wait_for_selector(".opblock", timeout=20_000)
    shown = page.locator(".opblock").count()
    assert shown == _operations(client)
    # An operation opens with its generated description: its operationId is displayed.
    page.locator(".opblock-summary").first.click()
    page.wait_for_selector(".opblock-body", timeout=10_000)
    assert page.locator(".opblock-summary-operation-id").count() == shown
    assert problems == []
    assert foreign == []
    context.close()
