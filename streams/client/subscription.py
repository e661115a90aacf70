"""One live subscription's state across its connections: the cursor, the requests that resume
from it, and each arriving record checked and deduplicated. Pure: the clients move the bytes.

The cursor is the seq of the last record handed to the caller (wire.md, "The cursor"). Every
(re)connection asks for the records after it: SSE with `Last-Event-ID` (and `after`, which it
wins over), WebSocket with `after` in its first frame. The service only ever publishes durable
records, so a record the caller got survives a kill -9 of the service, and asking for the
records after it once the service is back loses nothing and repeats nothing. A record at or
below the cursor is dropped here all the same (and counted in `duplicates`), so the caller sees
each record at most once even from a service that repeated one.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from streams.client.chain import ChainCheck
from streams.client.errors import ChainBroken
from streams.client.sse import SseEvent

FILTERS = ("tenant", "session", "section", "type")
TRANSPORTS = ("sse", "ws")


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """A record as it arrived: `line`, its exact bytes (the log file's line), and `data`, the
    parsed object."""

    line: bytes
    data: dict

    @property
    def seq(self) -> int:
        return self.data["seq"]

    @property
    def h(self) -> str:
        return self.data["h"]

    @property
    def type(self) -> str:
        return self.data["type"]

    @property
    def session(self) -> str:
        return self.data["session"]

    @property
    def section(self) -> str:
        return self.data["section"]

    @property
    def payload(self) -> object:
        return self.data.get("payload")


def _filter_values(filters: dict[str, str | list[str]] | None) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, values in (filters or {}).items():
        if name not in FILTERS:
            raise ValueError(f"unknown filter {name!r}: filters are {', '.join(FILTERS)}")
        found[name] = [values] if isinstance(values, str) else list(values)
        if not found[name]:
            raise ValueError(f"filter {name} has no values")
    return found


class SubscriptionState:
    def __init__(
        self,
        filters: dict[str, str | list[str]] | None = None,
        *,
        after: int = -1,
        after_h: str | None = None,
        origin: str | None = None,
        contiguous: bool,
        partition: int | None = None,
    ) -> None:
        if type(after) is not int or after < -1:
            raise ValueError(f"after is a seq (an int >= -1), not {after!r}")
        self.filters = _filter_values(filters)
        self.partition = partition
        self.cursor = after
        self.chain = ChainCheck(contiguous=contiguous, after=after, after_h=after_h, origin=origin)
        self.duplicates = 0  # records at or below the cursor the service sent again, dropped
        self.connections = 0  # connections opened, the first included

    # -- requests

    def sse_request(self) -> tuple[str, tuple[tuple[str, str], ...], dict[str, str]]:
        """(path, query parameters, headers) of the SSE request that resumes at the cursor."""
        params = [("after", str(self.cursor))]
        params += [(name, v) for name, values in self.filters.items() for v in values]
        if self.partition is not None:
            params.append(("partition", str(self.partition)))
        headers = {"Accept": "text/event-stream"}
        if self.cursor >= 0:
            headers["Last-Event-ID"] = str(self.cursor)
        return "/v1/stream/sse", tuple(params), headers

    def ws_first_frame(self) -> str:
        """The WebSocket's subscription frame, resuming at the cursor."""
        frame: dict = {"after": self.cursor, "filter": self.filters}
        if self.partition is not None:
            frame["partition"] = self.partition
        return orjson.dumps(frame).decode()

    # -- arrivals

    def accept_sse(self, event: SseEvent) -> StreamRecord | None:
        record = self.accept_line(event.data)
        if record is not None and event.id is not None and event.id != b"%d" % record.seq:
            raise ChainBroken(
                "sse.id", f"SSE id {event.id!r} is not the seq of its record, {record.seq}"
            )
        return record

    def accept_ws(self, message: str | bytes) -> StreamRecord | None:
        line = message.encode() if isinstance(message, str) else message
        if line.startswith(b'{"control"'):
            return None  # e.g. caught_up: records never have a "control" key
        return self.accept_line(line)

    def accept_line(self, line: bytes) -> StreamRecord | None:
        """The record to hand on, checked (chain.py); None for one already handed on."""
        seq = _seq_of(line)
        if seq is not None and seq <= self.cursor:
            self.duplicates += 1
            return None
        checked = self.chain.check(line)
        self.cursor = checked.obj["seq"]
        return StreamRecord(line, checked.obj)


def _seq_of(line: bytes) -> int | None:
    """The seq from the line's prefix (`{"v":1,"seq":N,`), without parsing it; None when the
    line is not in that shape (the chain check then names what is wrong with it)."""
    if not line.startswith(b'{"v":1,"seq":'):
        return None
    end = line.find(b",", 13)
    digits = line[13:end]
    return int(digits) if end > 13 and digits.isdigit() else None
