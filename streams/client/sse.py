"""A Server-Sent Events decoder: bytes in, events out, no I/O.

Lines end in `\\n` or `\\r\\n` and nowhere else (wire.md): a record may hold U+2028 or U+0085
raw inside its strings, which a decoder built on `str.splitlines` would take for line ends.
Data stays bytes, so the record handed on is the exact bytes of its line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SseEvent:
    id: bytes | None
    event: bytes | None
    data: bytes


class SseDecoder:
    def __init__(self) -> None:
        self._buffer = b""
        self._id: bytes | None = None
        self._event: bytes | None = None
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events completed by `chunk` (a partial line waits for the next chunk)."""
        *lines, self._buffer = (self._buffer + chunk).split(b"\n")
        events: list[SseEvent] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    events.append(SseEvent(self._id, self._event, b"\n".join(self._data)))
                self._id, self._event, self._data = None, None, []
                continue
            if line.startswith(b":"):
                continue  # a comment: the service's keep-alive
            name, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if name == b"data":
                self._data.append(value)
            elif name == b"id":
                self._id = value
            elif name == b"event":
                self._event = value
        return events
