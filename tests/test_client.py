"""The Python client (streams/client, docs/client.md) against a real `ledgermem serve`.

A subscriber follows the log across a kill -9 and a restart of the service on the same port and
gets every record exactly once, in order, byte for byte the file's lines; writes made through the
outage are applied once each; a write whose answer is lost is retried with its Idempotency-Key
and applied once; refusals are typed errors carrying their body; If-Match conflicts are
VersionConflict; the sync and the async client behave the same. The pure parts (retry policy,
SSE decoding, chain checks) are tested without a network.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest
from server import Server as ServeProcess

from eventstore.jcs import canonical
from eventstore.reader import LogReader
from eventstore.record import genesis, new_record
from streams.client import (
    AsyncClient,
    ChainBroken,
    Client,
    Retry,
    StreamClosed,
    errors,
)
from streams.client.chain import ChainCheck
from streams.client.retry import Attempts
from streams.client.sse import SseDecoder
from streams.client.subscription import SubscriptionState

# Writes ride through a restart: up to 200 tries, each wait at most 0.25 s.
PATIENT = Retry(tries=200, base=0.02, cap=0.25)
SPECIAL = 'raw U+2028 [\u2028] and U+0085 [\u0085], a quote " and é'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server(ServeProcess):
    """On a port of the test's choosing, so that a restart comes back at the same address."""

    def __init__(self, data_dir: Path, port: int, *args: str, env: dict | None = None) -> None:
        super().__init__(data_dir, "--port", str(port), "--seg-bits", "6", *args, env=env)


def file_lines(data: Path) -> list[bytes]:
    return [line.rstrip(b"\n") for _, line in LogReader(data / "log").lines()]


async def wait_for(condition, what: str, limit: float = 30.0) -> None:
    """Waits until `condition()` holds; a bound against hanging, not a measured time."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    data = tmp_path_factory.mktemp("client") / "data"
    with Server(data, free_port(), "--unsafe-no-fsync") as server:
        yield server


# ---- a subscription across kill -9 and restart


def test_subscribers_get_every_record_once_in_order_across_a_kill_9_and_restart(tmp_path):
    """An SSE and a WebSocket subscriber follow the log while the service is killed (SIGKILL)
    mid-stream, with writes in flight, and restarted on the same port and data directory."""
    data, port = tmp_path / "data", free_port()
    servers = [Server(data, port).start()]
    contents = [f"{i} {SPECIAL}" for i in range(40)]
    acked: list[dict] = []

    async def main():
        async with AsyncClient(servers[0].url, retry=PATIENT) as client:
            await client.create_session("crash/a:b@c")
            subscriptions = {t: client.subscribe(transport=t) for t in ("sse", "ws")}
            got: dict[str, list] = {t: [] for t in subscriptions}

            async def follow(transport: str) -> None:
                async for record in subscriptions[transport]:
                    got[transport].append(record)

            async def write() -> None:
                for content in contents:
                    acked.append(await client.add_item("crash/a:b@c", "messages", content))

            def live() -> bool:
                return len(acked) >= 15 and all(g and g[-1].seq >= 16 for g in got.values())

            async def crash_and_restart() -> None:
                await wait_for(live, "both subscribers live")
                await asyncio.to_thread(servers[0].kill)  # mid-stream, with writes in flight
                await asyncio.sleep(0.3)  # the writer and the subscribers meet a dead port
                servers.append(await asyncio.to_thread(Server(data, port).start))

            followers = [asyncio.create_task(follow(t)) for t in subscriptions]
            await asyncio.gather(write(), crash_and_restart())
            lines = file_lines(data)
            head = orjson.loads(lines[-1])["seq"]
            for subscription in subscriptions.values():
                await wait_for(lambda s=subscription: s.cursor >= head, "the head")
            for follower in followers:
                follower.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await follower
            for subscription in subscriptions.values():
                await subscription.aclose()
            items = await client.get_items("crash/a:b@c", "messages")
            return got, subscriptions, lines, items

    try:
        got, subscriptions, lines, items = asyncio.run(main())
    finally:
        servers[-1].kill()
    # Every record, once, in order, as the file's exact bytes, up to the head after the writes
    # (opening a stream appends its own trace, so the log may have grown since).
    final = file_lines(data)
    for transport, records in got.items():
        assert len(records) >= len(lines), transport
        assert [record.line for record in records] == final[: len(records)], transport
        assert [r.seq for r in records] == list(range(len(records)))
        assert any(record.type == "log.resume" for record in records)  # the restart
        state = subscriptions[transport].state
        assert state.connections >= 2 and state.duplicates == 0
    # Every write made through the outage was applied exactly once.
    assert sorted(item["content"] for item in items["items"]) == sorted(contents)
    assert len(acked) == len(contents)


def test_a_sync_subscriber_follows_a_graceful_restart_and_misses_nothing(tmp_path):
    """SIGTERM ends every stream cleanly (the WebSocket closes with 1001); the subscriber comes
    back when the service does and carries on after its cursor."""
    data, port = tmp_path / "data", free_port()
    servers = [Server(data, port, "--unsafe-no-fsync").start()]
    got: list = []
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            with Client(servers[0].url) as client:
                subscription = client.subscribe(transport="ws")
                for record in subscription:
                    got.append(record)
                    if (
                        record.type == "item.added"
                        and record.payload["items"][0]["content"] == "end"
                    ):
                        break
                subscription.close()
                got.append(subscription.state)
        except BaseException as exc:  # reported by the test, not lost in the thread
            failure.append(exc)

    follower = threading.Thread(target=follow)
    follower.start()
    try:
        with Client(servers[0].url, retry=PATIENT) as client:
            client.create_session("graceful")
            client.add_item("graceful", "messages", "before")
            servers[0].stop()
            servers.append(Server(data, port, "--unsafe-no-fsync").start())
            client.add_item("graceful", "messages", "end")
        follower.join(30)
    finally:
        servers[-1].kill()
    assert not failure and not follower.is_alive()
    *records, state = got
    assert [record.line for record in records] == file_lines(data)[: len(records)]
    assert {"log.close", "log.resume"} <= {record.type for record in records}
    assert state.connections >= 2 and state.duplicates == 0


def test_a_sync_subscription_resumes_where_another_left_off_and_checks_the_link(service):
    with Client(service.url) as client:
        client.create_session("sync/resume")
        for i in range(3):
            client.add_item("sync/resume", "messages", f"first {i}")
        with client.subscribe({"session": "sync/resume"}, transport="ws") as first:
            seen = [next(first) for _ in range(4)]  # session.created and three items
        cursor, last_h = first.cursor, first.last_h
        for i in range(3):
            client.add_item("sync/resume", "messages", f"second {i}")
        with client.subscribe({"session": "sync/resume"}, after=cursor, after_h=last_h) as rest:
            more = [next(rest) for _ in range(3)]
    assert [r.type for r in seen] == ["session.created", *["item.added"] * 3]
    assert [r.payload["items"][0]["content"] for r in more] == [f"second {i}" for i in range(3)]
    assert all(a.seq < b.seq for a, b in zip([*seen, *more], [*seen, *more][1:], strict=False))


def test_with_a_token_streams_are_its_tenants_and_a_forbidden_filter_is_a_typed_refusal(
    tmp_path,
):
    env = {"LEDGERMEM_TOKENS": "tok-a:acme:read+write,tok-b:other:read+write"}
    with Server(tmp_path / "data", free_port(), "--unsafe-no-fsync", env=env) as server:
        with Client(server.url, token="tok-b") as other:
            other.create_session("theirs")
        with Client(server.url, token="tok-a") as client:
            client.create_session("ours")
            client.add_item("ours", "messages", "one")
            got = {}
            for transport in ("sse", "ws"):
                with client.subscribe(transport=transport) as subscription:
                    got[transport] = [next(subscription) for _ in range(2)]
                    assert subscription.state.chain.contiguous is False  # the tenant is forced
            refusals = []
            for transport in ("sse", "ws"):
                subscription = client.subscribe({"tenant": "other"}, transport=transport)
                with pytest.raises(errors.ClientError) as refused:
                    next(subscription)
                refusals.append((type(refused.value), subscription.state.connections))
        with pytest.raises(errors.Unauthorized):
            Client(server.url).get_session("ours")
    for records in got.values():
        assert [(r.data["tenant"], r.type) for r in records] == [
            ("acme", "session.created"),
            ("acme", "item.added"),
        ]
    # Refused at once, never retried: 403 on the SSE request, a 1008 close on the WebSocket.
    assert refusals == [(errors.Forbidden, 0), (StreamClosed, 1)]


# ---- writes: idempotency, If-Match, typed errors


class LoseFirstAnswer(httpx.HTTPTransport):
    """Sends each request to the real service, then, for the first write only, throws the
    answer away and raises the error a dropped connection gives: the write landed, the client
    does not know it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []
        self.lost: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.sent.append(request)
        if request.method != "GET" and not self.lost:
            self.lost.append(response.read())
            response.close()
            raise httpx.ReadError("the connection broke before the answer arrived")
        return response


class AsyncLoseFirstAnswer(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []
        self.lost: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        self.sent.append(request)
        if request.method != "GET" and not self.lost:
            self.lost.append(await response.aread())
            await response.aclose()
            raise httpx.ReadError("the connection broke before the answer arrived")
        return response


def test_a_write_whose_answer_was_lost_is_retried_with_its_key_and_applied_once(service):
    with Client(service.url) as setup:
        setup.create_session("lost/sync")
    transport = LoseFirstAnswer()
    with Client(service.url, transport=transport) as client:
        answer = client.add_item("lost/sync", "messages", "once")
        items = client.get_items("lost/sync")["items"]
    first, retry = transport.sent[0], transport.sent[1]
    assert first.headers["idempotency-key"] == retry.headers["idempotency-key"]
    assert answer["record"] == orjson.loads(transport.lost[0])["record"]  # the first call's
    assert [item["content"] for item in items] == ["once"]


def test_an_async_write_whose_answer_was_lost_is_applied_once(service):
    async def main():
        async with AsyncClient(service.url) as setup:
            await setup.create_session("lost/async")
        transport = AsyncLoseFirstAnswer()
        async with AsyncClient(service.url, transport=transport) as client:
            answer = await client.end_turn("lost/async")
            info = await client.get_session("lost/async")
        return transport, answer, info

    transport, answer, info = asyncio.run(main())
    assert len({r.headers["idempotency-key"] for r in transport.sent if r.method == "POST"}) == 1
    assert answer["record"] == orjson.loads(transport.lost[0])["record"]
    assert info["turn"] == 1  # one turn ended, not two


def test_each_logical_call_has_its_own_key_and_a_given_key_is_sent_as_is(service):
    transport = httpx.HTTPTransport()
    sent: list[httpx.Request] = []
    original = transport.handle_request

    def spy(request):
        sent.append(request)
        return original(request)

    transport.handle_request = spy  # type: ignore[method-assign]
    with Client(service.url, transport=transport) as client:
        client.create_session("keys")
        client.add_item("keys", "messages", "a")
        client.add_item("keys", "messages", "b")
        first = client.add_item("keys", "messages", "c", idempotency_key="mine-1")
        again = client.add_item("keys", "messages", "c", idempotency_key="mine-1")
        items = client.get_items("keys")["items"]
    keys = [r.headers.get("idempotency-key") for r in sent if r.method != "GET"]
    assert len(set(keys[:3])) == 3 and keys[3:] == ["mine-1", "mine-1"]
    assert first["record"] == again["record"]
    assert [item["content"] for item in items] == ["a", "b", "c"]


def test_refusals_are_typed_errors_with_their_body_and_append_nothing(service):
    with Client(service.url) as client:
        client.create_session("typed")
        client.end_session("typed")
        client.create_session("typed/open")
        head = client.log_status()["head"]
        with pytest.raises(errors.NotFound) as missing:
            client.get_session("no such session")
        with pytest.raises(errors.NotFound):
            client.add_item("no such session", "messages", "x")
        with pytest.raises(errors.SessionEnded) as ended:
            client.add_item("typed", "messages", "x")
        with pytest.raises(errors.InvalidInput) as bad:
            client.add_item("typed/open", "messages", "x", priority="high")
        with pytest.raises(errors.BadRequest):
            client.search("")
        with pytest.raises(errors.NotFound):
            client.update_item("typed/open", "messages", "no such item", content="y")
        assert client.log_status()["head"] == head
    assert missing.value.status == 404 and missing.value.code == "not_found"
    assert missing.value.body == {"error": {"code": "not_found", "message": missing.value.message}}
    assert isinstance(ended.value, errors.Conflict) and ended.value.status == 409
    assert ended.value.code == "session_ended" and "ended" in ended.value.message
    assert bad.value.status == 400 and isinstance(bad.value, errors.BadRequest)


def test_if_match_applies_at_the_expected_version_and_refuses_a_stale_one(service):
    async def main():
        async with AsyncClient(service.url) as client:
            created = await client.create_session("versions")
            version = created["version"]
            added = await client.add_item("versions", "messages", "v1", if_match=version)
            with pytest.raises(errors.VersionConflict) as stale:
                await client.add_item("versions", "messages", "v2", if_match=version)
            items = await client.get_items("versions")
            return version, added, stale.value, items

    version, added, stale, items = asyncio.run(main())
    assert added["version"] == version + 1
    assert stale.status == 409 and stale.code == "version_conflict"
    assert isinstance(stale, errors.Conflict) and stale.body["error"]["code"] == "version_conflict"
    assert [item["content"] for item in items["items"]] == ["v1"]


def test_the_sync_and_async_clients_cover_the_same_calls_with_the_same_answers(service):
    def sync_run() -> list:
        with Client(service.url) as c:
            s = "same/sync"
            out = [c.create_session(s, {"app": "t"})["created"]]
            item = c.add_item(s, "findings", "a finding about apples", tags=["x"])["item"]
            out.append(c.get_item(s, "findings", item["id"])["content"])
            out.append(c.update_item(s, "findings", item["id"], content="pears")["record"]["type"])
            out.append(len(c.search("pears", session=s)["hits"]))
            out.append(c.context(s)["record"]["type"])
            out.append(c.stats(s)["items"])
            out.append(c.remove_item(s, "findings", item["id"])["record"]["type"])
            out.append(c.observe("discovery", "t", f"note {s}", session=s)["tier"])
            out.append(s in [x["session"] for x in c.list_sessions(app="t")["sessions"]])
            out.append(c.end_session(s)["record"]["type"])
            out.append(c.delete_session(s)["record"]["type"])
            return out

    async def async_run() -> list:
        async with AsyncClient(service.url) as c:
            s = "same/async"
            out = [(await c.create_session(s, {"app": "t"}))["created"]]
            item = (await c.add_item(s, "findings", "a finding about apples", tags=["x"]))["item"]
            out.append((await c.get_item(s, "findings", item["id"]))["content"])
            updated = await c.update_item(s, "findings", item["id"], content="pears")
            out.append(updated["record"]["type"])
            out.append(len((await c.search("pears", session=s))["hits"]))
            out.append((await c.context(s))["record"]["type"])
            out.append((await c.stats(s))["items"])
            out.append((await c.remove_item(s, "findings", item["id"]))["record"]["type"])
            out.append((await c.observe("discovery", "t", f"note {s}", session=s))["tier"])
            listed = (await c.list_sessions(app="t"))["sessions"]
            out.append(s in [x["session"] for x in listed])
            out.append((await c.end_session(s))["record"]["type"])
            out.append((await c.delete_session(s))["record"]["type"])
            return out

    expected = [
        True, "a finding about apples", "item.updated", 1, "context.assembled", 1,
        "item.removed", "inserted", True, "session.ended", "session.deleted",
    ]  # fmt: skip
    assert sync_run() == expected
    assert asyncio.run(async_run()) == expected


def test_a_call_to_a_service_that_is_gone_fails_after_its_tries():
    port = free_port()  # nothing listens there
    client = Client(f"http://127.0.0.1:{port}", retry=Retry(tries=3, base=0.01))
    with client, pytest.raises(errors.ConnectionFailed) as failed:
        client.get_session("x")
    assert failed.value.tries == 3


class AnswerBusyFirst(httpx.HTTPTransport):
    """Answers the first request as the service does past its connection budget (503, plain
    text, Retry-After), then lets every request through."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        if len(self.sent) == 1:
            headers = {"Retry-After": "0.05", "Content-Type": "text/plain"}
            return httpx.Response(503, headers=headers, content=b"too many connections\n")
        return super().handle_request(request)


def test_a_503_is_retried_with_the_same_key_and_a_4xx_is_not(service):
    transport = AnswerBusyFirst()
    with Client(service.url, transport=transport) as client:
        created = client.create_session("busy")
        with pytest.raises(errors.NotFound):
            client.get_session("busy/none")
    assert created["created"] is True
    assert [r.method for r in transport.sent] == ["PUT", "PUT", "GET"]
    assert (
        transport.sent[0].headers["idempotency-key"] == transport.sent[1].headers["idempotency-key"]
    )


def test_a_503_that_does_not_go_away_is_raised_typed_with_its_retry_after():
    class AlwaysBusy(httpx.BaseTransport):
        def handle_request(self, request):
            body = b'{"error":{"code":"io_error","message":"EIO"}}'
            return httpx.Response(503, headers={"Retry-After": "0"}, content=body)

    client = Client(retry=Retry(tries=2, base=0.0), transport=AlwaysBusy())
    with client, pytest.raises(errors.WriteFailed) as failed:
        client.end_session("s")
    assert failed.value.code == "io_error" and failed.value.retry_after == 0.0
    assert isinstance(failed.value, errors.Unavailable)


def test_importing_the_client_loads_neither_the_service_nor_its_web_stack():
    script = (
        "import sys, streams.client\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'uvicorn', 'sse_starlette', 'sections', 'prometheus_client')"
        " or m in ('streams.web.app', 'streams.routes.api', 'streams.server.service')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True,
        cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert out.stdout.strip() == "[]"


# ---- the pure parts


def test_backoff_is_jittered_exponential_bounded_and_honours_retry_after():
    policy = Retry(tries=4, base=0.1, cap=0.5)
    assert [policy.delay(n, None, 0.999999) for n in range(5)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.5, 0.5], rel=1e-5
    )
    assert policy.delay(3, None, 0.0) == 0.0  # full jitter: anywhere from nothing to the bound
    assert policy.delay(0, 2.0, 0.5) == 2.0  # Retry-After is a floor
    assert policy.delay(0, 3600.0, 0.5) == policy.max_retry_after  # and is capped
    attempts = Attempts(policy, random.Random(1))
    delays = [attempts.after_failure() for _ in range(4)]
    assert all(d is not None for d in delays[:3]) and delays[3] is None  # 4 tries in all


def test_every_code_the_service_answers_has_its_own_class_under_its_status():
    from streams.web import errors as server_errors

    answered = {(status, code) for _, status, code in server_errors._STATUS}
    answered |= {(status, code) for status, code in server_errors._CAUSES.values()}
    answered |= {(421, "not_leader"), (503, "unavailable"), (503, "write_failed"), (429, "busy")}
    answered |= {(403, "forbidden_origin"), (415, "unsupported_media_type"), (421, "unknown_host")}
    for status, code in sorted(answered):
        body = orjson.dumps({"error": {"code": code, "message": "m"}})
        error = errors.error_for(status, {}, body)
        assert type(error) is errors.BY_CODE[code], code
        assert isinstance(error, errors.BY_STATUS[status]) and error.status == status, code
        assert (error.code, error.message, error.body) == (code, "m", orjson.loads(body))
    # A code this client does not know, or one under a status it never comes with, keeps the
    # class of its status; a body that is not JSON keeps its text.
    assert type(errors.error_for(409, {}, b'{"error":{"code":"new","message":"m"}}')) is (
        errors.Conflict
    )
    assert type(errors.error_for(404, {}, b'{"error":{"code":"busy","message":"m"}}')) is (
        errors.NotFound
    )
    plain = errors.error_for(503, {"retry-after": "2"}, b"too many connections; retry later\n")
    assert type(plain) is errors.Unavailable and plain.retry_after == 2.0
    assert plain.message == "too many connections; retry later" and plain.body is None


def test_sse_is_split_on_line_endings_only_and_keeps_the_exact_bytes():
    line = '{"x":"a\u2028b\u0085c"}'.encode()
    stream = b": ping\n\nid: 7\r\ndata: " + line + b"\r\n\r\nid: 8\ndata: x\n"
    decoder = SseDecoder()
    events = [e for i in range(0, len(stream), 5) for e in decoder.feed(stream[i : i + 5])]
    assert [(e.id, e.data) for e in events] == [(b"7", line)]
    assert [(e.id, e.data) for e in decoder.feed(b"\n")] == [(b"8", b"x")]


def _chain(n: int, origin: str = "test.example/log") -> list[bytes]:
    lines, prev = [], genesis(origin)
    for seq in range(n):
        payload = {"n": seq}
        session = "a" if seq % 2 else "b"
        _, line, prev = new_record(
            prev, seq, 1000 + seq, "t", session, "s", "item.added", bytes(16), payload,
            canonical(payload),
        )  # fmt: skip
        lines.append(line.rstrip(b"\n"))
    return lines


def test_the_chain_check_accepts_a_log_and_names_each_kind_of_break():
    lines = _chain(6)
    check = ChainCheck(contiguous=True, origin="test.example/log")
    assert [check.check(line).obj["seq"] for line in lines] == list(range(6))

    def fails(lines_, **kw) -> str:
        check = ChainCheck(**{"contiguous": True, **kw})
        with pytest.raises(ChainBroken) as broken:
            for line in lines_:
                check.check(line)
        return broken.value.check

    tampered = lines[2].replace(b'"n":2', b'"n":9')
    assert fails([lines[0], lines[1], tampered]) == "record.pd"  # its own bytes
    other = _chain(6, origin="another/log")
    assert fails([lines[0], lines[1], other[2]]) == "stream.prev"  # a record of another log
    assert fails([lines[0], lines[2]]) == "stream.gap"
    assert fails([lines[1], lines[0]], contiguous=False) == "stream.order"
    assert fails([lines[0]], origin="not/this/one") == "stream.genesis"
    assert fails([lines[3]], after=2, after_h="00" * 32) == "stream.prev"
    # A filtered stream skips seqs; the links it can see are still checked.
    filtered = ChainCheck(contiguous=False)
    assert [filtered.check(line).obj["seq"] for line in lines[1::2]] == [1, 3, 5]


def test_a_subscription_drops_what_it_already_handed_on_and_resumes_after_its_cursor():
    lines = _chain(5)
    state = SubscriptionState(contiguous=True)
    assert [state.accept_line(line).seq for line in lines[:3]] == [0, 1, 2]
    assert state.accept_line(lines[1]) is None and state.duplicates == 1
    assert state.sse_request()[2]["Last-Event-ID"] == "2"
    assert orjson.loads(state.ws_first_frame()) == {"after": 2, "filter": {}}
    assert state.accept_ws('{"control":"caught_up","seq":2}') is None
    assert state.accept_ws(lines[3].decode()).seq == 3
