"""What the memory tells a tracer, without importing one.

`Memory.tracing` is None unless a tracer was installed (streams/server/telemetry.py installs an
OpenTelemetry one when the service is configured for it); the runner then asks it for:

- a span around each command (`Tracing.command`), current while the command runs; the runner
  hands it the command's result, and a tracer that records the span adds what `describe` says
  of it: for context assembly, the query, the record's seq and one event per injected
  observation, read from the durable record itself, so the trace says exactly what the
  `context.assembled` record says;
- a span per appended group (`Tracing.append`): the records that one `writer.submit` took (their
  seq range, how many, for how many commands: `append_attributes`), from the submit until a
  caller sees them durable.

This package never imports opentelemetry: tracing stays optional (an install extra), the memory
model has nothing to configure, and with no tracer the runner pays one attribute test per command
and per group. The functions below are pure: they turn records into plain attributes and events.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from eventstore.record import Record

Attributes = dict[str, str | int | float | bool | list[str]]
Event = tuple[str, Attributes]


class CommandSpan(Protocol):
    def done(self, result: object) -> None:
        """The command's result (called once, before the span ends): a tracer that records the
        span adds what `describe` says of it."""


class Tracing(Protocol):
    def command(
        self, name: str, tenant: str, session: str | None
    ) -> AbstractContextManager[CommandSpan]:
        """A span for one command, current inside the `with` (an error leaving it is recorded)."""

    def append(
        self, records: list[Record], commands: int
    ) -> Callable[[BaseException | None], None]:
        """Start the span of one group's append now (a tracer that records it adds
        `append_attributes`); the function returned ends it, with the write's error if any."""


OBSERVATION_EVENT = "ledgermem.observation.injected"


def append_attributes(records: list[Record], commands: int) -> Attributes:
    """One group's append: its seq range, its size, and the items its records add."""
    items = 0
    for record in records:
        payload = record.payload
        if record.type == "item.added" and isinstance(payload, dict):
            items += len(payload.get("items", ()))
    return {
        "ledgermem.seq.first": records[0].seq,
        "ledgermem.seq.last": records[-1].seq,
        "ledgermem.batch.records": len(records),
        "ledgermem.batch.commands": commands,
        "ledgermem.batch.items": items,
        "ledgermem.record.types": sorted({r.type for r in records}),
    }


def describe(command: str, result: object) -> tuple[Attributes, list[Event]]:
    """What a command's result adds to its span: for context assembly (whose result is the
    durable record and the messages) `context_trace`; for the others, nothing yet."""
    if command == "assemble_context" and isinstance(result, tuple):
        record = result[0]
        if isinstance(record, Record) and record.has_payload:
            return context_trace(record)
    return {}, []


def context_trace(record: Record) -> tuple[Attributes, list[Event]]:
    """A `context.assembled` record as span attributes and one event per injected observation
    (rank, method, BM25 score when a search hit, item, session, tokens): the same values the
    record's manifest holds. Records written before these fields existed give what they have."""
    payload = record.payload if isinstance(record.payload, dict) else {}
    settings = payload.get("inject") or {}
    manifest = payload.get("manifest", ())
    attributes: Attributes = {
        "ledgermem.seq": record.seq,
        "ledgermem.context.budget": payload.get("budget", 0),
        "ledgermem.context.tokens": payload.get("tokens", 0),
        "ledgermem.context.entries": len(manifest),
    }
    if "query" in settings:
        attributes["ledgermem.context.query"] = settings["query"]
    events: list[Event] = []
    for entry in manifest:
        if entry.get("inject") != "observation":
            continue
        event: Attributes = {
            "ledgermem.item.id": entry["id"],
            "ledgermem.session": entry["session"],
            "ledgermem.tokens": entry["tokens"],
        }
        for key in ("rank", "method", "score"):
            if key in entry:
                event[f"ledgermem.{key}"] = entry[key]
        events.append((OBSERVATION_EVENT, event))
    attributes["ledgermem.context.observations"] = len(events)
    return attributes, events
