"""What a web page cannot make the service do (issue 13, item 5), and `Allow` on every 405 (item
11), against a real `ledgermem serve` in its default no-token mode.

Each refusal is checked to have appended nothing: the log's size is read before and after."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from server import Server
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from streams.server.settings import Settings
from streams.web.app import create_app
from streams.web.routing import RawRoute

EVIL = "http://evil.example"
ERASE = {"reason": "x", "all": True}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("guard") / "data"
    env = {"LEDGERMEM_ALLOWED_ORIGINS": "http://friend.example:3000/"}
    with Server(data, env=env) as running:
        with httpx.Client(base_url=running.url, timeout=20) as client:
            client.put("/v1/sessions/demo", json={}).raise_for_status()
            client.post(
                "/v1/sessions/demo/sections/findings/items", json={"content": "a secret fact"}
            ).raise_for_status()
        yield running


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=20) as c:
        yield c


def head_seq(client: httpx.Client) -> int:
    return client.get("/v1/log/status").json()["head"]


@pytest.fixture
def unchanged(client):
    """Asserts, after the test, that the log did not grow."""
    before = head_seq(client)
    yield
    assert head_seq(client) == before, "a refused request appended records"


# ---- item 5: bodies -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_a_body_not_sent_as_json_is_415(client, unchanged, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    response = client.post(
        "/v1/sessions/demo/erase", content=b'{"reason":"x","all":true}', headers=headers
    )
    assert response.status_code == 415, response.text
    assert response.json()["error"]["code"] == "unsupported_media_type"
    assert client.get("/v1/sessions/demo").status_code == 200


def test_the_issue_reproduction_erases_nothing(client, unchanged):
    response = client.post(
        "/v1/sessions/demo/erase",
        headers={"Origin": EVIL, "Content-Type": "text/plain"},
        content=b'{"reason":"x","all":true}',
    )
    assert response.status_code in (403, 415)
    assert response.json()["error"]["code"] in ("forbidden_origin", "unsupported_media_type")
    assert client.get("/v1/sessions/demo").json()["items"] == 1


@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON"]
)
def test_json_bodies_sent_as_json_are_accepted(client, content_type):
    response = client.post(
        "/v1/sessions/demo/sections/notes-free/items",
        content=b'{"content":"x"}',
        headers={"Content-Type": content_type},
    )
    assert response.status_code == 404  # past the body check: the section does not exist
    assert response.json()["error"]["code"] == "not_found"


def test_json_in_another_charset_is_415(client, unchanged):
    response = client.post(
        "/v1/sessions/demo/erase",
        content='{"reason":"x","all":true}'.encode("utf-16"),
        headers={"Content-Type": "application/json; charset=utf-16"},
    )
    assert response.status_code == 415


# ---- item 5: origins ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_foreign_origin_is_403_even_with_a_json_body(client, unchanged, method):
    response = client.request(
        method,
        "/v1/sessions/demo/items" if method == "GET" else "/v1/sessions/demo/erase",
        json=None if method == "GET" else ERASE,
        headers={"Origin": EVIL},
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden_origin"
    assert "access-control-allow-origin" not in response.headers


def test_a_null_origin_is_403(client, unchanged):
    response = client.post("/v1/sessions/demo/erase", json=ERASE, headers={"Origin": "null"})
    assert response.status_code == 403


def test_a_cross_site_subresource_without_origin_is_403(client, unchanged):
    """An `<img src>` on another site: no Origin, but chromium says Sec-Fetch-Site."""
    headers = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
    response = client.get("/v1/sessions/demo/items", headers=headers)
    assert response.status_code == 403


def test_the_service_own_origin_is_accepted(server, client):
    response = client.post("/v1/sessions/demo/turns/end", json={}, headers={"Origin": server.url})
    assert response.status_code == 200, response.text
    assert "access-control-allow-origin" not in response.headers  # no CORS for itself


def test_an_allowed_origin_gets_cors_and_its_preflight(client):
    origin = "http://friend.example:3000"
    preflight = client.options(
        "/v1/sessions/demo/turns/end",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == origin
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert preflight.headers["access-control-allow-headers"] == "content-type, authorization"
    response = client.post("/v1/sessions/demo/turns/end", json={}, headers={"Origin": origin})
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == origin
    assert response.headers["vary"] == "Origin"


def test_a_foreign_preflight_is_403(client):
    response = client.options(
        "/v1/sessions/demo/erase",
        headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"},
    )
    assert response.status_code == 403
    assert "access-control-allow-origin" not in response.headers


def test_a_websocket_from_a_foreign_origin_is_refused(server):
    async def attempt() -> int:
        url = "ws" + server.url.removeprefix("http") + "/v1/stream/ws"
        try:
            async with connect(url, origin=EVIL):
                return 101
        except InvalidStatus as exc:
            return exc.response.status_code

    assert asyncio.run(attempt()) == 403


# ---- item 5: Host -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/sessions", "/v1/sessions/demo/items", "/", "/nowhere"])
def test_a_forged_host_reads_nothing(server, client, unchanged, path):
    port = server.url.rsplit(":", 1)[1]
    response = client.get(path, headers={"Host": f"evil.example:{port}"})
    assert response.status_code == 421
    assert response.json()["error"]["code"] == "unknown_host"
    assert b"secret" not in response.content


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "LOCALHOST"])
def test_loopback_names_are_the_service_names(server, client, host):
    port = server.url.rsplit(":", 1)[1]
    assert client.get("/v1/sessions", headers={"Host": f"{host}:{port}"}).status_code == 200


def test_allowed_hosts_are_configurable(tmp_path):
    env = {"LEDGERMEM_ALLOWED_HOSTS": "memory.internal, other.internal"}
    with (
        Server(tmp_path / "data", "--allowed-host", "memory.internal", env=env) as running,
        httpx.Client(base_url=running.url) as c,
    ):
        assert c.get("/v1/sessions", headers={"Host": "memory.internal:80"}).status_code == 200
        # The flag wins over the environment, as every setting's does.
        assert c.get("/v1/sessions", headers={"Host": "other.internal"}).status_code == 421
        assert c.get("/v1/sessions", headers={"Host": "evil.example"}).status_code == 421


# ---- item 11: Allow -----------------------------------------------------------------------------


def every_route() -> list[RawRoute]:
    app = create_app(Settings())
    return [r for r in app.routes if isinstance(r, RawRoute) and not r.websocket]


@pytest.mark.parametrize("route", every_route(), ids=lambda r: r.pattern)
def test_every_405_carries_allow(client, route):
    path = route.pattern
    for part in route.parts:
        if part.startswith("{"):
            path = path.replace(part, "x")
    wrong = next(m for m in ("PATCH", "DELETE", "POST", "PUT", "GET") if m not in route.endpoints)
    response = client.request(wrong, path, json={} if wrong != "GET" else None)
    assert response.status_code == 405, (wrong, path, response.text)
    assert response.json()["error"]["code"] == "method_not_allowed"
    allowed = {m.strip() for m in response.headers["allow"].split(",")}
    assert allowed == set(route.endpoints)
