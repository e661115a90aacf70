"""OpenTelemetry tracing (docs/telemetry.md): spans for HTTP requests, appends and context
assembly that say what the log says, and none unless configured.

The span contents are checked on the real app under a real uvicorn in a thread of the test
process, so the test's tracer provider (the SDK's InMemorySpanExporter) is the one the service
traces into; the configuration by OTEL_* variables on a real `ledgermem serve` subprocess that
exports over OTLP/HTTP to a receiver the test runs on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from sections.errors import NotFound
from sections.runtime.memory import Memory
from sections.runtime.tracing import OBSERVATION_EVENT
from streams.server.service import Service
from streams.server.telemetry import Telemetry, configured
from tests.helpers.cli import ledgermem
from tests.helpers.inprocess import InProcessServer
from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.replicas import leading, make_replicas, wait_until
from tests.server import ROOT, Server

ITEMS = "/v1/sessions/{session}/sections/{section}/items"


class TracedServer(InProcessServer):
    """The real app (create_app) traced into an in-memory exporter, on uvicorn in a thread."""

    def __init__(self, data: Path) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        telemetry = Telemetry(provider)

        def traced(service: Service, app: object) -> object:
            service.tracing = telemetry.tracing  # as `ledgermem serve` does when configured
            return telemetry.instrument(app)

        super().__init__(data, wrap=traced)

    def spans(self, name: str, count: int = 1) -> list:
        """The finished spans called `name`, once there are `count` of them (a server span ends
        just after its response is sent, so it may finish after the client has the answer)."""
        deadline = time.monotonic() + 10
        while True:
            found = [s for s in self.exporter.get_finished_spans() if s.name == name]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.01)


@pytest.fixture
def traced(tmp_path):
    with TracedServer(tmp_path / "data") as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        srv.client = c
        yield srv


def test_an_http_request_yields_a_server_span_named_by_its_route_with_its_status(traced):
    assert traced.client.put("/v1/sessions/user%2F1").status_code == 201
    assert traced.client.get("/v1/sessions/nobody").status_code == 404
    assert traced.client.get("/no/such/route").status_code == 404
    put = traced.spans("PUT /v1/sessions/{session}")
    get = traced.spans("GET /v1/sessions/{session}")
    assert len(put) == len(get) == 1
    for span, status in ((put[0], 201), (get[0], 404)):
        assert span.kind.name == "SERVER"
        assert span.attributes["http.route"] == "/v1/sessions/{session}"
        assert _status(span) == status
    # The ids in the path never name a span; a path no route has is named by its method alone.
    names = [s.name for s in traced.exporter.get_finished_spans()]
    assert not any("user" in n or "nobody" in n or "/no/such" in n for n in names)
    assert len(traced.spans("GET", 1)) == 1
    # No per-message receive/send spans: one server span per request, the memory's below it.
    spans = traced.exporter.get_finished_spans()
    assert all(s.kind.name == "SERVER" or s.name.startswith("ledgermem.") for s in spans)
    assert len([s for s in spans if s.kind.name == "SERVER"]) == 3


def test_paths_excluded_by_the_standard_variable_are_not_traced(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_PYTHON_ASGI_EXCLUDED_URLS", "healthz,metrics")
    with TracedServer(tmp_path / "data") as srv, httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/metrics").status_code == 200
        assert c.get("/readyz").status_code == 200
        assert [s.name for s in srv.spans("GET /readyz")] == ["GET /readyz"]
        names = [s.name for s in srv.exporter.get_finished_spans()]
        assert "GET /healthz" not in names and "GET /metrics" not in names


def test_an_add_yields_an_append_span_whose_seqs_and_size_are_the_records_in_the_log(traced):
    c = traced.client
    c.put("/v1/sessions/s")
    traced.exporter.clear()
    answer = c.post(
        ITEMS.format(session="s", section="messages"),
        json={"items": [{"content": "one", "role": "user"}, {"content": "two", "role": "user"}]},
    )
    assert answer.status_code == 201
    seq = answer.json()["record"]["seq"]
    (server,) = traced.spans("POST " + ITEMS)  # the lean route's express lane is traced too
    assert _status(server) == 201
    (append,) = traced.spans("ledgermem.append")
    record = traced.service.reader.get(seq)
    assert append.attributes["ledgermem.seq.first"] == append.attributes["ledgermem.seq.last"]
    assert append.attributes["ledgermem.seq.first"] == seq
    assert append.attributes["ledgermem.batch.records"] == 1
    assert append.attributes["ledgermem.batch.items"] == len(record.payload["items"]) == 2
    assert list(append.attributes["ledgermem.record.types"]) == [record.type] == ["item.added"]
    # One trace: the request, the command inside it, the append inside that.
    (command,) = traced.spans("ledgermem.add_items")
    assert append.parent.span_id == command.context.span_id
    assert command.parent.span_id == server.context.span_id


def test_concurrent_adds_share_append_spans_that_cover_exactly_their_records(traced):
    """Adds on distinct sessions in one event-loop turn go to the writer as one group: every
    append span's seq range holds exactly its records, and the spans cover every add once."""
    sessions = [f"c{n}" for n in range(12)]
    for s in sessions:
        traced.client.put(f"/v1/sessions/{s}")
    traced.exporter.clear()

    async def add_all() -> list[int]:
        async with httpx.AsyncClient(base_url=traced.url, timeout=30) as client:
            answers = await asyncio.gather(
                *(
                    client.post(ITEMS.format(session=s, section="messages"), json={"content": s})
                    for s in sessions
                )
            )
        assert [a.status_code for a in answers] == [201] * len(sessions)
        return [a.json()["record"]["seq"] for a in answers]

    seqs = asyncio.run(add_all())
    spans = traced.spans("ledgermem.append")
    covered = []
    for span in spans:
        first, last = span.attributes["ledgermem.seq.first"], span.attributes["ledgermem.seq.last"]
        records = [traced.service.reader.get(seq) for seq in range(first, last + 1)]
        assert span.attributes["ledgermem.batch.records"] == len(records)
        assert span.attributes["ledgermem.batch.commands"] == len(records)  # one record per add
        assert span.attributes["ledgermem.batch.items"] == sum(
            len(r.payload["items"]) for r in records
        )
        covered.extend(range(first, last + 1))
    assert sorted(covered) == sorted(seqs)


def test_a_context_span_lists_each_injected_observation_as_the_record_does(traced):
    c = traced.client
    c.put("/v1/sessions/s")
    c.post(ITEMS.format(session="s", section="messages"), json={"content": "hi", "role": "user"})
    for title, content in (
        ("Database", "PostgreSQL for the ledger index, chosen in May"),
        ("Latency", "fsync dominates write latency on this disk"),
        ("Tone", "answer briefly"),
        ("Ledger", "the ledger database keeps every record"),
    ):
        assert c.post("/v1/observations", json={"type": "decision", "title": title,
                                                 "content": content}).status_code == 201  # fmt: skip
    traced.exporter.clear()
    query = "which database for the ledger?"
    answer = c.post("/v1/sessions/s/context", json={"query": query, "observations": 3})
    assert answer.status_code == 200
    seq = answer.json()["record"]["seq"]
    (span,) = traced.spans("ledgermem.assemble_context")
    record = traced.service.reader.get(seq)  # from the log's files
    injected = [e for e in record.payload["manifest"] if e.get("inject") == "observation"]
    # Two search hits first, then the backfill by recency, ranked 1..3.
    assert [e["method"] for e in injected] == ["bm25", "bm25", "recency"]
    assert [e["rank"] for e in injected] == [1, 2, 3]
    assert all(e["score"] > 0 for e in injected[:2]) and "score" not in injected[2]
    assert injected[0]["score"] >= injected[1]["score"]
    assert record.payload["inject"]["query"] == query
    # The span says the same, event for event.
    assert span.attributes["ledgermem.seq"] == seq
    assert span.attributes["ledgermem.context.query"] == query
    assert span.attributes["ledgermem.context.observations"] == 3
    events = [(e.name, dict(e.attributes)) for e in span.events]
    assert events == [
        (
            OBSERVATION_EVENT,
            {
                "ledgermem.item.id": e["id"],
                "ledgermem.session": e["session"],
                "ledgermem.tokens": e["tokens"],
                "ledgermem.rank": e["rank"],
                "ledgermem.method": e["method"],
                **({"ledgermem.score": e["score"]} if "score" in e else {}),
            },
        )
        for e in injected
    ]
    (server,) = traced.spans("POST /v1/sessions/{session}/context")
    assert span.context.trace_id == server.context.trace_id


def test_threads_adding_through_the_python_api_get_append_spans_that_cover_the_log(tmp_path):
    """The sync runner: threads share groups and their Pending; each group's span is ended once,
    by whichever thread sees it durable first, and none is left open."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mem = Memory.open(tmp_path / "d")
    try:
        mem.tracing = Telemetry(provider).tracing
        sessions = [mem.session(f"t{n}") for n in range(8)]
        exporter.clear()
        seqs: list[int] = []

        def add(session) -> None:
            for k in range(20):
                seqs.append(session.add("messages", f"{session.id} {k}", role="user").seq)

        threads = [threading.Thread(target=add, args=(s,)) for s in sessions]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        appends = [s for s in exporter.get_finished_spans() if s.name == "ledgermem.append"]
        covered = []
        for span in appends:
            first, last = (
                span.attributes["ledgermem.seq.first"],
                span.attributes["ledgermem.seq.last"],
            )
            records = [mem.reader.get(seq) for seq in range(first, last + 1)]
            assert span.attributes["ledgermem.batch.records"] == len(records)
            assert {r.type for r in records} == {"item.added"}
            covered.extend(range(first, last + 1))
        assert sorted(covered) == sorted(seqs)
        assert len(seqs) == 160 and mem._append_spans == {}  # every span ended
        commands = [s for s in exporter.get_finished_spans() if s.name == "ledgermem.add_items"]
        assert len(commands) == 160
        # A command that fails says so on its span, and appends nothing.
        with pytest.raises(NotFound) as failed:
            sessions[0].update("messages", "no-such-item", content="x")
        (span,) = [s for s in exporter.get_finished_spans() if s.name == "ledgermem.update_item"]
        assert span.status.status_code.name == "ERROR"
        assert span.events[0].attributes["exception.type"].endswith(type(failed.value).__name__)
    finally:
        mem.close()


def test_the_new_manifest_fields_keep_replay_exact(tmp_path):
    """The fields only add to the entries: `context_at` renders the same messages, and the
    state rebuilt from the log equals the live one."""
    mem = Memory.open(tmp_path / "d")
    try:
        s = mem.session("s")
        s.add("messages", "What database should we use?", role="user")
        mem.observe("decision", "Database", "PostgreSQL for the ledger index")
        mem.observe("preference", "Tone", "answer briefly")
        record, messages = s.assemble(4000, query="database", observations=2)
        assert mem.context_at(record.seq) == messages
        assert mem.rebuild().state_hash() == mem.state_hash()
    finally:
        mem.close()


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_RESOURCE_ATTRIBUTES": "a=b"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_tracing_is_on_only_when_the_otel_variables_ask_for_it(environ, on):
    assert configured(environ) is on
    telemetry = Telemetry.from_env(environ)
    assert (telemetry is not None) is on
    if telemetry is not None:
        telemetry.shutdown()


def test_an_exporter_that_cannot_be_had_refuses_the_start_in_one_line(tmp_path):
    for env, words in (
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "unknown exporter 'zipkin'"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "needs opentelemetry-exporter-otlp-proto-grpc",
        ),
    ):
        done = ledgermem("serve", "--data", tmp_path / "d", "--port", "0", env=env, text=True)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and words in done.stderr
        assert not (tmp_path / "d" / "log").exists()  # refused before the log was opened


def test_a_served_log_traces_only_when_configured(tmp_path):
    """`ledgermem serve` with an OTLP endpoint exports its spans there (resource
    service.name=ledgermem); with OTEL_TRACES_EXPORTER=none and the same endpoint, nothing."""
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        for name, extra, expect in (("on", {}, True), ("off", {"OTEL_TRACES_EXPORTER": "none"}, False)):  # fmt: skip
            receiver.requests.clear()
            with Server(tmp_path / name, env={**env, **extra}) as srv:
                assert httpx.put(f"{srv.url}/v1/sessions/s", timeout=30).status_code == 201
            spans = receiver.spans()  # the server has stopped: its last spans were flushed
            names = {s.name for _, s in spans}
            if expect:
                assert {"PUT /v1/sessions/{session}", "ledgermem.append"} <= names
                assert {service for service, _ in spans} == {"ledgermem"}
            else:
                assert spans == []


def test_a_store_mode_replica_traces_its_partitions_commands_and_appends(pg_url, tmp_path):  # noqa: F811
    """Store mode: the partition leader's memory gets the same hook, so an add through a replica
    yields its command and append spans, exported over OTLP like the server span."""
    _, (data,) = make_replicas(pg_url, tmp_path, 1)
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        with Server(data, "--store", pg_url, "--lease-seconds", "1.0", env=env) as srv:
            wait_until(lambda: leading(srv) == {0}, what="the replica to lead its partition")
            assert httpx.put(f"{srv.url}/v1/sessions/s", timeout=30).status_code == 201
            answer = httpx.post(
                f"{srv.url}/v1/sessions/s/sections/messages/items", json={"content": "hi"}
            )
            assert answer.status_code == 201
            seq = answer.json()["record"]["seq"]
        spans = {s.name: s for _, s in receiver.spans() if s.name != "ledgermem.append"} | {
            f"append@{_int_attribute(s, 'ledgermem.seq.first')}": s
            for _, s in receiver.spans()
            if s.name == "ledgermem.append"
        }
    assert {"PUT /v1/sessions/{session}", "ledgermem.add_items", f"append@{seq}"} <= set(spans)
    append, command = spans[f"append@{seq}"], spans["ledgermem.add_items"]
    assert append.parent_span_id == command.span_id
    assert _int_attribute(append, "ledgermem.batch.records") == 1


def test_a_forwarded_request_continues_the_callers_trace_on_the_leader(pg_url, tmp_path):  # noqa: F811
    """Two replicas, one partition: the one that does not lead forwards to the one that does,
    with its own server span's context, so the caller's trace holds both server spans, the
    leader's under the forwarder's, and the leader's command under that."""
    _, (a_dir, b_dir) = make_replicas(pg_url, tmp_path, 2)
    env = {"OTEL_BSP_SCHEDULE_DELAY": "50"}
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    with OtlpReceiver() as receiver:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
        with Server(a_dir, "--store", pg_url, "--lease-seconds", "1.0", env=env) as a:
            wait_until(lambda: leading(a) == {0}, what="the first replica to lead")
            with Server(b_dir, "--store", pg_url, "--lease-seconds", "1.0", env=env) as b:
                wait_until(lambda: leading(b) == set() and leading(a) == {0}, what="a to lead")
                answer = httpx.put(
                    f"{b.url}/v1/sessions/s",
                    headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
                    timeout=30,
                )
                assert answer.status_code == 201
        spans = [s for _, s in receiver.spans() if s.trace_id.hex() == trace_id]
    servers = [s for s in spans if s.name == "PUT /v1/sessions/{session}"]
    assert len(servers) == 2  # the forwarder's and the leader's
    outer, inner = sorted(
        servers, key=lambda s: s.parent_span_id != bytes.fromhex("00f067aa0ba902b7")
    )
    assert outer.parent_span_id == bytes.fromhex("00f067aa0ba902b7")  # the caller's span
    assert inner.parent_span_id == outer.span_id
    commands = [
        s for s in spans if s.name.startswith("ledgermem.") and s.name != "ledgermem.append"
    ]
    assert [c.parent_span_id for c in commands] == [inner.span_id]


def _int_attribute(span, key: str) -> int:
    return next(a.value.int_value for a in span.attributes if a.key == key)


BLOCK_OTEL = """
import importlib.abc, sys

class NoOpenTelemetry(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOpenTelemetry())
"""


def test_the_service_starts_and_serves_without_the_otel_extra(tmp_path):
    """As if the extra were not installed (every opentelemetry import fails): with tracing asked
    for, `ledgermem serve` says so and serves untraced; the service's modules import none of it."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(BLOCK_OTEL)
    env = {"PYTHONPATH": f"{shim}:{ROOT}", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    with Server(tmp_path / "data", env=env) as srv:
        assert httpx.put(f"{srv.url}/v1/sessions/s", timeout=30).status_code == 201
    assert any("install ledgermem[otel]" in line for line in srv.output)
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, streams.web.app, streams.server.cli_serve, sections.runtime.memory; "
         "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert loaded.stdout.strip() == "[]"


class OtlpReceiver:
    """A minimal OTLP/HTTP trace receiver on 127.0.0.1: keeps each request's protobuf body."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        received = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    received.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def spans(self) -> list[tuple[str, object]]:
        """(service.name, span) for every span received."""
        out = []
        for body in self.requests:
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                attributes = {
                    a.key: a.value.string_value for a in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    out.extend((attributes.get("service.name"), s) for s in scope_spans.spans)
        return out


def _status(span) -> int:
    """The response status, under the old or the stable HTTP semantic conventions' name."""
    attributes = span.attributes
    return attributes.get("http.response.status_code", attributes.get("http.status_code"))


def test_the_cost_bench_runs_and_prints_one_json_object():
    """bench/telemetry.py end to end on a few adds (no timing asserted: it only keeps the bench
    from rotting)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "telemetry.py"), "--adds", "128", "--rounds", "1"],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    result = json.loads(done.stdout)
    for case in ("add", "add_async", "http"):
        figures = result[case]
        assert {"off_cpu_us_per_add", "on_cpu_us_per_add", "sampled_cpu_us_per_add"} <= set(figures)
        assert figures["spans_per_add_on"] >= 1
