"""A forwarded principal is believed only with a valid replica signature (streams/web/auth.py).

Against a real `ledgermem serve` in file mode with API tokens and a replica secret: a client that
adds `x-ledgermem-forwarded-*` headers without the secret gets 401 with a JSON body, even when it
also sends a valid token; a request signed with the secret acts as the principal it names.
"""

from __future__ import annotations

import time

import httpx
import pytest

from streams.cluster.replica_secret import secret_path
from streams.cluster.replica_sig import (
    AT_HEADER,
    PRINCIPAL_HEADER,
    SIG_HEADER,
    request_target,
    sign,
)
from tests.server import Server

SECRET = b"replica-secret-for-the-auth-test-0123"
ACME = "acme-token"
GLOBEX = "globex-token"
TOKENS = f"{ACME}:acme:read+write+admin,{GLOBEX}:globex:read+write"


def _forwarded(method, path, tenant, scopes, query=b"", secret=SECRET, now=None):
    target = request_target(path.encode(), query)
    return sign(secret, method, target, tenant, frozenset(scopes), now or time.time())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("forwarding-auth") / "data"
    secret_path(data).parent.mkdir(parents=True)
    secret_path(data).write_bytes(SECRET + b"\n")
    with Server(data, "--unsafe-no-fsync", env={"LEDGERMEM_TOKENS": TOKENS}) as running:
        with httpx.Client(base_url=running.url, timeout=10) as client:
            headers = {"Authorization": f"Bearer {GLOBEX}"}
            assert client.put("/v1/sessions/g1", headers=headers).status_code == 201
            headers = {"Authorization": f"Bearer {ACME}"}
            assert client.put("/v1/sessions/a1", headers=headers).status_code == 201
        yield running


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=10) as c:
        yield c


def _sessions(response):
    assert response.status_code == 200, response.text
    return [s["session"] for s in response.json()["sessions"]]


def _assert_unauthorized(response, words):
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == "unauthorized" and words in error["message"]


def test_a_signed_forwarded_principal_is_that_principal(client):
    headers = _forwarded("GET", "/v1/sessions", "globex", {"read"})
    assert _sessions(client.get("/v1/sessions", headers=headers)) == ["g1"]
    headers = _forwarded("GET", "/v1/sessions", "acme", {"read"})
    assert _sessions(client.get("/v1/sessions", headers=headers)) == ["a1"]


def test_a_spoofed_principal_with_a_valid_token_is_refused(client):
    """The token is for acme; the headers claim globex with made-up signatures."""
    for sig in ("0" * 64, "f" * 64):
        headers = {
            "Authorization": f"Bearer {ACME}",
            PRINCIPAL_HEADER: "globex:admin,read,write",
            SIG_HEADER: sig,
            AT_HEADER: str(int(time.time())),
        }
        _assert_unauthorized(client.get("/v1/sessions", headers=headers), "signature")


def test_a_principal_header_alone_is_refused_not_ignored(client):
    headers = {"Authorization": f"Bearer {ACME}", PRINCIPAL_HEADER: "globex:read"}
    _assert_unauthorized(client.get("/v1/sessions", headers=headers), "needs all of")


def test_a_signature_made_with_another_secret_is_refused(client):
    headers = _forwarded("GET", "/v1/sessions", "globex", {"read"}, secret=b"x" * 32)
    _assert_unauthorized(client.get("/v1/sessions", headers=headers), "signature")


def test_a_signature_for_another_request_is_refused(client):
    headers = _forwarded("GET", "/v1/sessions/g1", "globex", {"read", "write"})
    _assert_unauthorized(client.delete("/v1/sessions/g1", headers=headers), "signature")
    _assert_unauthorized(client.get("/v1/sessions/a1", headers=headers), "signature")
    assert client.get("/v1/sessions/g1", headers=headers).status_code == 200


def test_an_old_signature_is_refused(client):
    headers = _forwarded("GET", "/v1/sessions", "globex", {"read"}, now=time.time() - 120)
    _assert_unauthorized(client.get("/v1/sessions", headers=headers), "old")


def test_the_query_is_signed(client):
    headers = _forwarded("GET", "/v1/sessions", "acme", {"read"}, query=b"app=x")
    assert _sessions(client.get("/v1/sessions?app=x", headers=headers)) == []
    _assert_unauthorized(client.get("/v1/sessions?app=y", headers=headers), "signature")


def test_forwarded_scopes_are_enforced_like_a_token_s(client):
    headers = _forwarded("PUT", "/v1/sessions/g2", "globex", {"read"})
    response = client.put("/v1/sessions/g2", headers=headers)
    assert response.status_code == 403 and response.json()["error"]["code"] == "forbidden"
    headers = _forwarded("PUT", "/v1/sessions/g2", "globex", {"read", "write"})
    assert client.put("/v1/sessions/g2", headers=headers).status_code == 201


def test_streams_check_forwarded_headers_too(client):
    headers = {PRINCIPAL_HEADER: "globex:read", SIG_HEADER: "0" * 64, AT_HEADER: "1"}
    response = client.get("/v1/events", params={"token": ACME, "wait": "0"}, headers=headers)
    _assert_unauthorized(response, "signature")


def test_without_a_secret_every_forwarded_request_is_refused(tmp_path):
    with (
        Server(tmp_path / "data", "--unsafe-no-fsync") as running,
        httpx.Client(base_url=running.url, timeout=10) as client,
    ):
        assert client.get("/v1/sessions").status_code == 200  # no tokens: tenant default
        headers = _forwarded("GET", "/v1/sessions", "default", {"read"})
        _assert_unauthorized(client.get("/v1/sessions", headers=headers), "no replica secret")
