"""What the HTTP fan-out channels take and give (streams/fanout/channels/, docs/wire.md).

The query models describe; the channels parse their query themselves (`query_params`), as
before. A parameter left out has no default in the schema: its absence is the meaning (no
filter, the tenant's partition), not a value a client could send.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, GetJsonSchemaHandler

from eventstore.jcs import MAX_SAFE_INTEGER
from streams.apidoc import Header, Reply
from streams.apidoc.models import (
    Absent,
    Count,
    ErrorReply,
    Identifier,
    Open,
    Record,
    Strict,
    absent,
)

# A seq, or -1 for the start of the log (streams/fanout/channels/query.py parse_cursor).
Cursor = Annotated[int, Field(ge=-1, le=MAX_SAFE_INTEGER)]
Values = list[Identifier] | Absent
CACHE_CONTROL = Header("Cache-Control", "no-store: a stream is never cached")
# Empty is no id, as in the SSE specification (an `id:` line with no value resets it).
LAST_EVENT_ID = Header(
    "Last-Event-ID",
    "the seq of the last event seen, as its `id:` gave it; wins over `after` (empty: none)",
    Cursor | Literal[""],
)
# The hub's refusals (streams/fanout/channels/context.py REFUSALS), besides the 4XX every route has.
REFUSED = {
    409: Reply(
        ErrorReply,
        "cursor_beyond_head: the cursor (`after`, or `Last-Event-ID`) is past the log's last "
        "record, a position of another history (a log restored from an older backup?); the "
        "message names the head to resume from",
    ),
    429: Reply(ErrorReply, "too_many_subscribers: this client address has too many streams open"),
    503: Reply(ErrorReply, "the service is shutting down: resume with the cursor elsewhere"),
}


class StreamQuery(Strict):
    """The filters every channel takes (docs/wire.md, "Filters"), and the partition."""

    tenant: Values = absent("only these tenants' records; may repeat (a token reads its own)")
    session: Values = absent("only these sessions' records; may repeat")
    section: Values = absent("only these sections' records; may repeat")
    type: Values = absent("only records of these types; may repeat")
    partition: Count | Absent = absent(
        "with a shared store of P partitions: the one to read (0..P-1; another is 404), for an "
        "operator's stream without a tenant filter; else the tenant's partition"
    )


class SseQuery(StreamQuery):
    after: Cursor = Field(-1, description="the seq of the last record seen; -1: from the start")
    typed: bool = Field(False, description="also an `event: <type>` line per record")


class JsonlQuery(StreamQuery):
    after: Cursor = Field(-1, description="the seq of the last record seen; -1: from the start")
    follow: bool = Field(
        True,
        description="true: stay open and send new records as they come; false: end at the head "
        "as it was when the request arrived",
        examples=[False],
    )


class LongPollQuery(StreamQuery):
    after: Cursor = Field(
        -1, description="the seq of the last record seen (`next` of the previous answer)"
    )
    # Any count: the service caps it rather than refusing it (streams/fanout/channels/query.py `number`).
    limit: Annotated[int, Field(ge=1)] = Field(
        100, description="at most this many records (larger values are capped at max_batch_items)"
    )
    wait: Annotated[float, Field(ge=0)] = Field(
        30,
        description="seconds to wait for a matching record when none is there yet (larger values "
        "are capped at long_poll_max_wait, 60 by default); 0 answers at once",
        examples=[0],
    )


class JsonText:
    """A string holding the JSON of `model`: JSON Schema's contentMediaType and contentSchema."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler) -> dict:
        out = handler(schema)
        out["contentMediaType"] = "application/json"
        out["contentSchema"] = handler(self.model.__pydantic_core_schema__)
        return out


class SseEvent(Open):
    """One event of the SSE stream, as OpenAPI describes an event stream: each event's fields
    (comments, the keep-alive pings, are no events)."""

    id: Annotated[str, Field(pattern=r"^[0-9]+$")] = Field(description="the record's seq")
    event: str | Absent = absent(
        "the record's type with typed=true; without it, absent (a `message` event)"
    )
    data: Annotated[str, JsonText(Record)] = Field(description="the record's exact line")


class LongPollReply(Open):
    records: list[Record] = Field(description="the matching records after `after`, in seq order")
    next: Cursor = Field(
        description="the seq of the last record given, else `after`: the next after"
    )
    head: Cursor = Field(description="the seq of the log's last record")
