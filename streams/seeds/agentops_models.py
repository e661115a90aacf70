"""The models of AgentOps' memory contract (streams/seeds/agentops_api.py, docs/agentops.md): what
/openapi.json says of it, and what parses its bodies and queries. The limits are the service's
(`sections/adapters/agentops.py`, its server.go), and so are the words of a refusal (`refusal`).

Three things differ from the rest of the API, because the service does them so:
- its bodies ignore unknown fields (Go's decoder), so they are `Lenient`, not `Strict`; only the
  PATCH body, which has four fields, refuses others. Its queries ignore unknown parameters, and
  a count that is no count is the default (`Limit`, the service's queryInt);
- its refusals are `{"error": "message"}` (`AgentOpsError`), in its words. A guard before the
  handler (a foreign Origin, an unknown Host, a body not sent as JSON) or a store with no leader
  answers in ledgermem's own shape, `ErrorReply`;
- a project and scope are any strings the service takes: our holder session's id encodes them
  (sections/adapters/agentops.py `holder`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError, PydanticUseDefault

from sections.adapters import agentops
from sections.retrieval.observations import TYPE_MAX, TYPES
from streams.apidoc import Reply
from streams.apidoc.models import (
    NOT_BLANK,
    WHOLE,
    Count,
    ErrorReply,
    Hex64,
    Identifier,
    Json,
    Open,
    Strict,
)
from streams.apidoc.operation import RETRY_AFTER
from streams.web.errors import Problem, problems, should


def _service_count(value: object) -> object:
    """A count as the service's queryInt reads it (Python's int() of ASCII text here): one that
    is not a positive integer is the field's default, one over MAX_LIMIT is MAX_LIMIT."""
    if not isinstance(value, str):
        return value
    try:
        number = int(value) if value.isascii() else 0
    except ValueError:
        number = 0
    if number <= 0:  # 0 too: the handlers took `or default` of it
        raise PydanticUseDefault()
    return min(number, agentops.MAX_LIMIT)


Time = Annotated[str, Field(json_schema_extra={"format": "date-time"})]
if TYPE_CHECKING:  # what a handler is given: the count, read (the service's text or its default)
    Limit = int
else:
    Limit = Annotated[
        int | str,
        Field(
            description=f"how many; more than {agentops.MAX_LIMIT} is {agentops.MAX_LIMIT}, and "
            "a value that is not a positive integer is the default (the service's queryInt)"
        ),
        BeforeValidator(_service_count),
    ]
ObservationId = Annotated[
    int,
    Field(
        ge=0, le=10**18 - 1, description="an observation id: the seq of the record that added it"
    ),
    WHOLE,
]
# Any type the service takes (its CRD lets users name any): non-blank, at most 50 characters;
# the memory's TYPES, AgentOps' own, are the suggested ones.
ObservationType = Annotated[
    str,
    Field(
        max_length=TYPE_MAX,
        pattern=NOT_BLANK,
        description=f"any non-blank type; suggested: {', '.join(TYPES)}",
        examples=list(TYPES),
    ),
]


class Lenient(BaseModel):
    """A body whose unknown fields are ignored, as the service's Go decoder ignores them; they
    are still parsed, so they are JSON the log takes. Its own fields are strict: a number is no
    string (Go's decoder refuses it too)."""

    model_config = ConfigDict(extra="allow", strict=True)
    __pydantic_extra__: dict[str, Json]


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
    # Any project and scope the service takes: our holder session's id encodes them
    # (sections/adapters/agentops.py `holder`).
    project: Annotated[str, Field(max_length=agentops.MAX_PROJECT, pattern=NOT_BLANK)] = Field(
        description="kept lowercased"
    )
    scope: Annotated[str, Field(max_length=agentops.MAX_SCOPE)] | None = Field(
        None, description=f'default (also when empty) "{agentops.DEFAULT_SCOPE}"'
    )
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

    @model_validator(mode="after")
    def _one_or_more(self) -> Self:
        if all(getattr(self, name) is None for name in _CHANGES):
            raise PydanticCustomError(
                "empty_change", "nothing to update: give type, title, content or tags"
            )
        return self


class AgentOpsImport(Lenient):
    sessions: list[Json] | None = Field(
        None,
        description="sessions as /export gives them ({id, project}); an entry this import "
        "cannot take is skipped and not counted",
    )
    observations: list[Json] | None = Field(
        None,
        description="observations as POST /observations takes them; an entry this import "
        "cannot take is skipped and not counted",
    )


# ---- queries --------------------------------------------------------------------------------

Project = Annotated[str, Field(description="one project's (lowercased); every project's if empty")]
Scope = Annotated[str, Field(description="one scope's; every scope's if empty")]


class _ServiceQuery(Strict):
    model_config = ConfigDict(extra="ignore", strict=True)  # unknown parameters: ignored


class AgentOpsProjectQuery(_ServiceQuery):
    project: Project = ""


class AgentOpsRecentSessionsQuery(_ServiceQuery):
    project: Project = ""
    limit: Limit = 5


class AgentOpsRecentObservationsQuery(_ServiceQuery):
    project: Project = ""
    type: Annotated[str, Field(description="one type's; every type's if empty")] = ""
    scope: Scope = ""
    limit: Limit = 20


class AgentOpsSearchQuery(_ServiceQuery):
    q: Annotated[str, Field(description="the words (a blank query finds nothing); one holding "
                                        "'/' first matches topic keys")] = ""  # fmt: skip
    project: Project = ""
    type: Annotated[str, Field(description="one type's; every type's if empty")] = ""
    scope: Scope = ""
    limit: Limit = 10


class AgentOpsContextQuery(_ServiceQuery):
    project: Project = ""
    query: Annotated[str, Field(description="ranks the observations (BM25)")] = ""
    scope: Scope = ""
    limit: Limit = 5


class AgentOpsTimelineQuery(_ServiceQuery):
    observation_id: Annotated[int, Field(ge=1, le=10**18 - 1), WHOLE] = Field(
        description="the observation the timeline is around"
    )
    before: Limit = 3
    after: Limit = 3


class AgentOpsDeleteQuery(_ServiceQuery):
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


# ---- a refusal in the service's words ---------------------------------------------------------


def refusal(error: ValidationError, model: type[BaseModel], prefix: str = "") -> str:
    """What the service answers a body or query its model refused (server.go's words): each
    field's problem, after `prefix` ("validation failed: " for the bodies that create), or the
    whole body's own refusal (a holder it cannot name, an empty change) alone."""
    found = problems(error)
    if not found[0].path:
        return found[0].message
    return prefix + "; ".join(_said(p, model) for p in found)


def _said(problem: Problem, model: type[BaseModel]) -> str:
    name, kind, context = str(problem.path[0]), problem.kind, problem.context
    if issubclass(model, _ServiceQuery):
        return f"{name} required"  # its one required parameter: the timeline's observation_id
    if len(problem.path) > 1 and isinstance(problem.path[1], int):  # an entry of a list
        if kind == "string_too_long":
            return f"{name.removesuffix('s')} exceeds {context['max_length']} chars"
        if kind == "string_type":
            return f"{name} must be a list of strings"
        return f"{problem.field} {should(problem)}"
    blank = not isinstance(problem.given, str) or not problem.given.strip()
    required = model.model_fields[name].is_required() if name in model.model_fields else False
    if kind == "missing" or kind == "blank":
        return f"{name} is required"
    if kind in ("string_type", "string_pattern_mismatch", "string_too_short", "literal_error"):
        if required and blank:
            return f"{name} is required"
        if kind == "string_type":
            return f"{name} must be a string"
    if kind == "string_too_long":
        return f"{name} exceeds {context['max_length']} chars"
    if kind == "too_long":
        return f"{name} exceed {context['max_length']} items"
    if kind == "extra_forbidden":
        return f"unknown field {name!r}: give {', '.join(model.model_fields)}"
    return f"{problem.field} {should(problem)}"
