"""Fan-out of `ledgermem serve` to K subscribers over SSE and WebSocket, against a bare-asyncio floor.

Prints one JSON object on stdout (progress on stderr). Per transport (sse, ws) and K (100, 1000),
a fresh `ledgermem serve` (real fdatasync; bench/http_writes.py's launcher and server variants) is driven by a separate
client process (this file with `--client`) that opens K subscribers on raw asyncio protocols
(chunked SSE and RFC 6455 parsed by hand), each from the head (`after=<head>`, no filter: every
record), and publishes through the HTTP API: single-item `POST .../sections/messages/items`,
~300-byte contents, all to one session (its `messages` section is at budget after ~430 records,
so most publishes evict), so each publish is one record (~700 bytes on the wire). In order:

0. publishing alone: the publishers at full rate with nobody subscribed, for the warm-up time:
   the server's CPU per published record, which the full-rate figures then subtract
   (`fanout_cpu_us_per_delivery`): at K=100 publishing is a large share of the server's work;
1. idle memory: server RSS with K idle subscribers minus its RSS with none, per subscriber;
2. paced: 5 publishes/s; publish-to-receive latency is the receive time minus the record's `ts`
   (the writer's clock, in µs, stamped before the fsync), for every (subscriber, record);
3. full rate: `--publishers` keep-alive connections post back to back (closed loop); after a
   warm-up, deliveries/s = records received by all subscribers in the window / window, with the
   server's CPU (utime + stime from /proc/<pid>/stat; the event-loop thread apart) per delivery.

The floor: a bare asyncio server in its own process (this file with `--floor-server`; on uvloop
when it is installed, like the shipped server and the client) that accepts K raw sockets and writes each event, encoded once as an SSE event holding a record of
the same size, to every socket with `transport.write`; the same client, paced and full rate
(yielding to the loop after each event; the kernel's socket buffers let it run ahead of the
client, so its full-rate latency is backlog). Ratios to it and to the reference
figures of docs/benchmarks.md.

Usage: .venv/bin/python bench/fanout.py [--quick] [--k 100,1000] [--transports sse,ws,floor]
                                        [--variants shipped,asyncio] [--wait-idle S] [--out FILE]
Figures and how to read them: docs/benchmarks.md, section "fanout".
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import http_writes as H  # bench/http_writes.py: its launcher, client and measurements

ROOT = Path(__file__).resolve().parent.parent

TARGETS = {
    "sse_k1000_deliveries_per_s_min": 40_000,
    "ws_k1000_deliveries_per_s_min": 80_000,
    "paced_k1000_latency_p99_ms_max": 75.0,
}
# The reference figures of docs/benchmarks.md (measured 2026-11-21, same kind of 2-vCPU VM).
CEILINGS = {
    "source": "docs/benchmarks.md, reference figures (2026-11-21, median of 3)",
    "sse": {
        "100": {
            "max_deliveries_per_s": 34_800,
            "cpu_us_per_delivery": 28.7,
            "paced_ms": [4.0, 7.4],
        },
        "1000": {
            "max_deliveries_per_s": 25_461,
            "cpu_us_per_delivery": 39.2,
            "paced_ms": [28.4, 65.0],
        },
    },
    "ws": {
        "100": {
            "max_deliveries_per_s": 95_629,
            "cpu_us_per_delivery": 10.4,
            "paced_ms": [2.3, 4.1],
        },
        "1000": {
            "max_deliveries_per_s": 66_057,
            "cpu_us_per_delivery": 15.1,
            "paced_ms": [19.3, 51.3],
        },
    },
    "floor": {
        "100": {
            "max_deliveries_per_s": 363_298,
            "cpu_us_per_delivery": 2.3,
            "paced_ms": [1.07, 1.85],
        },
        "1000": {
            "max_deliveries_per_s": 321_085,
            "cpu_us_per_delivery": 3.1,
            "paced_ms": [7.3, 15.3],
        },
    },
}
PACED_RATE = 5.0
CLIENT_TIMEOUT = 900.0  # seconds: a scenario that hangs fails instead
PUBLISHERS = 8
SESSION = "bench-pub"
PATH = f"/v1/sessions/{SESSION}/sections/messages/items"


def log(message: str) -> None:
    print(f"[bench/fanout] {message}", file=sys.stderr, flush=True)


def now_us() -> int:
    return time.time_ns() // 1000


# ---- the client's subscribers ------------------------------------------------------------------


class Tally:
    """What every subscriber of one client process received."""

    def __init__(self) -> None:
        self.recording = False
        self.deliveries = 0  # while recording
        self.reads = 0  # reads that held at least one record, while recording
        self.latencies_us: list[int] = []
        self.gaps = 0  # a record whose seq is not the previous one + 1 (never expected)

    def records(self, subscriber, seqs_ts: list[tuple[int, int]], received: int) -> None:
        last = subscriber.last_seq
        for seq, _ in seqs_ts:
            if last >= 0 and seq != last + 1:
                self.gaps += 1
            last = seq
        subscriber.last_seq = last
        if self.recording:
            self.deliveries += len(seqs_ts)
            self.reads += 1
            self.latencies_us.extend([received - ts for _, ts in seqs_ts])


def seq_and_ts(record: bytes, at: int = 0) -> tuple[int, int]:
    """A record starts `{"v":1,"seq":N,"ts":T,`: read N and T without parsing the rest."""
    i = record.index(b'"seq":', at) + 6
    j = record.index(b",", i)
    k = record.index(b'"ts":', j) + 5
    return int(record[i:j]), int(record[k : record.index(b",", k)])


class SseSubscriber(asyncio.Protocol):
    """GET <path>; then every `\\n\\n`-terminated event with a record in it (chunk-size lines of
    the chunked transfer coding fall between events, and comments hold no record)."""

    def __init__(self, tally: Tally, request: bytes) -> None:
        self.tally, self.request = tally, request
        self.buffer = b""
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.headers_done = False
        self.last_seq = -1
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        received = now_us()
        buffer = self.buffer + data
        if not self.headers_done:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self.buffer = buffer
                return
            if buffer[9:12] != b"200":
                self.ready.set_exception(RuntimeError(f"subscribe: {buffer[:300]!r}"))
                return
            self.headers_done = True
            self.ready.set_result(None)
            buffer = buffer[end + 4 :]
        parts = buffer.split(b"\n\n")
        self.buffer = parts.pop()
        found = [seq_and_ts(part) for part in parts if b'"seq":' in part]
        if found:
            self.tally.records(self, found, received)

    def connection_lost(self, exc) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("the server closed the stream"))


def ws_client_frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (RFC 6455 section 5.3)."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + mask + bytes(b ^ mask[i & 3] for i, b in enumerate(payload))


class WsSubscriber(asyncio.Protocol):
    """The upgrade, one subscribe frame, then unmasked server frames: records, control messages
    (`{"control": ...}`), pings (answered), close."""

    def __init__(self, tally: Tally, after: int) -> None:
        self.tally, self.after = tally, after
        self.buffer = b""
        self.ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self.upgraded = False
        self.last_seq = -1
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        transport.write(
            (
                "GET /v1/stream/ws HTTP/1.1\r\nhost: 127.0.0.1\r\nupgrade: websocket\r\n"
                f"connection: Upgrade\r\nsec-websocket-key: {key}\r\n"
                "sec-websocket-version: 13\r\n\r\n"
            ).encode()
        )

    def data_received(self, data: bytes) -> None:
        received = now_us()
        buffer = self.buffer + data
        if not self.upgraded:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self.buffer = buffer
                return
            if buffer[9:12] != b"101":
                self.ready.set_exception(RuntimeError(f"upgrade: {buffer[:300]!r}"))
                return
            self.upgraded = True
            buffer = buffer[end + 4 :]
            first = b'{"after":%d,"filter":{}}' % self.after
            self.transport.write(ws_client_frame(0x1, first))  # type: ignore[union-attr]
        pos, size = 0, len(buffer)
        found = []
        while size - pos >= 2:
            opcode, n, h = buffer[pos] & 0x0F, buffer[pos + 1] & 0x7F, 2
            if n == 126:
                if size - pos < 4:
                    break
                n, h = (buffer[pos + 2] << 8) | buffer[pos + 3], 4
            elif n == 127:
                if size - pos < 10:
                    break
                n, h = int.from_bytes(buffer[pos + 2 : pos + 10], "big"), 10
            if size - pos < h + n:
                break
            payload = buffer[pos + h : pos + h + n]
            pos += h + n
            if opcode == 0x1:
                if payload.startswith(b'{"control"'):
                    if not self.ready.done():
                        self.ready.set_result(None)
                else:
                    found.append(seq_and_ts(payload))
            elif opcode == 0x9:
                self.transport.write(ws_client_frame(0xA, payload))  # type: ignore[union-attr]
            elif opcode == 0x8:
                self.transport.close()  # type: ignore[union-attr]
        self.buffer = buffer[pos:]
        if found:
            self.tally.records(self, found, received)

    def connection_lost(self, exc) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("the server closed the WebSocket"))


# ---- the client's publishers ------------------------------------------------------------------


class HttpPublisher:
    """Publishes one record per single-item POST to the service."""

    def __init__(self, port: int, contents: list[bytes]) -> None:
        self.port, self.contents, self.n = port, contents, 0
        self.idle: list = []
        self.last = -1  # the newest seq published

    async def _conn(self):
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:  # uvicorn closes a connection idle for 5 s
                return conn
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(H.HttpConnection, "127.0.0.1", self.port)
        return conn

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        data = H.request_bytes(method, path, body)
        conn = await self._conn()
        try:
            status, answer = await conn.request(data)
        except ConnectionError:  # closed by the server's keep-alive timeout as we sent
            conn = await self._conn()
            status, answer = await conn.request(data)
        self.idle.append(conn)
        return status, answer

    async def setup(self) -> None:
        status, body = await self.request("PUT", f"/v1/sessions/{SESSION}")
        if status not in (200, 201):
            raise RuntimeError(f"PUT session: {status} {body[:300]!r}")

    async def head(self) -> int:
        status, body = await self.request("GET", "/v1/log/status")
        return json.loads(body)["head"]

    async def publish(self) -> int:
        """One record; returns its seq."""
        self.n += 1
        content = self.contents[self.n % len(self.contents)]
        status, body = await self.request("POST", PATH, b'{"content":%s}' % content)
        if status != 201:
            raise RuntimeError(f"POST item: {status} {body[:300]!r}")
        seq = seq_and_ts(body)[0]
        self.last = max(self.last, seq)
        return seq

    async def run(self, stop: asyncio.Event, connections: int) -> None:
        async def loop() -> None:
            while not stop.is_set():
                await self.publish()

        await asyncio.gather(*(loop() for _ in range(connections)))

    def close(self) -> None:
        for conn in self.idle:
            conn.transport.close()


class FloorPublisher:
    """Tells the floor server to publish: `one` event, or `run` back to back until `stop`."""

    def __init__(self, port: int) -> None:
        self.port = port

    async def setup(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(b"CONTROL\r\n\r\n")
        self.seq = int((await self.reader.readline()).split()[1])  # "head N"

    async def head(self) -> int:
        return self.seq

    @property
    def last(self) -> int:
        return self.seq

    async def publish(self) -> int:
        self.writer.write(b"one\n")
        self.seq = int((await self.reader.readline()).split()[1])  # "ok N"
        return self.seq

    async def run(self, stop: asyncio.Event, connections: int) -> None:
        self.writer.write(b"run\n")
        await stop.wait()
        self.writer.write(b"stop\n")
        self.seq = int((await self.reader.readline()).split()[1])  # "stopped N"

    def close(self) -> None:
        self.writer.close()


# ---- the client process -----------------------------------------------------------------------


async def connect_subscribers(cfg: dict, tally: Tally, head: int) -> list:
    loop = asyncio.get_running_loop()
    port = cfg["port"]
    request = (
        f"GET /v1/stream/sse?after={head} HTTP/1.1\r\nhost: 127.0.0.1\r\n"
        "accept: text/event-stream\r\n\r\n"
    ).encode()

    def factory():
        if cfg["transport"] == "ws":
            return WsSubscriber(tally, head)
        return SseSubscriber(tally, request)

    subscribers = []
    for start in range(0, cfg["k"], 100):
        made = await asyncio.gather(
            *(
                loop.create_connection(factory, "127.0.0.1", port)
                for _ in range(min(100, cfg["k"] - start))
            )
        )
        subscribers += [protocol for _, protocol in made]
    await asyncio.wait_for(asyncio.gather(*(s.ready for s in subscribers)), 120)
    return subscribers


async def drain(subscribers: list, seq: int, limit: float = 120.0) -> None:
    """Wait until every subscriber has received the record `seq`."""
    deadline = time.perf_counter() + limit
    while any(s.last_seq < seq for s in subscribers):
        if time.perf_counter() > deadline:
            behind = sum(s.last_seq < seq for s in subscribers)
            raise RuntimeError(f"{behind} subscribers did not receive seq {seq} in {limit} s")
        await asyncio.sleep(0.01)


def latency_figures(latencies_us: list[int]) -> dict:
    values = sorted(latencies_us)
    figures = {
        q: round(H.percentile(values, p) / 1e3, 2)
        for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
    }
    figures["max"] = round(values[-1] / 1e3, 2) if values else None
    figures["n"] = len(values)
    return figures


class Meter:
    """CPU of the server and of this process, and of the whole machine, over a window."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.server, self.loop = H.proc_times(pid), H.proc_cpu(pid, pid)
        self.client, self.machine = time.process_time(), H.cpu_times()
        self.start = time.perf_counter()

    def figures(self, deliveries: int) -> dict:
        window = time.perf_counter() - self.start
        times = H.proc_times(self.pid)
        server = sum(times) - sum(self.server)
        loop = H.proc_cpu(self.pid, self.pid) - self.loop
        client = time.process_time() - self.client
        busy = H.busy_cores(self.machine, H.cpu_times(), window)
        return {
            "window_s": round(window, 3),
            "server_cpu_s": round(server, 4),
            "server_cpu_us_per_delivery": round(server / deliveries * 1e6, 2)
            if deliveries
            else None,
            "server_cores": round(server / window, 2),
            "server_loop_thread_cores": round(loop / window, 2),
            "server_kernel_share": H.system_share(self.server, times),
            "client_cores": round(client / window, 2),
            "machine_busy_cores": busy,
            "neighbour_cores_est": round(max(0.0, busy - (server + client) / window), 2),
        }


async def client_main(cfg: dict) -> dict:
    floor = cfg["transport"] == "floor"
    tally = Tally()
    pid, k = cfg["server_pid"], cfg["k"]
    contents = [json.dumps(c).encode() for c in H.make_contents(500)]
    publisher = FloorPublisher(cfg["port"]) if floor else HttpPublisher(cfg["port"], contents)
    await publisher.setup()
    for _ in range(3):  # warm the write path before the baseline
        await publisher.publish()
    result: dict = {"k": k, "transport": cfg["transport"]}

    # 0. what publishing costs the server with nobody subscribed (full rate, no fan-out)
    stop = asyncio.Event()
    first = publisher.last
    running = asyncio.ensure_future(publisher.run(stop, cfg["publishers"]))
    meter = Meter(pid)
    await asyncio.sleep(cfg["warmup"])
    alone = meter.figures(1)
    stop.set()
    await running
    published = publisher.last - first
    result["publish_alone"] = {
        "records_per_s": round(published / alone["window_s"], 1),
        "server_cpu_us_per_record": round(alone["server_cpu_s"] / published * 1e6, 1)
        if published
        else None,
        "server_cores": alone["server_cores"],
        "neighbour_cores_est": alone["neighbour_cores_est"],
    }
    head = await publisher.head()

    # 1. idle memory
    rss_none = H.proc_rss_mib(pid)
    t0 = time.perf_counter()
    subscribers = await connect_subscribers(cfg, tally, head)
    result["connect_s"] = round(time.perf_counter() - t0, 2)
    await asyncio.sleep(cfg["idle_seconds"])
    rss_idle = H.proc_rss_mib(pid)
    result["idle_memory"] = {
        "rss_mib_no_subscribers": rss_none,
        "rss_mib_idle_subscribers": rss_idle,
        "kib_per_subscriber": round((rss_idle - rss_none) * 1024 / k, 1),
    }

    # 2. paced
    events = max(1, round(cfg["paced_seconds"] * PACED_RATE))
    tally.recording = True
    profiled = cfg["profile"] == "paced"
    H.profile_window(cfg, True, profiled)
    meter = Meter(pid)
    pending = []
    start = time.perf_counter()
    for n in range(events):
        delay = start + n / PACED_RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        pending.append(asyncio.ensure_future(publisher.publish()))
    await asyncio.gather(*pending)
    await drain(subscribers, publisher.last)
    tally.recording = False
    paced = meter.figures(tally.deliveries)
    H.profile_window(cfg, False, profiled)
    paced.update(
        events=events,
        deliveries=tally.deliveries,
        expected_deliveries=events * k,
        latency_ms=latency_figures(tally.latencies_us),
    )
    result["paced"] = paced

    # 3. full rate
    tally.deliveries = tally.reads = 0
    tally.latencies_us = []
    stop = asyncio.Event()
    running = asyncio.ensure_future(publisher.run(stop, cfg["publishers"]))
    metrics0 = None if floor else await served_metrics(cfg["port"])
    await asyncio.sleep(cfg["warmup"])
    tally.recording = True
    H.profile_window(cfg, True, cfg["profile"] == "full")
    meter = Meter(pid)
    first = publisher.last
    await asyncio.sleep(cfg["seconds"])
    tally.recording = False
    full = meter.figures(tally.deliveries)
    published = publisher.last - first
    H.profile_window(cfg, False, cfg["profile"] == "full")
    stop.set()
    await running
    deliveries = tally.deliveries
    publishing = published * (result["publish_alone"]["server_cpu_us_per_record"] or 0) / 1e6
    full.update(
        published=published,
        # the server's CPU per delivery less what the window's publishes cost it on their own
        fanout_cpu_us_per_delivery=round((full["server_cpu_s"] - publishing) / deliveries * 1e6, 2)
        if deliveries
        else None,
        deliveries_per_s=round(deliveries / full["window_s"], 1),
        events_per_s=round(deliveries / k / full["window_s"], 1),
        deliveries=deliveries,
        records_per_read=round(deliveries / tally.reads, 2) if tally.reads else None,
        latency_ms=latency_figures(tally.latencies_us),
    )
    await drain(subscribers, publisher.last)
    if metrics0 is not None:
        metrics1 = await served_metrics(cfg["port"])
        full["served_since_warmup"] = {
            key: int(metrics1.get(key, 0) - metrics0.get(key, 0)) for key in metrics1
        }
    result["full_rate"] = full
    result["gaps"] = tally.gaps
    result["record_bytes"] = cfg.get("record_bytes")
    for s in subscribers:
        s.transport.close()
    publisher.close()
    return result


async def served_metrics(port: int) -> dict[str, float]:
    """ledgermem_records_served_total by source (log or live), from /metrics."""
    text = await H.get_text(port, "/metrics")
    served: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("ledgermem_records_served_total{"):
            labels, _, value = line.partition("} ")
            source = labels.split('source="', 1)[1].split('"', 1)[0]
            served[source] = served.get(source, 0.0) + float(value)
    return served


def run_client(cfg: dict) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--client", json.dumps(cfg)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"the client failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


# ---- the floor: a bare asyncio broadcast server ---------------------------------------------------


async def floor_server(record: bytes) -> None:
    """Prints `port N`; serves `GET` subscribers and one `CONTROL` connection until stdin closes."""
    prefix = record[: record.index(b'"seq":')]
    tail = record[record.index(b",", record.index(b'"ts":')) :]
    transports: list[asyncio.Transport] = []
    state = {"seq": 0, "running": False}

    def publish() -> None:
        seq = state["seq"] = state["seq"] + 1
        line = b'%s"seq":%d,"ts":%d%s' % (prefix, seq, time.time_ns() // 1000, tail)
        frame = b"id: %d\ndata: %s\n\n" % (seq, line)
        for transport in transports:
            transport.write(frame)

    async def run_max(control: asyncio.Transport) -> None:
        while state["running"]:
            publish()
            await asyncio.sleep(0)
            if transports and transports[-1].get_write_buffer_size() > 1 << 18:
                await asyncio.sleep(0.001)  # the client is behind: let it read
        control.write(b"stopped %d\n" % state["seq"])

    class Connection(asyncio.Protocol):
        def __init__(self) -> None:
            self.buffer = b""
            self.kind = ""

        def connection_made(self, transport) -> None:  # type: ignore[override]
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            if self.kind == "subscriber":
                return
            if self.kind == "control":
                for command in data.split():
                    if command == b"one":
                        publish()
                        self.transport.write(b"ok %d\n" % state["seq"])
                    elif command == b"run":
                        state["running"] = True
                        asyncio.ensure_future(run_max(self.transport))
                    elif command == b"stop":
                        state["running"] = False
                return
            self.buffer += data
            if b"\r\n\r\n" not in self.buffer:
                return
            if self.buffer.startswith(b"CONTROL"):
                self.kind = "control"
                self.transport.write(b"head %d\n" % state["seq"])
            else:
                self.kind = "subscriber"
                self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
                transports.append(self.transport)

        def connection_lost(self, exc) -> None:
            if self.kind == "subscriber":
                transports.remove(self.transport)

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Connection, "127.0.0.1", 0, backlog=4096)
    print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
    await loop.run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    server.close()


class FloorProcess:
    def __init__(self, record: bytes) -> None:
        command = [sys.executable, str(Path(__file__).resolve()), "--floor-server", record.hex()]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line.startswith("port "):
            self.stop()
            raise RuntimeError(f"the floor server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.pid = self.proc.pid

    def stop(self) -> int:
        self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)


# ---- the run -----------------------------------------------------------------------------------


def sample_record(data_dir: Path) -> bytes | None:
    """One item.added line the server wrote (the floor sends records of the same size)."""
    from eventstore.reader import LogReader

    for _, line in LogReader(data_dir / "log").lines():
        if b'"type":"item.added"' in line:
            return line
    return None


def client_config(args: argparse.Namespace, transport: str, k: int, port: int, pid: int) -> dict:
    return {
        "transport": transport,
        "k": k,
        "port": port,
        "server_pid": pid,
        "idle_seconds": args.idle_seconds,
        "paced_seconds": args.paced_seconds,
        "warmup": args.warmup,
        "seconds": args.seconds,
        "publishers": args.publishers,
        # LEDGERMEM_BENCH_PROFILE profiles the full-rate window, or with
        # LEDGERMEM_BENCH_PROFILE_PHASE=paced the paced one
        "profile": os.environ.get("LEDGERMEM_BENCH_PROFILE_PHASE", "full")
        if transport != "floor" and "LEDGERMEM_BENCH_PROFILE" in os.environ
        else None,
    }


def server_scenario(root: Path, variant: str, transport: str, k: int, args) -> tuple[dict, bytes]:
    name = f"{variant.split(':')[0]}-{transport}-{k}"
    data_dir = root / name
    env = {"LEDGERMEM_MAX_SUBSCRIBERS_PER_CLIENT": str(k + 64)}
    quiet = H.wait_for_quiet(args.wait_idle) if args.wait_idle else None
    server = H.ServerProcess(data_dir, variant, env, name=name, root=args.server_root)
    try:
        log(f"{name}: server pid {server.pid} on port {server.port}")
        figures = run_client(client_config(args, transport, k, server.port, server.pid))
    finally:
        figures_code = server.stop()
    figures["server_exit_code"] = figures_code
    figures["quiet_wait"] = quiet
    record = sample_record(data_dir) or b""
    figures["record_bytes"] = len(record)
    shutil.rmtree(data_dir, ignore_errors=True)
    report(name, figures)
    return figures, record


def floor_scenario(record: bytes, k: int, args) -> dict:
    quiet = H.wait_for_quiet(args.wait_idle) if args.wait_idle else None
    floor = FloorProcess(record)
    try:
        log(f"floor-{k}: server pid {floor.pid} on port {floor.port}")
        figures = run_client(client_config(args, "floor", k, floor.port, floor.pid))
    finally:
        floor.stop()
    figures["record_bytes"] = len(record)
    figures["quiet_wait"] = quiet
    report(f"floor-{k}", figures)
    return figures


def report(name: str, figures: dict) -> None:
    full, paced = figures["full_rate"], figures["paced"]
    log(
        f"  {full['deliveries_per_s']:.0f} deliveries/s ({full['server_cpu_us_per_delivery']} us "
        f"server CPU each, {full['fanout_cpu_us_per_delivery']} without publishing; server "
        f"{full['server_cores']} / client {full['client_cores']} cores); "
        f"paced p50 {paced['latency_ms']['p50']} ms p99 {paced['latency_ms']['p99']} ms; "
        f"idle {figures['idle_memory']['kib_per_subscriber']} KiB/subscriber"
    )


def ratios(figures: dict, floor: dict | None, ceiling: dict) -> dict:
    full, paced = figures["full_rate"], figures["paced"]
    out = {
        "deliveries_to_limits_md": round(
            full["deliveries_per_s"] / ceiling["max_deliveries_per_s"], 3
        ),
        "cpu_per_delivery_to_limits_md": round(
            full["server_cpu_us_per_delivery"] / ceiling["cpu_us_per_delivery"], 3
        )
        if full["server_cpu_us_per_delivery"]
        else None,
    }
    if floor is not None and floor["full_rate"]["deliveries_per_s"]:
        out["deliveries_to_floor"] = round(
            full["deliveries_per_s"] / floor["full_rate"]["deliveries_per_s"], 3
        )
        floor_cpu = floor["full_rate"]["server_cpu_us_per_delivery"]
        if floor_cpu and full["server_cpu_us_per_delivery"]:
            out["cpu_per_delivery_to_floor"] = round(
                full["server_cpu_us_per_delivery"] / floor_cpu, 2
            )
        floor_p99 = floor["paced"]["latency_ms"]["p99"]
        if floor_p99:
            out["paced_p99_to_floor"] = round(paced["latency_ms"]["p99"] / floor_p99, 2)
    return out


def run(root: Path, args: argparse.Namespace) -> dict:
    code = H.code_version()  # before the scenarios: others may commit while they run
    noise_start = H.machine_noise(args.quick)
    log(f"machine: loadavg {noise_start['loadavg']}, busy cores {noise_start['busy_cores']}")
    ks = [int(k) for k in args.k.split(",")]
    transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    results: dict = {}
    record = None
    for variant in variants:
        if variant not in H.VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}: use {', '.join(H.VARIANTS)}")
        for transport in (t for t in transports if t != "floor"):
            for k in ks:
                figures, sample = server_scenario(root, variant, transport, k, args)
                results.setdefault(variant, {}).setdefault(transport, {})[str(k)] = figures
                record = record or sample
    floor: dict = {}
    if "floor" in transports:
        if record is None:  # no server ran: a record of the usual size
            record = b'{"v":1,"seq":0,"ts":0,' + b'"x":"%s"}' % (b"y" * 650)
        for k in ks:
            floor[str(k)] = floor_scenario(record, k, args)
    for variant in results.values():
        for transport, by_k in variant.items():
            for k, figures in by_k.items():
                ceiling = CEILINGS[transport].get(k, CEILINGS[transport]["1000"])
                figures["ratios"] = ratios(figures, floor.get(k), ceiling)
    for k, figures in floor.items():
        figures["ratios"] = ratios(
            figures, None, CEILINGS["floor"].get(k, CEILINGS["floor"]["1000"])
        )
    noise_end = H.machine_noise(args.quick)

    def passes(variant: dict) -> dict:
        checks = {}
        for transport in ("sse", "ws"):
            figures = variant.get(transport, {}).get("1000")
            if figures is None:
                continue
            checks[f"{transport}_k1000_deliveries"] = (
                figures["full_rate"]["deliveries_per_s"]
                >= TARGETS[f"{transport}_k1000_deliveries_per_s_min"]
            )
            checks[f"{transport}_k1000_paced_p99"] = (
                figures["paced"]["latency_ms"]["p99"] <= TARGETS["paced_k1000_latency_p99_ms_max"]
            )
        return checks

    return {
        "bench": "fanout",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", "bench/fanout.py", *sys.argv[1:]]),
        "code": code,
        "config": {
            "k": ks,
            "transports": transports,
            "variants": variants,
            "server_root": str(args.server_root),
            "durability": "fsync",
            "filter": "none (every record)",
            "publish": "single-item POST .../sections/messages/items, ~300-byte content",
            "publishers_full_rate": args.publishers,
            "paced_events_per_s": PACED_RATE,
            "paced_seconds": args.paced_seconds,
            "warmup_s": args.warmup,
            "seconds": args.seconds,
            "idle_seconds": args.idle_seconds,
            "client": "one separate process, raw asyncio protocols",
            "client_and_floor_loop": "uvloop" if H.loop_factory() else "asyncio",
        },
        "machine": {"cpus": os.cpu_count(), "noise_start": noise_start, "noise_end": noise_end},
        "targets": TARGETS,
        "ceilings": CEILINGS,
        "results": results,
        "floor": floor,
        "pass": {variant: passes(figures) for variant, figures in results.items()},
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p and str(Path(p).resolve()) != here]
    sys.path.insert(0, str(ROOT))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--k", help="subscriber counts, comma-separated (100,1000)")
    parser.add_argument("--transports", default="sse,ws,floor")
    parser.add_argument("--variants", default="shipped", help="comma-separated: shipped, asyncio")
    parser.add_argument("--publishers", type=int, default=PUBLISHERS)
    parser.add_argument("--paced-seconds", type=float)
    parser.add_argument("--seconds", type=float, help="full-rate window (8)")
    parser.add_argument("--warmup", type=float, help="full-rate warm-up (2)")
    parser.add_argument("--idle-seconds", type=float)
    parser.add_argument(
        "--wait-idle", type=float, default=0, help="wait up to S s for a quiet machine per scenario"
    )
    parser.add_argument(
        "--server-root",
        type=Path,
        default=ROOT,
        help="run the server from this checkout (before/after comparisons)",
    )
    parser.add_argument("--dir", help="where to make the temporary data directories")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--floor-server", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.client:
        cfg = json.loads(args.client)
        print(json.dumps(H.run_async(asyncio.wait_for(client_main(cfg), CLIENT_TIMEOUT))))
        return 0
    if args.floor_server:
        H.run_async(floor_server(bytes.fromhex(args.floor_server)))
        return 0
    quick = args.quick
    args.k = args.k or ("20" if quick else "100,1000")
    args.paced_seconds = args.paced_seconds or (1.0 if quick else 10.0)
    args.seconds = args.seconds or (0.5 if quick else 8.0)
    args.warmup = args.warmup if args.warmup is not None else (0.3 if quick else 2.0)
    args.idle_seconds = (
        args.idle_seconds if args.idle_seconds is not None else (0.2 if quick else 1.0)
    )
    root = Path(tempfile.mkdtemp(prefix="ledgermem-bench-fanout-", dir=args.dir))
    try:
        result = run(root, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
