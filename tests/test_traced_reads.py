"""Every read leaves a trace (issue 13, item 14): no setting silences `items.read`, and every
path that returns item content or quotes it appends its read record before it answers, time
travel, summaries and the live channels included (channels once per subscription). The walk over
/openapi.json keeps it so: every operation is classified, and each one that reads is called over
real HTTP and checked against the log's files."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import stream_clients
from server import Server

from eventstore.reader import LogReader
from sections.errors import ConfigError
from sections.model.commands import Command, Decision, base_payload
from sections.model.config import MemoryConfig, SectionConfig, load_config
from sections.runtime.memory import Memory

S = "walk"


def _records(data: Path, after: int) -> list:
    return list(LogReader(data / "log").records(after=after))


def _reads(data: Path, after: int) -> list:
    return [r for r in _records(data, after) if r.type == "items.read"]


def _head(client: httpx.Client) -> int:
    return client.get("/v1/log/status").json()["head"]


# ---- audit_reads cannot make a read untraced ------------------------------------------------


def test_audit_reads_false_is_refused_wherever_config_comes_in(tmp_path):
    with pytest.raises(ConfigError, match="audit_reads cannot be false"):
        MemoryConfig().with_overrides({"findings": {"audit_reads": False}})
    with pytest.raises(ConfigError, match="audit_reads cannot be false"):
        MemoryConfig().with_overrides({"scratch": {"budget_tokens": 10, "audit_reads": False}})
    with pytest.raises(ConfigError, match="audit_reads cannot be false"):
        SectionConfig("scratch", audit_reads=False)
    toml = tmp_path / "memory.toml"
    toml.write_text("[sections.findings]\naudit_reads = false\n")
    with pytest.raises(ConfigError, match="audit_reads cannot be false"):
        load_config(toml)
    with Memory.open(tmp_path / "data") as memory:
        session = memory.session("s")
        head = memory.writer.size
        with pytest.raises(ConfigError, match="audit_reads cannot be false"):
            session.configure("findings", audit_reads=False)
        assert memory.writer.size == head


def test_an_old_log_that_silenced_reads_replays_and_its_reads_are_traced(tmp_path):
    """A `section.configured` record written before this rule holds audit_reads=false: the log
    still opens and replays, and a get on that section leaves its record all the same."""
    with Memory.open(tmp_path / "data") as memory:
        session = memory.session("s")
        session.add("findings", "the margin is 12%")

        def old_record(state):
            target = state.sessions[(memory.tenant, "s")]
            payload = base_payload(target, None)
            payload["config"] = {
                **target.sections["findings"].config.to_json(),
                "audit_reads": False,
            }
            return Decision(
                (Command(memory.tenant, "s", "findings", "section.configured", payload),)
            )

        memory.append(old_record)
        before = memory.writer.size - 1
        assert [v.content for v in session.get("findings")] == ["the margin is 12%"]
    reads = _reads(tmp_path / "data", before)
    assert [(r.payload["purpose"], r.payload["items"]) for r in reads] == [
        ("get", {"findings": [reads[0].payload["items"]["findings"][0]]})
    ]
    with Memory.open(tmp_path / "data") as memory:
        assert memory.state_hash() == memory.rebuild().state_hash()
        before = memory.writer.size - 1
        memory.session("s", create=False).get("findings")
    assert len(_reads(tmp_path / "data", before)) == 1


def test_audit_reads_false_over_http_is_a_400_and_appends_nothing(tmp_path):
    with Server(tmp_path / "data") as server, httpx.Client(base_url=server.url) as client:
        body = {"sections": {"findings": {"audit_reads": False}}}
        answer = client.put("/v1/sessions/s", json=body)
        assert answer.status_code == 400, answer.text
        assert "audit_reads cannot be false" in answer.json()["error"]["message"]
        assert client.put("/v1/sessions/s").status_code == 201
        head = _head(client)
        answer = client.put("/v1/sessions/s/sections/findings", json={"audit_reads": False})
        assert answer.status_code == 400, answer.text
        assert _head(client) == head


# ---- time travel and summaries ------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    data = tmp_path_factory.mktemp("walk") / "data"
    with Server(data) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.put(f"/v1/sessions/{S}").status_code == 201
        items = f"/v1/sessions/{S}/sections"
        finding = client.post(f"{items}/findings/items", json={"content": "margin 12%"}).json()
        client.post(
            f"{items}/messages/items", json={"content": "what is the margin?", "role": "user"}
        )
        assert client.put("/v1/sessions/gone").status_code == 201
        client.post("/v1/sessions/gone/sections/findings/items", json={"content": "secret"})
        before_delete = _head(client)
        assert client.delete("/v1/sessions/gone").status_code == 200
        assert client.put("/v1/sessions/ended").status_code == 201
        client.post(
            "/v1/sessions/ended/sections/messages/items", json={"content": "hello", "role": "user"}
        )
        assert client.post("/v1/sessions/ended/end").status_code == 200
        fact = {"subject": "target", "predicate": "margin", "object": "12%"}
        fact["sources"] = [finding["item"]["id"]]
        assert client.post(f"/v1/sessions/{S}/facts", json=fact).status_code == 201
        yield data, server, client, finding["item"]["id"], before_delete


def test_time_travel_appends_its_read_before_answering(live):
    data, _, client, finding, before_delete = live
    at = _head(client)
    answer = client.get(f"/v1/sessions/{S}/state", params={"at": at})
    assert answer.status_code == 200
    reads = _reads(data, at)
    assert len(reads) == 1
    payload = reads[0].payload
    assert reads[0].session == S
    assert (payload["reader"], payload["purpose"], payload["at"]) == ("operator", "state", at)
    assert payload["items"]["findings"] == [finding]


def test_time_travel_to_a_deleted_session_is_traced_on_the_tenant(live):
    data, _, client, _, before_delete = live
    head = _head(client)
    answer = client.get("/v1/state", params={"at": before_delete})
    assert answer.status_code == 200
    assert "gone" in [s["session"] for s in answer.json()["sessions"]]
    reads = _reads(data, head)
    gone = [r for r in reads if "sessions" in r.payload]
    assert len(gone) == 1 and gone[0].session == "_tenant"
    assert list(gone[0].payload["sessions"]) == ["gone"]
    assert gone[0].payload["at"] == before_delete
    assert {r.session for r in reads} == {S, "_tenant"}


def test_summaries_append_the_reads_of_the_messages_they_quote(live):
    data, _, client, _, _ = live
    for path in ("/v1/sessions/ended/summary", "/v1/summaries"):
        head = _head(client)
        answer = client.get(path)
        assert answer.status_code == 200
        quoted = answer.json() if "summary" in path else answer.json()["summaries"][0]
        reads = _reads(data, head)
        assert len(reads) == 1, path
        assert reads[0].session == "ended" and reads[0].payload["purpose"] == "summary"
        assert reads[0].payload["items"] == {"messages": [quoted["first_user"]["id"]]}


# ---- live channels: once per subscription ----------------------------------------------------


def _traces(data: Path, after: int, channel: str) -> list:
    return [
        r
        for r in _reads(data, after)
        if r.payload["purpose"].startswith("stream.") and r.payload["stream"]["channel"] == channel
    ]


def _wait_for(fn, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = fn()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("not found in time")


@pytest.mark.parametrize("channel", ["sse", "ws", "jsonl"])
def test_a_stream_is_traced_when_it_opens_and_when_it_closes(live, channel):
    """The opening is appended before anything is sent (a stream that follows the tenant's own
    session receives it before any content); the closing names the last seq delivered; nothing
    is appended per delivered record."""
    data, server, client, _, _ = live
    head = _head(client)

    async def watch() -> list[bytes]:
        got, posted = [], False
        watched = {"session": [S, "_tenant"]}
        async for record in stream_clients.records(channel, server.url, head, watched):
            got.append(record)
            if b'"stream.opened"' in record and not posted:
                posted = True
                for n in range(3):
                    await asyncio.to_thread(
                        client.post,
                        f"/v1/sessions/{S}/sections/findings/items",
                        json={"content": n},
                    )
            if sum(b'"item.added"' in r for r in got) == 3:
                return got
        return got

    got = asyncio.run(asyncio.wait_for(watch(), 20))
    mine = lambda: [r for r in _traces(data, head, channel) if r.payload["stream"]["after"] == head]  # noqa: E731
    opened = mine()[0]
    seqs = [stream_clients.seq_of(r) for r in got]
    added = [stream_clients.seq_of(r) for r in got if b'"item.added"' in r]
    assert len(added) == 3 and opened.seq in seqs and seqs.index(opened.seq) < seqs.index(added[0])
    assert opened.payload["purpose"] == "stream.opened" and opened.session == "_tenant"
    assert opened.payload["stream"]["filter"] == {"session": sorted([S, "_tenant"])}
    closed = _wait_for(lambda: mine()[1:])[0]
    assert closed.payload["purpose"] == "stream.closed"
    assert closed.payload["stream"]["last"] == seqs[-1]
    assert len(mine()) == 2  # per subscription, never per record


def test_a_long_poll_is_traced_only_when_it_returns_content(live):
    data, server, client, _, _ = live
    head = _head(client)
    records, _, _ = asyncio.run(stream_clients.poll(server.url, head - 2, wait=0))
    traces = _traces(data, head, "longpoll")
    assert len(traces) == 1 and traces[0].payload["purpose"] == "stream.polled"
    assert traces[0].payload["stream"]["last"] == stream_clients.seq_of(records[-1])
    head = _head(client)  # now only that trace follows: polling it appends nothing (no echo)
    records, _, _ = asyncio.run(stream_clients.poll(server.url, head - 1, wait=0))
    assert all(b'"items.read"' in r for r in records)
    assert _head(client) == head


# ---- the walk over every operation -------------------------------------------------------------

READS = {  # operation -> (how to call it, the purpose of the read record it must append)
    ("/v1/sessions/{session}/items", "get"): ({}, "get"),
    ("/v1/sessions/{session}/events", "get"): ({}, "events"),
    ("/v1/sessions/{session}/sections/{section}/items", "get"): ({}, "get"),
    ("/v1/sessions/{session}/sections/{section}/items/{item}", "get"): ({}, "get"),
    ("/v1/search", "get"): ({"q": "margin"}, "search"),
    ("/v1/sessions/{session}/search", "get"): ({"q": "margin"}, "search"),
    ("/v1/summaries", "get"): ({}, "summary"),
    ("/v1/sessions/{session}/summary", "get"): ({}, "summary"),
    ("/v1/state", "get"): ({"at": "HEAD"}, "state"),
    ("/v1/sessions/{session}/state", "get"): ({"at": "HEAD"}, "state"),
    ("/v1/sessions/{session}/context", "post"): ({}, "context"),
    ("/v1/facts", "get"): ({}, "facts"),
    ("/v1/sessions/{session}/facts", "get"): ({}, "facts"),
    ("/v1/stream/sse", "get"): ({}, "stream"),
    ("/v1/stream/ws", "websocket"): ({}, "stream"),  # undescribed: docs/wire.md
    ("/v1/stream/jsonl", "get"): ({}, "stream"),
    ("/v1/events", "get"): ({}, "stream"),
    ("/memory/events", "get"): ({"session_id": S}, "events"),  # KAOS (streams/seeds/kaos_api.py)
}
NO_CONTENT = {  # they answer without any item's content, and append nothing
    ("/v1/sessions", "get"), ("/v1/sessions/{session}", "get"),
    ("/v1/sessions/{session}/stats", "get"), ("/v1/stats", "get"),
    ("/v1/log/checkpoint", "get"), ("/v1/log/status", "get"),
    ("/healthz", "get"), ("/readyz", "get"), ("/metrics", "get"),
    ("/memory/sessions", "get"),  # KAOS's: session ids only
    ("/openapi.json", "get"),  # the API's description
}  # fmt: skip


def _operations(client: httpx.Client) -> set[tuple[str, str]]:
    """The document's operations, and the WebSocket, which it cannot describe."""
    paths = client.get("/openapi.json").json()["paths"]
    described = {(path, method) for path, ops in paths.items() for method in ops}
    return described | {("/v1/stream/ws", "websocket")}


def _is_write(client: httpx.Client, path: str, method: str) -> bool:
    op = client.get("/openapi.json").json()["paths"][path][method]
    # An operation that writes lists the write's 507 (streams/apidoc/document.py).
    return "507" in op["responses"]


# AgentOps' contract (docs/agentops.md): its reads need a project's data, so
# tests/test_agentops_contract.py calls each and checks its trace
# (test_every_call_that_changes_or_shows_memory_is_a_record); /stats and /health show no content.
AGENTOPS = {
    ("/sessions/recent", "get"), ("/observations/recent", "get"), ("/observations/{id}", "get"),
    ("/search", "get"), ("/context", "get"), ("/timeline", "get"), ("/export", "get"),
    ("/stats", "get"), ("/health", "get"),
}  # fmt: skip


# Proofs (docs/proofs.md): hashes and checkpoints, no item's content. tests/test_tiles.py fetches
# each, and the tiles (which the document cannot describe: a variable number of segments), and
# checks they append nothing.
PROOFS = {
    ("/v1/log/proof/inclusion", "get"), ("/v1/log/proof/consistency", "get"),
    ("/v1/log/partitions/{partition}/proof/inclusion", "get"),
    ("/v1/log/partitions/{partition}/proof/consistency", "get"),
    ("/v1/log/partitions/{partition}/checkpoint", "get"),
}  # fmt: skip


def test_every_operation_is_classified(live):
    _, _, client, _, _ = live
    for path, method in _operations(client) - set(READS) - NO_CONTENT - AGENTOPS - PROOFS:
        assert method != "get" and _is_write(client, path, method), (path, method)


def _call(data, server, client, path, method, params, finding) -> None:
    session = "ended" if "summary" in path else S
    url = path.format(session=session, section="findings", item=finding)
    params = {k: (_head(client) - 1 if v == "HEAD" else v) for k, v in params.items()}
    if path.startswith("/v1/stream") or path == "/v1/events":
        channel = {"/v1/events": "longpoll"}.get(path, path.rsplit("/", 1)[-1])
        # Some content: a long-poll traces only answers with content, and the cases just before
        # (KAOS's /memory/events) may have left only reads at the head.
        changes = [
            r.seq for r in _records(data, -1) if r.type != "items.read" and r.tenant != "_log"
        ]
        after = min(_head(client) - 3, changes[-1] - 1)

        async def one() -> None:
            async for _ in stream_clients.records(channel, server.url, after):
                return

        asyncio.run(asyncio.wait_for(one(), 20))
        if channel != "longpoll":  # its closing trace follows the disconnection: wait for it
            closed = _wait_for(
                lambda: [
                    r
                    for r in _traces(data, after, channel)
                    if r.payload["stream"]["after"] == after and "last" in r.payload["stream"]
                ]
            )
            # In the file is not yet durable: wait until the head the next case starts from
            # covers it, or that case would count this trace as its own.
            _wait_for(lambda: _head(client) >= closed[-1].seq)
        return
    if method == "post":
        answer = client.post(url, json={"budget": 1000})
    else:
        answer = client.get(url, params=params)
    assert answer.status_code == 200, (path, answer.text)


@pytest.mark.parametrize("operation", sorted(READS), ids=lambda op: f"{op[1]} {op[0]}")
def test_each_read_operation_appends_its_trace_before_answering(live, operation):
    data, server, client, finding, _ = live
    assert operation in _operations(client)
    path, method = operation
    params, purpose = READS[operation]
    head = _head(client)
    _call(data, server, client, path, method, params, finding)
    found = [r for r in _records(data, head) if r.type in ("items.read", "context.assembled")]
    if purpose == "context":
        assert [r.type for r in found] == ["context.assembled"]
    else:
        assert found, operation
        assert {r.payload["purpose"].split(".")[0] for r in found} == {purpose}, operation


@pytest.mark.parametrize("operation", sorted(NO_CONTENT), ids=lambda op: f"{op[1]} {op[0]}")
def test_each_operation_without_content_appends_nothing(live, operation):
    _, _, client, finding, _ = live
    assert operation in _operations(client)
    path = operation[0].format(session=S)
    head = _head(client)
    answer = client.get(path)
    assert answer.status_code == 200, answer.text
    assert b"margin 12%" not in answer.content
    assert _head(client) == head


def test_the_python_api_traces_summaries_too(tmp_path):
    with Memory.open(tmp_path / "data") as memory:
        session = memory.session("s")
        first = session.add("messages", "my question", role="user")
        session.end()
        for read in (session.summary, memory.summaries):
            before = memory.writer.size - 1
            read()
            reads = _reads(tmp_path / "data", before)
            assert [(r.payload["purpose"], r.payload["items"]) for r in reads] == [
                ("summary", {"messages": [first.id]})
            ]
