"""Minimal clients of the four fan-out channels for tests: each yields records as exact bytes.

SSE, JSONL and long-poll go through a bare HTTP/1.1 client on asyncio streams, so that what is
checked is the bytes on the wire; SSE and JSONL are split on line endings only (`\\n`, `\\r\\n`),
never on U+2028 or U+0085, which may occur raw inside a record (httpx's line splitting uses
str.splitlines, which would). It also keeps hundreds of concurrent streams cheap: httpcore's
pool is quadratic in its connections and retries a missing optional import per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from urllib.parse import urlencode, urlsplit

import orjson
from websockets.asyncio.client import connect

CHANNELS = ("sse", "ws", "jsonl", "longpoll")


def seq_of(record: bytes) -> int:
    return orjson.loads(record)["seq"]


def query(after: int | None, filters: dict[str, list[str]] | None, **extra) -> str:
    pairs: list[tuple[str, object]] = []
    if after is not None:
        pairs.append(("after", after))
    for name, values in (filters or {}).items():
        pairs.extend((name, v) for v in values)
    pairs.extend(extra.items())
    return urlencode(pairs)


class HttpError(Exception):
    """An answer other than the one expected (the test decides what that means)."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(f"HTTP {status}: {body[:300]!r}")
        self.status, self.body = status, body


class Response:
    def __init__(self, status: int, headers: dict[str, str], reader) -> None:
        self.status, self.headers, self._reader = status, headers, reader

    async def chunks(self) -> AsyncIterator[bytes]:
        reader = self._reader
        if self.headers.get("transfer-encoding") == "chunked":
            while True:
                line = await reader.readline()
                if not line:
                    raise ConnectionResetError("the server closed the stream mid-chunk")
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    await reader.readline()
                    return
                yield await reader.readexactly(size)
                await reader.readexactly(2)
        elif "content-length" in self.headers:
            yield await reader.readexactly(int(self.headers["content-length"]))
        else:
            while data := await reader.read(65536):
                yield data

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def lines(self) -> AsyncIterator[bytes]:
        buffer = b""
        async for chunk in self.chunks():
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for line in complete:
                yield line[:-1] if line.endswith(b"\r") else line


@contextlib.asynccontextmanager
async def get(url: str, target: str, headers: dict[str, str] | None = None):
    """One GET on its own connection; closing the context is a client disconnect."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        head = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write(head.encode() + b"\r\n")
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionResetError("the server closed the connection before answering")
        status = int(status_line.split()[1])
        fields = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            fields[name.strip().lower()] = value.strip()
        yield Response(status, fields, reader)
    finally:
        writer.close()


async def get_json_error(url: str, target: str, headers=None) -> tuple[int, dict]:
    async with get(url, target, headers) as response:
        return response.status, json.loads(await response.read())


async def sse_events(
    url: str,
    after: int | None = None,
    filters: dict | None = None,
    last_event_id: int | None = None,
    typed: bool = False,
    comments: list | None = None,
) -> AsyncIterator[dict]:
    """Each SSE event as {"id", "event", "data"} (values as bytes); comments go to `comments`."""
    headers = {} if last_event_id is None else {"Last-Event-ID": str(last_event_id)}
    extra = {"typed": 1} if typed else {}
    async with get(url, f"/v1/stream/sse?{query(after, filters, **extra)}", headers) as response:
        if response.status != 200:
            raise HttpError(response.status, await response.read())
        assert response.headers["content-type"].startswith("text/event-stream")
        event: dict = {}
        async for line in response.lines():
            if not line:
                if "data" in event:
                    yield event
                event = {}
            elif line.startswith(b":"):
                if comments is not None:
                    comments.append(line)
            else:
                name, _, value = line.partition(b":")
                event[name.decode()] = value[1:] if value.startswith(b" ") else value


async def sse_records(url, after=None, filters=None, **kw) -> AsyncIterator[bytes]:
    async for event in sse_events(url, after, filters, **kw):
        assert int(event["id"]) == seq_of(event["data"])
        yield event["data"]


async def jsonl_records(url: str, after=None, filters=None, follow: bool = True):
    async with get(url, f"/v1/stream/jsonl?{query(after, filters, follow=int(follow))}") as r:
        if r.status != 200:
            raise HttpError(r.status, await r.read())
        assert r.headers["content-type"] == "application/x-ndjson"
        async for line in r.lines():
            if line:  # an empty line is the idle keep-alive (docs/wire.md), not a record
                yield line


async def ws_messages(url: str, after=None, filters=None, headers=None) -> AsyncIterator[bytes]:
    """Every text frame: records and control messages."""
    first: dict = {"filter": filters or {}}
    if after is not None:
        first["after"] = after
    async with connect(
        "ws" + url.removeprefix("http") + "/v1/stream/ws", max_size=None, additional_headers=headers
    ) as ws:
        await ws.send(json.dumps(first))
        async for message in ws:
            assert isinstance(message, str), "records come as text frames"
            yield message.encode()


async def ws_records(url: str, after=None, filters=None) -> AsyncIterator[bytes]:
    async for message in ws_messages(url, after, filters):
        if not message.startswith(b'{"control"'):
            yield message


def split_poll_body(body: bytes) -> tuple[list[bytes], int, int]:
    """(records as their exact bytes, next, head) of a long-poll answer."""
    text = body.decode()
    parsed = json.loads(text)
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    records = []
    while text[at] != "]":
        _, end = decoder.raw_decode(text, at)
        records.append(text[at:end].encode())
        at = end + 1 if text[end] == "," else end
    assert len(records) == len(parsed["records"])
    return records, parsed["next"], parsed["head"]


async def poll(url: str, after: int, filters=None, wait: float = 1, limit=None):
    """One long-poll: (records, next, head)."""
    extra = {"wait": wait} if limit is None else {"wait": wait, "limit": limit}
    async with get(url, f"/v1/events?{query(after, filters, **extra)}") as response:
        body = await response.read()
        if response.status != 200:
            raise HttpError(response.status, body)
        assert response.headers["content-type"] == "application/json"
        return split_poll_body(body)


async def longpoll_records(url: str, after=None, filters=None, wait: float = 1, limit=None):
    cursor = -1 if after is None else after
    while True:
        records, cursor, _ = await poll(url, cursor, filters, wait, limit)
        for record in records:
            yield record


def records(channel: str, url: str, after=None, filters=None) -> AsyncIterator[bytes]:
    """The records of one channel from cursor `after`, following the log."""
    if channel == "sse":
        return sse_records(url, after, filters)
    if channel == "ws":
        return ws_records(url, after, filters)
    if channel == "jsonl":
        return jsonl_records(url, after, filters)
    return longpoll_records(url, after, filters, wait=1, limit=50)
