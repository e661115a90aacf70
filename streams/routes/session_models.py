"""The session operations of the REST API (streams/routes/sessions_api.py, context_api.py,
state_api.py) as pydantic models: what /openapi.json says of them, and what parses their bodies
and queries.

A handler is given its request parsed by these models; the memory core judges what it means.
What JSON Schema cannot say is in the operations' descriptions: a section's settings are
checked together with the settings they override, and seed items count against their section's
budget; both are 422 refusals of a well-formed body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from sections.model.render import DEFAULT_CONTEXT_BUDGET
from sections.model.tokens import BUILT_IN
from sections.retrieval.inject import OBSERVATION_CHARS
from sections.retrieval.views import MAX_TOP_K
from streams.apidoc import IDEMPOTENCY_KEY, IF_MATCH, Reply
from streams.apidoc.models import (
    WHOLE,
    Count,
    ErrorReply,
    JsonObject,
    JsonValueObject,
    Open,
    Reader,
    Record,
    SafeInt,
    Strict,
    Time,
    absent,
)
from streams.apidoc.operation import ETAG, RETRY_AFTER
from streams.routes.item_models import SECTION_NAME, ItemToAdd, Lifetime, Policy, Positive

Text = Annotated[str, Field(min_length=1)]
LIST_MAX = 2**31  # list_sessions: limit and offset
if TYPE_CHECKING:  # a Literal of a constant tuple is beyond mypy: to the checker, a string
    TokenCounter = str
else:
    TokenCounter = Literal[tuple(BUILT_IN)]


# ---- requests ----------------------------------------------------------------------------------


class SessionListQuery(Strict):
    limit: Annotated[int, Field(ge=0, le=LIST_MAX), WHOLE] = absent("at most this many sessions")
    offset: Annotated[int, Field(ge=0, le=LIST_MAX), WHOLE] = Field(0, description="skip this many")
    since: Time = absent("last activity at or after this time")
    until: Time = absent("last activity before this time")


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


class SessionSectionSettings(Strict):
    """A section's settings for this session (sections/model/config.py); a new name adds a section."""

    budget_tokens: Positive | None = absent("tokens; null: unbounded")
    policy: Policy = absent("what goes first when it is full")
    lifetime: Lifetime = absent()
    mutable: bool = absent()
    searchable: bool = absent()
    audit_reads: Literal[True] = absent("every read leaves a record: only true")
    compact_at_tokens: Positive | None = absent(
        "compact instead of evicting past this many tokens (docs/compaction.md); null: never"
    )
    compact_keep_turns: Positive = absent("assistant rounds kept whole")
    compact_tool_chars: Positive = absent("tool outputs longer than this are cut first")
    max_items: Positive | None = absent("at most this many items; null: no bound")
    items: list[ItemToAdd] = absent("seed items, at creation only (replace the config's)")


class SessionCreateRequest(Strict):
    """A new session: its metadata, per-section settings and seeds, its token counter."""

    what: ClassVar[str] = "a new session"
    metadata: JsonValueObject | None = None
    sections: (
        Annotated[
            dict[str, SessionSectionSettings],
            Field(json_schema_extra={"propertyNames": {"pattern": SECTION_NAME}}),
        ]
        | None
    ) = Field(None, description="per section name: settings, and seed items")
    token_counter: TokenCounter | None = Field(
        None, description="the counter it counts with for good (docs/tokens.md)"
    )


class SessionTranscriptMessage(Strict):
    role: Text
    content: str


class SessionEndRequest(Strict):
    what: ClassVar[str] = "the end"
    messages: Annotated[list[SessionTranscriptMessage], Field(min_length=1)] | None = Field(
        None, description="a transcript, recorded as the session's messages before the end"
    )


class SessionCommitRequest(Strict):
    what: ClassVar[str] = "a commit"
    section: Text | None = Field(
        None, description="one section; every commit-lifetime one if absent"
    )


class SessionCompactRequest(Strict):
    what: ClassVar[str] = "a compaction"
    target_bytes: Positive = Field(description="the bytes the rendered context must fit")
    section: Text | None = Field(None, description="the section to compact (messages)")
    budget: Positive = Field(DEFAULT_CONTEXT_BUDGET, description="the context's token budget")
    sections: list[str] | None = Field(None, description="the context's sections")


TopK = Annotated[int, Field(ge=0, le=MAX_TOP_K), WHOLE]


class SessionContextRequest(Strict):
    what: ClassVar[str] = "the context"
    budget: Positive = Field(DEFAULT_CONTEXT_BUDGET, description="tokens")
    sections: list[str] | None = Field(None, description="these sections, in this order")
    reader: Reader = "agent"
    query: str | None = Field(None, description="the prompt: ranks observations and facts")
    observations: TopK = Field(0, description="inject up to this many observations")
    summaries: TopK = Field(0, description="inject the newest session summaries")
    observation_chars: Annotated[int, Field(ge=1, le=1 << 20), WHOLE] = OBSERVATION_CHARS
    facts: TopK = Field(0, description="inject up to this many valid facts")
    sessions: TopK = Field(0, description="recent sessions as a <memory:sessions> block")
    recall: bool | Annotated[float, Field(ge=0, le=1)] | None = Field(
        None,
        description="recall of the user's past with a query (docs/recall.md): on by default; "
        "false turns it off; a number from 0 to 1 is the share of the budget kept for it",
    )


class SessionStateQuery(Strict):
    model_config = ConfigDict(extra="ignore", strict=True)  # other parameters: ignored, as ever

    at: Count = Field(description="a seq of the log, at most its head")


class SessionEraseItems(Strict):
    what: ClassVar[str] = "an erase"
    reason: Text
    ids: Annotated[list[str], Field(min_length=1)] = Field(description="the items to erase")
    all: Literal[False] = False


class SessionEraseAll(Strict):
    what: ClassVar[str] = "an erase"
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
    compact_at_tokens: Count = absent("with the other compaction settings, when it compacts")
    compact_keep_turns: Count = absent()
    compact_tool_chars: Count = absent()
    max_items: Count = absent("when it is bounded")


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
    tokens_before: Count = absent("the section's, when it was compacted")
    tokens_after: Count = absent()
    replaced: Count = absent("items replaced by a summary")
    truncated: Count = absent("tool outputs cut")


class SessionCompacted(Open):
    compaction: SessionCompaction


class SessionContextMessage(Open):
    role: str
    content: Any


class SessionContext(Open):
    record: Record = Field(description="its context.assembled record: the manifest")
    messages: list[SessionContextMessage]


class SessionPast(Open):
    """A session as it was (sections/model/state.py `SessionState.to_json`)."""

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

WRITE_HEADERS = (IDEMPOTENCY_KEY, IF_MATCH)
WRITTEN = Reply(SessionWritten, "durable: its record", headers=(ETAG,))
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
