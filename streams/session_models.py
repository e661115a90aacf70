"""The session operations of the REST API (streams/api.py) as pydantic models, for /openapi.json.

The handlers do not validate with these (the memory core is the judge, docs/openapi.md); the
models say what the core accepts, as closely as JSON Schema can. What it cannot say is in the
descriptions (the operations' `description`): a section's settings are checked together with
the settings they override, and seed items count against their section's budget; both are 422
refusals of a well-formed body.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, WithJsonSchema
from typing_extensions import TypeAliasType

from eventstore.jcs import MAX_SAFE_INTEGER
from sections.config import LIFETIMES, POLICIES
from sections.inject import OBSERVATION_CHARS
from sections.tokens import BUILT_IN
from sections.views import MAX_TOP_K

from .apidoc import IDEMPOTENCY_KEY, IF_MATCH, Reply
from .apidoc.models import (
    Count,
    ErrorReply,
    JsonObject,
    Open,
    Record,
    SafeInt,
    Strict,
    Time,
)
from .apidoc.operation import ETAG, LOCATION, RETRY_AFTER

# A JSON number the log takes (eventstore/jcs.py `check_value`): an integral value within
# ±(2**53-1), which I-JSON keeps exact; any other value but those from 2**53 to 1e21, which JCS
# would write as integers beyond that range (from 1e21 on it writes an exponent).
JCS_EXPONENT = 1e21
SafeNumber = Annotated[
    float,
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
                {"type": "number", "not": {"type": "integer"}},
                {"type": "number", "minimum": JCS_EXPONENT},
                {"type": "number", "maximum": -JCS_EXPONENT},
            ]
        }
    ),
]
SessionJson = TypeAliasType(
    "SessionJson",
    Union[None, bool, SafeNumber, str, list["SessionJson"], dict[str, "SessionJson"]],  # noqa: UP007
)
SessionJsonObject = dict[str, SessionJson]
Positive = Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]
Text = Annotated[str, Field(min_length=1)]
# sections/config.py: a section's name is an identifier that does not start with "_".
SECTION_NAME = r"^[A-Za-z0-9.:@/+-][A-Za-z0-9._:@/+-]{0,127}$"
Reader = Literal["agent", "operator"]
# streams/api.py `_expected_version`: digits, optionally quoted and weak ("7", W/"7").
Version = Annotated[str, Field(pattern=r'^(W/)?"*-?[0-9]{1,18}"*$')]
SESSION_IF_MATCH = replace(IF_MATCH, type=Version)
ETAG_SENT = replace(ETAG, required=True)
LOCATION_SENT = replace(LOCATION, required=True)
LIST_MAX = 2**31  # streams/api.py list_sessions: limit and offset


def _no_default(schema: dict) -> None:
    schema.pop("default", None)


def unset(description: str | None = None) -> Any:
    """An optional field that is never null, and whose absence means the server's own value,
    which may depend on the session (a section's current policy): no default is shown."""
    return Field(None, description=description, json_schema_extra=_no_default)


# ---- requests ----------------------------------------------------------------------------------


class SessionListQuery(Strict):
    limit: Annotated[int, Field(ge=0, le=LIST_MAX)] = unset("at most this many sessions")
    offset: Annotated[int, Field(ge=0, le=LIST_MAX)] = Field(0, description="skip this many")
    since: Time = unset("last activity at or after this time")
    until: Time = unset("last activity before this time")


# Any other query parameter filters on creation metadata. Not said with `propertyNames`: keys
# named like the paging parameters (or `token`, a credential) are those parameters, and an
# exploded object that named them would be read as them. Its values are any: on the wire each
# is the text it is sent as, compared with the metadata's string values.
METADATA_FILTERS = (
    "metadata",
    dict[str, Any],
    "any other parameter filters on creation metadata by equality with a string value: `app=x`; "
    "`metadata.limit=x` for a key named like limit, offset, since, until or token",
)


class SessionToolCall(Strict):
    """A tool call an assistant message made: an object with a string id (OpenAI's shape)."""

    model_config = ConfigDict(extra="allow")
    id: str
    __pydantic_extra__: dict[str, SessionJson]


class SessionSeedItem(Strict):
    """An item to seed a section with at creation: every field of an add (docs/sections.md)."""

    content: SessionJson = Field(description="a string or any JSON")
    kind: str | None = None
    role: str | None = None
    tags: list[str] = []
    priority: SafeNumber = 0
    metadata: SessionJsonObject = {}
    group: str | None = None
    name: str | None = None
    tool_calls: list[SessionToolCall] | None = None
    tool_call_id: str | None = None
    images: list[SessionJson] | None = None
    reasoning_details: SessionJson = None
    agent_calls: list[SessionJson] | None = None


class SessionSectionSettings(Strict):
    """A section's settings for this session (sections/config.py); a new name adds a section."""

    budget_tokens: Positive | None = unset("tokens; null: unbounded")
    policy: Literal[POLICIES] = unset("what goes first when it is full")  # type: ignore[valid-type]
    lifetime: Literal[LIFETIMES] = unset()  # type: ignore[valid-type]
    mutable: bool = unset()
    searchable: bool = unset()
    audit_reads: Literal[True] = unset("every read leaves a record: only true")
    compact_at_tokens: Positive | None = unset(
        "compact instead of evicting past this many tokens (docs/compaction.md); null: never"
    )
    compact_keep_turns: Positive = unset("assistant rounds kept whole")
    compact_tool_chars: Positive = unset("tool outputs longer than this are cut first")
    max_items: Positive | None = unset("at most this many items; null: no bound")
    items: list[SessionSeedItem] = unset("seed items, at creation only (replace the config's)")


class SessionCreateRequest(Strict):
    """A new session: its metadata, per-section settings and seeds, its token counter."""

    metadata: SessionJsonObject | None = None
    sections: (
        Annotated[
            dict[str, SessionSectionSettings],
            Field(json_schema_extra={"propertyNames": {"pattern": SECTION_NAME}}),
        ]
        | None
    ) = Field(None, description="per section name: settings, and seed items")
    token_counter: Literal[tuple(BUILT_IN)] | None = Field(  # type: ignore[valid-type]
        None, description="the counter it counts with for good (docs/tokens.md)"
    )


class SessionTranscriptMessage(Strict):
    role: Text
    content: str


class SessionEndRequest(Strict):
    messages: Annotated[list[SessionTranscriptMessage], Field(min_length=1)] | None = Field(
        None, description="a transcript, recorded as the session's messages before the end"
    )


class SessionCommitRequest(Strict):
    section: Text | None = Field(
        None, description="one section; every commit-lifetime one if absent"
    )


class SessionCompactRequest(Strict):
    target_bytes: Positive = Field(description="the bytes the rendered context must fit")
    section: Text | None = Field(None, description="the section to compact (messages)")
    budget: Positive = Field(8000, description="the context's token budget")
    sections: list[str] | None = Field(None, description="the context's sections")


class SessionContextRequest(Strict):
    budget: Positive = Field(8000, description="tokens")
    sections: list[str] | None = Field(None, description="these sections, in this order")
    reader: Reader = "agent"
    query: str | None = Field(None, description="the prompt: ranks observations and facts")
    observations: Annotated[int, Field(ge=0, le=MAX_TOP_K)] = Field(
        0, description="inject up to this many observations"
    )
    summaries: Annotated[int, Field(ge=0, le=MAX_TOP_K)] = Field(
        0, description="inject the newest session summaries"
    )
    observation_chars: Annotated[int, Field(ge=1, le=1 << 20)] = OBSERVATION_CHARS
    facts: Annotated[int, Field(ge=0, le=MAX_TOP_K)] = Field(
        0, description="inject up to this many valid facts"
    )
    sessions: Annotated[int, Field(ge=0, le=MAX_TOP_K)] = Field(
        0, description="recent sessions as a <memory:sessions> block"
    )


class SessionStateQuery(Strict):
    at: Count = Field(description="a seq of the log, at most its head")


class SessionEraseItems(Strict):
    reason: Text
    ids: Annotated[list[str], Field(min_length=1)] = Field(description="the items to erase")
    all: Literal[False] = False


class SessionEraseAll(Strict):
    reason: Text
    all: Literal[True] = Field(description="erase the whole session")


SessionEraseRequest = SessionEraseItems | SessionEraseAll


# ---- answers -----------------------------------------------------------------------------------


class SessionInfo(Open):
    tenant: str
    session: str
    metadata: JsonObject
    created_seq: Count
    created_ts: SafeInt = Field(description="µs since the epoch")
    active_ts: SafeInt = Field(description="the last activity, µs since the epoch")
    version: Count = Field(description="the seq of the last record that changed it (its ETag)")
    turn: Count
    ended: bool
    items: Count


class SessionList(Open):
    sessions: list[SessionInfo] = Field(description="in creation order")


class SessionCreated(Open):
    record: Record = Field(description="its session.created record")
    session: SessionInfo


class SessionExisted(Open):
    record: None = Field(description="nothing was appended")
    session: SessionInfo


class SessionSection(Open):
    budget_tokens: Count | None
    policy: str
    lifetime: str
    mutable: bool
    searchable: bool
    audit_reads: bool
    tokens: Count
    items: Count
    evictions: Count
    compact_at_tokens: Count = unset("with the other compaction settings, when it compacts")
    compact_keep_turns: Count = unset()
    compact_tool_chars: Count = unset()
    max_items: Count = unset("when it is bounded")


class SessionDetail(SessionInfo):
    sections: dict[str, SessionSection]


class SessionStats(Open):
    sessions: Count
    items: Count
    tokens: dict[str, Count] = Field(description="by section name")
    evictions: dict[str, Count] = Field(description="by section name")


class SessionWritten(Open):
    record: Record


class SessionCompaction(Open):
    compacted: bool = Field(description="false: it fitted already, nothing was appended")
    seq: Count | None
    bytes_before: Count
    bytes_after: Count
    tokens_before: Count = unset("the section's, when it was compacted")
    tokens_after: Count = unset()
    replaced: Count = unset("items replaced by a summary")
    truncated: Count = unset("tool outputs cut")


class SessionCompacted(Open):
    compaction: SessionCompaction


class SessionContextMessage(Open):
    role: str
    content: Any


class SessionContext(Open):
    record: Record = Field(description="its context.assembled record: the manifest")
    messages: list[SessionContextMessage]


class SessionPast(Open):
    """A session as it was (sections/state.py `SessionState.to_json`)."""

    tenant: str
    session: str
    version: Count
    sections: dict[str, Any]


class SessionStateReply(Open):
    at: Count
    sessions: list[SessionPast]


class SessionErased(Open):
    record: Record
    erased: list[str] | Literal["session"] = Field(description='the erased item ids, or "session"')


# ---- what the operations share -----------------------------------------------------------------

WRITE_HEADERS = (IDEMPOTENCY_KEY, SESSION_IF_MATCH)
WRITTEN = Reply(SessionWritten, "durable: its record", headers=(ETAG_SENT,))
BUSY = Reply(ErrorReply, "busy: time travel runs one replay at a time", headers=(RETRY_AFTER,))

# What JSON Schema cannot say of a new session's body, in the operations' descriptions.
NEW_SESSION_REFUSALS = (
    "A section's settings are checked with the settings they override, the section's own or "
    "a new section's defaults: policy `none` needs an unbounded budget or an immutable section, "
    "`compact_at_tokens` may not exceed `budget_tokens` (422 `conflicting_settings`). Seed items "
    "count against their section's budget and are refused whole past it (422 "
    "`budget_exceeded`); they are checked even when no session is made (it exists, or a retry "
    "finds its key)."
)
COMPACT_REFUSALS = (
    "422 `cannot_compact` when no compaction makes the context fit: what is left is protected "
    "(the instruction, system messages, the last round) or not in the section."
)
