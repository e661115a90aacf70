"""The forwarding middleware (streams/cluster/forwarding.py) against a real leader.

The leader is a real `ledgermem serve` (file mode, API tokens, a replica secret). The front
replica is `ForwardToLeader` under a real uvicorn in this process, in front of a small app that
says it answered locally; the cluster's answer (Local / Remote / NoLeader) comes from `Routes`, a
stand-in for `Cluster.route` that answers what each test needs (leader here, leader there, a
fenced leader answering 421, a dead one, none).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from streams.cluster import Local, NoLeader, Remote
from streams.cluster.forwarding import ForwardToLeader, leader_routes
from streams.cluster.replica_secret import ENV
from streams.cluster.replica_sig import AT_HEADER, PRINCIPAL_HEADER, SIG_HEADER
from streams.server.settings import Settings, Token
from tests.server import Server

SECRET = b"forwarding-proxy-test-secret-0123456789"
WRITER, READER = "writer-token", "reader-token"
TOKENS = (
    Token(WRITER, "acme", frozenset({"read", "write", "admin"})),
    Token(READER, "acme", frozenset({"read"})),
)
AUTH = {"Authorization": f"Bearer {WRITER}"}


class Routes:
    """Stands in for the cluster's route cache: answers `route()` from a list, moving to the
    next answer when the forwarder comes back for a fresh one (after a miss); the last repeats.
    """

    tick = 0.1

    def __init__(self, *routes) -> None:
        self.routes = list(routes)
        self.asked = 0
        self.refreshes = 0  # times the forwarder came back after a miss

    def partition_of(self, tenant: str) -> int:
        return 0

    def route(self, partition: int):
        self.asked += 1
        if self.asked == 2:  # the second look is the refresh after a miss
            self.refreshes += 1
            if len(self.routes) > 1:
                self.routes.pop(0)
        return self.routes[0]


class Refreshing(Routes):
    """With `refresh()`, as `Cluster` has: the forwarder asks for a fresh look after a miss."""

    def __init__(self, *routes) -> None:
        super().__init__(*routes)
        self.refresh_calls = 0

    def refresh(self) -> None:
        self.refresh_calls += 1


@contextlib.contextmanager
def serving(app):
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical", lifespan="off"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


async def _here(request: Request):
    body = await request.body()
    return JSONResponse(
        {"answered_by": "front", "path": request.url.path, "body": body.decode()},
        headers={"x-answered-by": "front"},
    )


def _front_app():
    return Starlette(routes=[Route("/{rest:path}", _here, methods=["GET", "POST", "PUT"])])


@pytest.fixture(scope="module")
def leader(tmp_path_factory):
    data = tmp_path_factory.mktemp("leader") / "data"
    env = {"LEDGERMEM_TOKENS": f"{WRITER}:acme:read+write+admin", ENV: SECRET.decode()}
    with Server(data, "--unsafe-no-fsync", env=env) as running:
        yield running.url


def _answering_421(code: str):
    async def misdirected(request: Request):
        return JSONResponse({"error": {"code": code, "message": f"a 421 {code}"}}, 421)

    return Starlette(routes=[Route("/{rest:path}", misdirected, methods=["GET", "POST", "PUT"])])


@pytest.fixture(scope="module")
def fenced():
    """A replica that lost its lease: every leader route answers 421 not_leader."""
    with serving(_answering_421("not_leader")) as url:
        yield url


@pytest.fixture(scope="module")
def unknown_host():
    """A leader whose allowed_hosts lacks the name it was reached by: 421 unknown_host."""
    with serving(_answering_421("unknown_host")) as url:
        yield url


@pytest.fixture(scope="module")
def hangs_up():
    """A leader that dies mid-request: it reads the request and closes without answering."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    sock.close()


def _dead_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now: connections are refused
    return f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def front(routes: Routes, secret: bytes | None = SECRET, max_body_bytes: int = 1 << 20):
    service = SimpleNamespace(
        cluster=routes,
        settings=Settings(tokens=TOKENS, max_body_bytes=max_body_bytes),
        replica_secret=secret,
    )
    middleware = ForwardToLeader(_front_app(), service, leader_routes(service))
    with serving(middleware) as url, httpx.Client(base_url=url, timeout=20) as client:
        client.middleware = middleware
        yield client


def test_a_write_through_the_front_lands_at_the_leader_as_the_caller(leader):
    with front(Routes(Remote(leader, "leader"))) as client, httpx.Client(base_url=leader) as direct:
        created = client.put("/v1/sessions/w1", headers=AUTH, json={"metadata": {"app": "x"}})
        assert created.status_code == 201, created.text
        assert "x-answered-by" not in created.headers
        assert created.json()["session"]["tenant"] == "acme"
        added = client.post(
            "/v1/sessions/w1/sections/findings/items", headers=AUTH, json={"content": "hello"}
        )
        assert added.status_code == 201, added.text
        items = direct.get("/v1/sessions/w1/items", headers=AUTH).json()["items"]
        assert [i["content"] for i in items] == ["hello"]
        assert client.middleware.forwarded == 2


def test_idempotency_key_and_if_match_reach_the_leader(leader):
    with front(Routes(Remote(leader, "leader"))) as client:
        version = client.put("/v1/sessions/i1", headers=AUTH).headers["etag"]
        headers = {**AUTH, "Idempotency-Key": "k-1"}
        path = "/v1/sessions/i1/sections/findings/items"
        first = client.post(path, headers=headers, json={"content": "once"})
        again = client.post(path, headers=headers, json={"content": "once"})
        assert first.status_code == 201 and again.status_code in (200, 201)
        assert again.json()["record"] == first.json()["record"]
        stale = client.post("/v1/sessions/i1/end", headers={**AUTH, "If-Match": version})
        assert stale.status_code == 409
        assert stale.json()["error"]["code"] == "version_conflict"
        items = client.get("/v1/sessions/i1/items", headers=AUTH).json()["items"]
        assert [i["content"] for i in items] == ["once"]


def test_percent_encoded_ids_and_the_query_arrive_byte_for_byte(leader):
    with front(Routes(Remote(leader, "leader"))) as client:
        put = client.put("/v1/sessions/team%2F1%2Bx", headers=AUTH, json={"metadata": {"k": "a b"}})
        assert put.status_code == 201, put.text
        assert put.json()["session"]["session"] == "team/1+x"
        found = client.get("/v1/sessions?metadata.k=a%20b", headers=AUTH).json()["sessions"]
        assert [s["session"] for s in found] == ["team/1+x"]
        assert client.get("/v1/sessions?metadata.k=zz", headers=AUTH).json()["sessions"] == []


def test_the_leader_s_refusals_come_back_as_they_are(leader):
    with front(Routes(Remote(leader, "leader"))) as client:
        missing = client.get("/v1/sessions/nope", headers=AUTH)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        reader = client.put("/v1/sessions/r1", headers={"Authorization": f"Bearer {READER}"})
        assert reader.status_code == 403 and reader.json()["error"]["code"] == "forbidden"


def test_a_large_answer_streams_back_identical(leader):
    with front(Routes(Remote(leader, "leader"))) as client, httpx.Client(base_url=leader) as direct:
        client.put("/v1/sessions/big", headers=AUTH)
        path = "/v1/sessions/big/sections/documents/items"
        for batch in range(10):
            items = [{"content": f"item {batch}.{n} " + "x" * 1000} for n in range(20)]
            added = client.post(path, headers=AUTH, json={"items": items})
            assert added.status_code == 201, added.text
        through = client.get("/v1/sessions/big/items", headers=AUTH)
        straight = direct.get("/v1/sessions/big/items", headers=AUTH)
        assert through.status_code == 200 and len(through.content) > 200_000
        assert through.content == straight.content
        assert through.headers["etag"] == straight.headers["etag"]


def test_routes_every_replica_answers_are_never_forwarded(leader):
    with front(Routes(Remote(leader, "leader"))) as client:
        for path in ("/v1/log/status", "/healthz", "/readyz", "/metrics", "/v1/stream/jsonl",
                     "/v1/stream/sse", "/v1/events", "/", "/ui/app.js", "/openapi.json"):  # fmt: skip
            answer = client.get(path, headers=AUTH)
            assert answer.headers.get("x-answered-by") == "front", path
        assert client.middleware.forwarded == 0


def test_a_local_leader_runs_the_request_here():
    with front(Routes(Local(None))) as client:
        answer = client.put("/v1/sessions/l1", headers=AUTH, json={})
        assert answer.json()["answered_by"] == "front"
        assert client.middleware.forwarded == 0


def test_a_bad_token_is_refused_at_the_front(leader):
    with front(Routes(Remote(leader, "leader"))) as client:
        refused = client.put("/v1/sessions/b1", headers={"Authorization": "Bearer wrong"})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        assert client.middleware.forwarded == 0


def test_forwarding_headers_from_a_client_are_not_forwarded_again(leader):
    """They are judged where they arrive (the app's auth), never passed on with our signature."""
    headers = {PRINCIPAL_HEADER: "globex:read", SIG_HEADER: "0" * 64, AT_HEADER: "1"}
    with front(Routes(Remote(leader, "leader"))) as client:
        answer = client.get("/v1/sessions", headers={**AUTH, **headers})
        assert answer.headers.get("x-answered-by") == "front"
        assert client.middleware.forwarded == 0


def test_no_leader_is_503_with_retry_after():
    with front(Routes(NoLeader(retry_after=2.5))) as client:
        answer = client.put("/v1/sessions/n1", headers=AUTH)
        assert answer.status_code == 503 and answer.headers["retry-after"] == "3"
        assert answer.json()["error"]["code"] == "no_leader"


def test_a_fenced_leader_s_421_refreshes_the_route_and_retries_once(leader, fenced):
    routes = Routes(Remote(fenced, "fenced"), Remote(leader, "leader"))
    with front(routes) as client:
        answer = client.put("/v1/sessions/f1", headers=AUTH, json={"metadata": {"a": "1"}})
        assert answer.status_code == 201, answer.text
        assert routes.refreshes == 1 and client.middleware.forwarded == 2


def test_a_cluster_with_refresh_is_asked_to_look_again_after_a_421(leader, fenced):
    routes = Refreshing(Remote(fenced, "fenced"), Remote(leader, "leader"))
    with front(routes) as client:
        answer = client.put("/v1/sessions/f4", headers=AUTH)
        assert answer.status_code == 201, answer.text
        assert routes.refresh_calls == 1 and client.middleware.forwarded == 2


def test_two_421s_in_a_row_are_503_not_a_loop(fenced):
    routes = Routes(Remote(fenced, "fenced"))
    with front(routes) as client:
        answer = client.put("/v1/sessions/f2", headers=AUTH)
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert answer.json()["error"]["code"] == "no_leader"
        assert routes.refreshes == 1 and client.middleware.forwarded == 2


def test_after_a_421_this_replica_may_be_the_leader_and_gets_the_body(fenced):
    routes = Routes(Remote(fenced, "fenced"), Local(None))
    with front(routes) as client:
        answer = client.post("/v1/sessions/f3/end", headers=AUTH, content=b'{"x": 1}')
        assert answer.json() == {"answered_by": "front", "path": "/v1/sessions/f3/end",
                                 "body": '{"x": 1}'}  # fmt: skip


def test_a_refused_connection_refreshes_and_retries(leader):
    routes = Routes(Remote(_dead_url(), "dead"), Remote(leader, "leader"))
    with front(routes) as client:
        assert client.put("/v1/sessions/d1", headers=AUTH).status_code == 201
        assert routes.refreshes == 1


def test_a_leader_dying_mid_request_is_503_and_not_retried(hangs_up, leader):
    routes = Routes(Remote(hangs_up, "hangs-up"), Remote(leader, "leader"))
    with front(routes) as client:
        answer = client.put("/v1/sessions/h1", headers={**AUTH, "Idempotency-Key": "h"})
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "leader_unreachable"
        assert "Idempotency-Key" in answer.json()["error"]["message"]
        assert routes.refreshes == 0


def test_a_body_over_the_limit_is_413_at_the_front(leader):
    with front(Routes(Remote(leader, "leader")), max_body_bytes=1000) as client:
        answer = client.post(
            "/v1/sessions/x/sections/findings/items", headers=AUTH, json={"content": "y" * 2000}
        )
        assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"
        assert client.middleware.forwarded == 0


def test_without_a_secret_the_front_says_so_instead_of_forwarding(leader):
    with front(Routes(Remote(leader, "leader")), secret=None) as client:
        answer = client.put("/v1/sessions/s1", headers=AUTH)
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "no_replica_secret"


def test_a_421_that_is_not_about_leadership_comes_back_unretried(unknown_host, leader):
    routes = Routes(Remote(unknown_host, "misnamed"), Remote(leader, "leader"))
    with front(routes) as client:
        answer = client.put("/v1/sessions/u1", headers=AUTH)
        assert answer.status_code == 421
        assert answer.json()["error"] == {"code": "unknown_host", "message": "a 421 unknown_host"}
        assert routes.refreshes == 0 and client.middleware.forwarded == 1


def test_an_allowed_cross_origin_call_is_not_refused_by_the_leader(leader):
    """The front's guard judged Origin and Sec-Fetch-*; the leader must not judge them again."""
    headers = {**AUTH, "Origin": "https://app.example", "Sec-Fetch-Site": "cross-site",
               "Sec-Fetch-Mode": "cors"}  # fmt: skip
    with front(Routes(Remote(leader, "leader"))) as client:
        answer = client.put("/v1/sessions/o1", headers=headers)
        assert answer.status_code == 201, answer.text


# ---- a leader that never answers while the partition moves (issue 30)


@pytest.fixture(scope="module")
def silent():
    """A leader that froze: it accepts connections and reads requests, and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            held.append(conn)  # open, read by nobody: the bytes wait in the kernel

    threading.Thread(target=serve, daemon=True).start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    for conn in held:
        conn.close()


class Moving:
    """A cluster whose partition is led by `first` until `move()`; then by `then`. It counts its
    looks at the store (`looks`), as `Cluster` does, so a forward in flight watches its route."""

    tick = 0.1

    def __init__(self, first, then) -> None:
        self.first, self.then = first, then
        self.moved = False
        self.looks = 0

    def partition_of(self, tenant: str) -> int:
        return 0

    def route(self, partition: int):
        return self.then if self.moved else self.first

    def move_after(self, seconds: float) -> None:
        def move() -> None:
            time.sleep(seconds)
            self.moved = True
            self.looks += 1

        threading.Thread(target=move, daemon=True).start()


def test_a_request_waiting_on_a_leader_that_lost_the_partition_is_served_here(silent):
    routes = Moving(Remote(silent, "frozen"), Local(None))
    with front(routes) as client:
        routes.move_after(0.5)
        answer = client.post(
            "/v1/sessions/m1/end", headers={**AUTH, "Idempotency-Key": "m1"}, content=b"{}"
        )
        assert answer.status_code == 200 and answer.json()["answered_by"] == "front"


def test_a_request_waiting_on_a_leader_that_lost_the_partition_goes_to_the_new_one(silent, leader):
    routes = Moving(Remote(silent, "frozen"), Remote(leader, "leader"))
    with front(routes) as client:
        routes.move_after(0.5)
        answer = client.put("/v1/sessions/m2", headers=AUTH)
        assert answer.status_code == 201, answer.text
        assert client.middleware.forwarded == 2


def test_a_moved_request_that_is_not_safe_to_resend_is_503_and_not_resent(silent, leader):
    routes = Moving(Remote(silent, "frozen"), Remote(leader, "leader"))
    with front(routes) as client:
        routes.move_after(0.5)
        answer = client.post("/v1/sessions/m3/end", headers=AUTH, content=b"{}")
        assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
        assert answer.json()["error"]["code"] == "leader_unreachable"
        assert client.middleware.forwarded == 1
