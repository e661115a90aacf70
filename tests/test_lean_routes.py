"""The item POST is a lean route (streams/routes/api.py `lean`) that the app's express lane runs without
the middleware chain (streams/web/app.py). Against a real `ledgermem serve`: every request answers the
same whichever way it went. A request from an allowed foreign origin must take the whole chain
(its answer gets CORS headers), so each request is sent both ways and the answers compared:
status, error bodies, header names, and for a write the record's and item's shape.

Also the response writes (streams/web/coalesce.py): pipelined requests are answered in order, and
`Expect: 100-continue` still gets its interim answer before the body is sent."""

from __future__ import annotations

import socket

import httpx
import pytest

from streams.cluster.replica_sig import PRINCIPAL_HEADER
from tests.server import Server

ACME, GLOBEX, READER = "acme-token", "globex-token", "reader-token"
TOKENS = f"{ACME}:acme:read+write+admin,{GLOBEX}:globex:read+write,{READER}:acme:read"
ORIGIN = "https://app.example"
ITEMS = "/v1/sessions/a1/sections/findings/items"
CORS = {"access-control-allow-origin", "access-control-allow-credentials"}
CORS |= {"access-control-expose-headers", "vary"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("lean") / "data"
    with Server(data, "--allowed-origin", ORIGIN, env={"LEDGERMEM_TOKENS": TOKENS}) as running:
        headers = _bearer(ACME)
        assert httpx.put(running.url + "/v1/sessions/a1", headers=headers).status_code == 201
        yield running


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


def _bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def _json(body: bytes) -> dict:
    return {"content": body}  # httpx: raw bytes, with the Content-Type the case gives


JSON = {"Content-Type": "application/json"}
CASES = {
    "single": dict(json={"content": "x"}, headers=_bearer(ACME)),
    "batch": dict(json={"items": [{"content": "a"}, {"content": "b", "tags": ["t"]}]}),
    "query token": dict(json={"content": "x"}, params={"token": ACME}),
    "cookie token": dict(json={"content": "x"}, cookies={"ledgermem_token": ACME}),
    "no token": dict(json={"content": "x"}, auth=False),
    "wrong token": dict(json={"content": "x"}, headers=_bearer("nope")),
    "not a bearer": dict(json={"content": "x"}, headers={"Authorization": "Basic eDp5"}),
    "read scope only": dict(json={"content": "x"}, headers=_bearer(READER)),
    "another tenant's session": dict(json={"content": "x"}, headers=_bearer(GLOBEX)),
    "unsigned forwarded principal": dict(
        json={"content": "x"}, headers={**_bearer(ACME), PRINCIPAL_HEADER: "acme read"}
    ),
    "not json": dict(content=b"{not json", headers=JSON),
    "duplicate keys": dict(content=b'{"content":"a","content":"b"}', headers=JSON),
    "empty body": dict(content=b"  ", headers=JSON),
    "not an object": dict(json=["x"]),
    "a bad field": dict(json={"content": "x", "tags": "t"}),
    "a bad batch": dict(json={"items": {"content": "x"}}),
    "too many items": dict(json={"items": [{"content": "x"}] * 1001}),
    "text/plain": dict(content=b'{"content":"x"}', headers={"Content-Type": "text/plain"}),
    "stale If-Match": dict(json={"content": "x"}, headers={"If-Match": '"1"'}),
    "bad If-Match": dict(json={"content": "x"}, headers={"If-Match": "--5"}),
    "unknown section": dict(json={"content": "x"}, path="/v1/sessions/a1/sections/nope/items"),
    "unknown session": dict(json={"content": "x"}, path="/v1/sessions/zz/sections/findings/items"),
    "wrong method": dict(method="PUT", json={"content": "x"}),
}


def _send(client: httpx.Client, case: dict, origin: str | None) -> httpx.Response:
    case = dict(case)
    method = case.pop("method", "POST")
    path = case.pop("path", ITEMS)
    headers = dict(case.pop("headers", {}))
    if case.pop("auth", True) and "params" not in case and "cookies" not in case:
        headers.setdefault("Authorization", f"Bearer {ACME}")
    if origin is not None:
        headers["Origin"] = origin
    cookies = case.pop("cookies", None)
    if cookies:
        headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    return client.request(method, path, headers=headers, **case)


def _shape(response: httpx.Response) -> tuple:
    names = sorted(set(response.headers.keys()) - CORS - {"date"})
    body = response.json()
    if response.status_code == 201:
        items = body.get("items") or [body["item"]]
        body = {
            "keys": sorted(body),
            "record": sorted(body["record"]),
            "items": [
                {k: v for k, v in i.items() if k not in ("id", "seq", "h", "ts")} for i in items
            ],
        }
    return response.status_code, names, response.headers.get("allow"), body


@pytest.mark.parametrize("name", list(CASES))
def test_the_express_lane_answers_as_the_whole_chain(client, name):
    lean = _send(client, CASES[name], None)
    chain = _send(client, CASES[name], ORIGIN)
    assert chain.headers["access-control-allow-origin"] == ORIGIN  # it took the whole chain
    assert "access-control-allow-origin" not in lean.headers
    assert _shape(lean) == _shape(chain)


def test_a_write_answers_its_durable_record_and_the_new_version(client):
    response = _send(client, CASES["single"], None)
    assert response.status_code == 201
    record = response.json()["record"]
    session = client.get("/v1/sessions/a1", headers=_bearer(ACME))
    assert response.headers["etag"] == session.headers["etag"] == f'"{session.json()["version"]}"'
    assert client.get("/v1/log/status", headers=_bearer(ACME)).json()["head"] >= record["seq"]


@pytest.mark.parametrize("origin", [None, ORIGIN])
def test_an_idempotent_retry_answers_the_first_record(client, origin):
    headers = {**_bearer(ACME), "Idempotency-Key": f"lean-{origin}"}
    first = client.post(ITEMS, json={"content": "once"}, headers=headers)
    again = client.post(ITEMS, json={"content": "once"}, headers=headers)
    assert first.status_code == again.status_code == 201
    assert first.json()["record"] == again.json()["record"]


def _raw(server, data: bytes, until: int) -> bytes:
    """Send `data` on one connection; read until `until` responses' bodies are in."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(data)
        received = b""
        while received.count(b"HTTP/1.1 201") + received.count(b"HTTP/1.1 200") < until or (
            not received.endswith(b"}")
        ):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


def _post(body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST " + ITEMS.encode() + b" HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        b"authorization: Bearer " + ACME.encode() + b"\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n" % len(body) + extra + b"\r\n" + body
    )


def test_pipelined_requests_are_answered_in_order(server):
    bodies = [b'{"content":"pipelined %d"}' % k for k in range(3)]
    received = _raw(server, b"".join(_post(b) for b in bodies), 3)
    answers = received.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"201"] * 3
    assert [b"pipelined %d" % k in a for k, a in enumerate(answers)] == [True] * 3


def test_expect_100_continue_gets_its_interim_answer_first(server):
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    body = b'{"content":"after the interim answer"}'
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(_post(body, b"expect: 100-continue\r\n")[: -len(body)])  # the head alone
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        answer = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n") :]
        while not answer.endswith(b"}"):
            answer += sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 201") and b"after the interim answer" in answer
