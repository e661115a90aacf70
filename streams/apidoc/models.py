"""The types every part of the API shares: identifiers, times, records, errors, write answers.

Bodies the server refuses unknown fields of are `Strict` models (`additionalProperties: false`);
answers are `Open` models: a client must accept fields added later (docs/wire.md).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import TypeAliasType

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
# Who reads: an `agent` read counts for lru/lfu eviction, an `operator` one (a dashboard) does not.
Reader = Literal["agent", "operator"]

# A JSON number a record can hold (eventstore/jcs.py): within ±(2**53-1), or a double of magnitude
# 1e21 or more (JCS writes it with an exponent: it stays a double). Between the two, and an integer
# literal beyond ±(2**53-1), is refused. JSON Schema cannot tell a literal from the double of the
# same value, so this says the doubles (what a JSON encoder writes of them).
JCS_EXPONENT_FROM = 1e21
SafeNumber = Annotated[
    Union[  # noqa: UP007 (a TypeAliasType's members are evaluated at runtime)
        Annotated[float, Field(ge=-MAX_SAFE_INTEGER, le=MAX_SAFE_INTEGER)],
        Annotated[float, Field(ge=JCS_EXPONENT_FROM)],
        Annotated[float, Field(le=-JCS_EXPONENT_FROM)],
    ],
    Field(description="within ±(2**53-1), or a double beyond ±1e21 (not an integer literal)"),
]
# Any JSON value a body may carry: every body is parsed as a record's payload will be.
JsonValue = TypeAliasType(
    "JsonValue",
    Union[SafeNumber, str, bool, None, list["JsonValue"], dict[str, "JsonValue"]],  # noqa: UP007
)
JsonValueObject = dict[str, JsonValue]

# A string the core takes as not blank: one character that str.strip() keeps. Spelled out, as
# JSON Schema's `\s` (ECMA-262's) is not str.isspace: it lacks U+001C-U+001F and U+0085 and has
# U+FEFF. Every character str.isspace() holds is below U+3001.
_SPACES = "".join(f"\\u{n:04x}" for n in range(0x3001) if chr(n).isspace())
NOT_BLANK = f"[^{_SPACES}]"

# What If-Match carries (streams/routes/api.py `_expected_version`): a session version, quoted or not,
# weak or not ("7", W/"7", 7).
Version = Annotated[str, Field(pattern=r'^\s*(W/)?"*-?[0-9]{1,18}"*\s*$')]

# An optional field or query parameter a client leaves out: absent, never null (a query string
# has no null, and a null is refused where the type has none).
Absent = SkipJsonSchema[None]


def absent(description: str | None = None) -> Any:
    """An optional field whose schema shows no `default: null`: absent means "not given", the
    server's own value (which may depend on the session)."""
    return Field(None, description=description, json_schema_extra=_no_default)


def _no_default(schema: dict) -> None:
    schema.pop("default", None)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


def _live_or_redacted(schema: dict) -> None:
    _no_default(schema["properties"]["salt"])
    _no_default(schema["properties"]["redacted"])
    # Exactly one of them: an erased payload takes its salt along (docs/format.md section 9).
    schema["oneOf"] = [{"required": ["salt"]}, {"required": ["redacted"]}]


class Record(Open):
    """One record, exactly its line in the segment file (docs/format.md section 2): with its
    `payload` and `salt`, or, once erased, with `redacted` instead (section 9)."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_live_or_redacted)

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
    salt: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")] | Absent = Field(
        None, description="the payload's salt; gone with an erased payload"
    )
    payload: Any = Field(None, description="what happened; gone once erased")
    redacted: Count | Absent = Field(
        None, description="once erased: the seq of the redaction record that allowed it"
    )


class ErrorDetail(Open):
    code: str = Field(description="what went wrong, for programs (docs/wire.md)")
    message: str = Field(description="what went wrong, for people")


class ErrorReply(Open):
    """Every refusal: nothing was appended."""

    error: ErrorDetail


class RecordReply(Open):
    """A durable write: its record, exactly as the segment file holds it."""

    record: Record
