"""The types every part of the API shares: identifiers, times, records, errors, write answers.

Bodies the server refuses unknown fields of are `Strict` models (`additionalProperties: false`);
answers are `Open` models: a client must accept fields added later (docs/wire.md).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from eventstore.identifiers import IDENTIFIER_PATTERN
from eventstore.jcs import MAX_SAFE_INTEGER

# docs/format.md section 2; anchored, as JSON Schema's `pattern` is a search.
Identifier = Annotated[str, Field(pattern=f"^{IDENTIFIER_PATTERN}$")]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
SafeInt = Annotated[int, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)]
Count = Annotated[int, Field(ge=0, le=MAX_SAFE_INTEGER)]
# eventstore/timestamps.py parse_time: microseconds since the epoch, or an ISO-8601 time.
Micros = Annotated[int, Field(ge=-(10**18) + 1, le=10**18 - 1, description="µs since the epoch")]
Time = Annotated[
    Micros | Annotated[str, Field(json_schema_extra={"format": "date-time"})],
    Field(description="µs since the epoch, or an ISO-8601 time (UTC when it has no offset)"),
]
JsonObject = dict[str, Any]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Record(Open):
    """One record, exactly its line in the segment file (docs/format.md section 2)."""

    v: int
    seq: Count
    ts: SafeInt
    tenant: str
    session: str
    section: str
    type: str
    prev: Hex64
    h: Hex64
    pd: Hex64
    salt: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    payload: Any = None
    redacted: int | None = None


class ErrorDetail(Open):
    code: str = Field(description="what went wrong, for programs (docs/wire.md)")
    message: str = Field(description="what went wrong, for people")


class ErrorReply(Open):
    """Every refusal: nothing was appended."""

    error: ErrorDetail


class RecordReply(Open):
    """A durable write: its record, exactly as the segment file holds it."""

    record: Record
