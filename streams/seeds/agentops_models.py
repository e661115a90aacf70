"""The models of AgentOps' memory contract (streams/seeds/agentops_api.py, docs/agentops.md).

They describe; the handlers and sections/adapters/agentops.py judge, with the service's checks and
messages. The limits below are those (`sections/adapters/agentops.py`, the service's server.go).

Two things differ from the rest of the API, because the service does them so:
- its bodies ignore unknown fields (Go's decoder), so they are `Lenient`, not `Strict`; only the
  PATCH body, which has four fields, refuses others;
- its refusals are `{"error": "message"}` (`AgentOpsError`). A guard before the handler (a
  foreign Origin, an unknown Host, a body not sent as JSON) or a store with no leader answers
  in ledgermem's own shape, `ErrorReply`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from sections.adapters import agentops
from sections.retrieval.observations import TYPES
from streams.apidoc import Reply
from streams.apidoc.models import (
    NOT_BLANK,
    Count,
    ErrorReply,
    Hex64,
    Identifier,
    JsonValue,
    Open,
    Strict,
)
from streams.apidoc.operation import RETRY_AFTER

# A project or scope names the holder session `_agentops:<project>:<scope>` (an identifier of
# at most 128 characters); a project has no ':' as it ends at the first one.
PROJECT_CHARS = "A-Za-z0-9._@/+\\-"  # the '-' escaped: in a class it could make a range

Time = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
Limit = Annotated[
    int | str,
    Field(
        description=f"how many; more than {agentops.MAX_LIMIT} is {agentops.MAX_LIMIT}, and a "
        "value that is not a positive integer is the default (the service's queryInt)"
    ),
]
ObservationId = Annotated[
    int,
    Field(
        ge=0, le=10**18 - 1, description="an observation id: the seq of the record that added it"
    ),
]
ObservationType = Literal[TYPES]  # type: ignore[valid-type]


class Lenient(BaseModel):
    """A body whose unknown fields are ignored, as the service's Go decoder ignores them; they
    are still parsed, so they are JSON the log takes."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, JsonValue]  # type: ignore[assignment]


# ---- bodies ---------------------------------------------------------------------------------


class AgentOpsNewSession(Lenient):
    id: Annotated[Identifier, Field(json_schema_extra={"not": {"const": "_tenant"}})] = Field(
        description="the session id (`_tenant` is reserved); an existing one answers as it is"
    )
    project: Annotated[str, Field(max_length=agentops.MAX_PROJECT, pattern=NOT_BLANK)] = Field(
        description="the session's project, kept lowercased"
    )


class AgentOpsMessage(Strict):
    role: Annotated[str, Field(min_length=1)]
    content: str


class AgentOpsEndSession(Lenient):
    messages: list[AgentOpsMessage] | None = Field(
        None, description="the transcript: added to the session's messages before the end"
    )


Tag = Annotated[str, Field(max_length=agentops.MAX_TAG)]
Tags = Annotated[list[Tag], Field(max_length=agentops.MAX_TAGS)]
Title = Annotated[str, Field(max_length=agentops.MAX_TITLE, pattern=NOT_BLANK)]
Content = Annotated[str, Field(max_length=agentops.MAX_CONTENT, pattern=NOT_BLANK)]


class AgentOpsNewObservation(Lenient):
    session_id: Annotated[str, Field(pattern=NOT_BLANK)] = Field(
        description="the AgentOps session it came from: it must exist"
    )
    type: ObservationType
    title: Title
    content: Content
    project: Annotated[
        str, Field(pattern=f"^[{PROJECT_CHARS}]{{1,{agentops.MAX_HOLDER_PROJECT}}}$")
    ] = Field(description="kept lowercased")
    scope: (
        Annotated[str, Field(pattern=f"^[{PROJECT_CHARS}:]{{0,{agentops.MAX_SCOPE}}}$")] | None
    ) = Field(None, description=f'default (also when empty) "{agentops.DEFAULT_SCOPE}"')
    tags: Tags | None = None
    topic_key: Annotated[str, Field(max_length=agentops.MAX_TOPIC)] | None = Field(
        None, description="the same key in the same project and scope updates in place"
    )


_CHANGES = ("type", "title", "content", "tags")


class AgentOpsObservationChanges(Strict):
    """At least one field that is not null (a null one is left as it is)."""

    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
                for name in _CHANGES
            ]
        }
    )

    type: ObservationType | None = None
    title: Title | None = None
    content: Content | None = None
    tags: Tags | None = None


class AgentOpsImport(Lenient):
    sessions: list[JsonValue] | None = Field(
        None,
        description="sessions as /export gives them ({id, project}); an entry this import "
        "cannot take is skipped and not counted",
    )
    observations: list[JsonValue] | None = Field(
        None,
        description="observations as POST /observations takes them; an entry this import "
        "cannot take is skipped and not counted",
    )


# ---- queries --------------------------------------------------------------------------------

Project = Annotated[str, Field(description="one project's (lowercased); every project's if empty")]
Scope = Annotated[str, Field(description="one scope's; every scope's if empty")]


class AgentOpsProjectQuery(Strict):
    project: Project = ""


class AgentOpsRecentSessionsQuery(Strict):
    project: Project = ""
    limit: Limit = 5


class AgentOpsRecentObservationsQuery(Strict):
    project: Project = ""
    type: Annotated[str, Field(description="one type's; every type's if empty")] = ""
    scope: Scope = ""
    limit: Limit = 20


class AgentOpsSearchQuery(Strict):
    q: Annotated[str, Field(description="the words (a blank query finds nothing); one holding "
                                        "'/' first matches topic keys")] = ""  # fmt: skip
    project: Project = ""
    type: Annotated[str, Field(description="one type's; every type's if empty")] = ""
    scope: Scope = ""
    limit: Limit = 10


class AgentOpsContextQuery(Strict):
    project: Project = ""
    query: Annotated[str, Field(description="ranks the observations (BM25)")] = ""
    scope: Scope = ""
    limit: Limit = 5


class AgentOpsTimelineQuery(Strict):
    observation_id: Annotated[int, Field(ge=1, le=10**18 - 1)] = Field(
        description="the observation the timeline is around"
    )
    before: Limit = 3
    after: Limit = 3


class AgentOpsDeleteQuery(Strict):
    hard: str = Field(
        "", description='"true" erases it from the files too; anything else removes it'
    )


# ---- answers --------------------------------------------------------------------------------


class AgentOpsError(Open):
    """The service's refusal: nothing was appended."""

    error: str = Field(description="what went wrong")


class AgentOpsSession(Open):
    id: str
    project: str
    started_at: Time
    message_count: Count
    ended_at: Time | None = Field(None, description="once ended")
    summary: str | None = Field(None, description="once ended")


class AgentOpsSessionEnded(Open):
    session_id: str
    summary: str = Field(description="the service's summary, composed from the transcript")
    message_count: Count = Field(description="every message the session had, the transcript too")


class AgentOpsObservationCreated(Open):
    id: ObservationId
    action: Literal["created", "updated", "deduplicated"] = Field(
        description="updated: same topic key (revision_count + 1); deduplicated: same content "
        "within the window (duplicate_count + 1)"
    )
    revision_count: Count
    duplicate_count: Count


class AgentOpsObservation(Open):
    id: ObservationId
    session_id: str
    type: str
    title: str
    content: str
    tags: list[str] | None = Field(None, description="absent when none")
    project: str
    scope: str
    topic_key: str | None = None
    normalized_hash: Hex64
    revision_count: Count
    duplicate_count: Count
    last_seen_at: Time
    created_at: Time
    updated_at: Time


class AgentOpsSearchResult(Open):
    id: ObservationId
    type: str
    title: str
    content: str
    rank: float = Field(description="lower is better: -1000 for a topic key match, else -BM25")
    topic_key: str | None = None


class AgentOpsContextSession(Open):
    summary: str


class AgentOpsContextObservation(Open):
    type: str
    title: str
    content: str = Field(description=f"cut at {agentops.CONTEXT_CHARS} characters + '...'")


class AgentOpsContext(Open):
    recent_sessions: list[AgentOpsContextSession] = Field(
        description=f"the summaries of up to {agentops.CONTEXT_SESSIONS} ended sessions"
    )
    recent_observations: list[AgentOpsContextObservation]


class AgentOpsTimelineEntry(Open):
    id: ObservationId
    type: str
    title: str
    content: str
    created_at: Time


class AgentOpsStats(Open):
    total_sessions: Count
    total_observations: Count
    projects: list[str]


class AgentOpsExport(Open):
    exported_at: Time
    sessions: list[AgentOpsSession] = Field(description="oldest first")
    observations: list[AgentOpsObservation]


class AgentOpsImported(Open):
    imported_sessions: Count
    imported_observations: Count


class AgentOpsHealth(Open):
    status: Literal["ok"]


# ---- the replies every operation shares ------------------------------------------------------

GUARDED = AgentOpsError | ErrorReply  # the handler's refusal, or a guard's before it


def replies(ok: dict, appends: bool = False) -> dict:
    """`ok` and the refusals, in the service's shape where the handler answers them. A call
    that `appends` (a write, or a read leaving its `items.read` record) can also be refused
    for the write."""
    out = {
        **ok,
        403: Reply(GUARDED, "forbidden: a token without the scope, or a foreign Origin"),
        # a guard's, before the handler: any body not sent as JSON, on any method
        415: Reply(ErrorReply, "unsupported_media_type: a body must be JSON (application/json)"),
        "4XX": Reply(AgentOpsError, "refused: nothing was appended"),
    }
    if appends:  # 503 also from a store with no leader to forward to
        out[503] = Reply(GUARDED, "not taking writes now: retry", headers=(RETRY_AFTER,))
        out[507] = Reply(AgentOpsError, "disk_full or file_too_large: the write was not made")
    return out
