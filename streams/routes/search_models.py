"""What search, observations and summaries take and answer over HTTP (streams/routes/search_api.py):
the models that document their queries and bodies parse them.

The memory core judges the values (sections/specs/command_specs.py `search_query`,
sections/retrieval/observations.py `Observation.of`); these models say the same to a client.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Self

from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from sections.retrieval.observations import TITLE_MAX, TYPE_MAX, TYPES
from sections.retrieval.views import MAX_TOP_K
from streams.apidoc.models import (
    NOT_BLANK,
    WHOLE,
    Absent,
    Count,
    Identifier,
    Open,
    Reader,
    Strict,
    Time,
    absent,
)
from streams.routes.item_models import ItemView

Text = Annotated[str, Field(pattern=NOT_BLANK)]
READER: Any = Field(
    "agent", description="who reads: `agent` reads count for eviction, `operator` ones do not"
)


# ---- search --------------------------------------------------------------------------------


class SessionSearchQuery(Strict):
    """A session's search: its items and the tenant's observations."""

    q: Text = Field(description="the words searched for (BM25, any of them)")
    section: list[str] = Field(default_factory=list, description="only these sections; may repeat")
    tag: list[str] = Field(default_factory=list, description="items with every one of these tags")
    since: Time | Absent = absent("the item's time >= this (µs or ISO-8601)")
    until: Time | Absent = absent("the item's time < this (µs or ISO-8601)")
    top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K), WHOLE] = Field(
        10, description="at most this many"
    )
    reader: Reader = READER
    scope: Literal["session", "user", "tenant"] | Absent = absent(
        "rank as recall does (docs/recall.md) over the session, its user's sessions (their "
        "`user_id`), or the tenant; hits then carry `signals` and `time`"
    )


UserId = Annotated[str, Field(min_length=1)]


class SearchQuery(SessionSearchQuery):
    session: list[str] = Field(default_factory=list, description="only these sessions; may repeat")
    scope: Literal["tenant"] | Absent = absent(
        "rank as recall does (docs/recall.md) over the tenant (or the `session`s named); hits "
        "then carry `signals` and `time`. A user's or a session's scope: its session's search"
    )
    user: UserId | None = Field(
        None,
        description="search as this user: other users' sessions (metadata user_id) and "
        "tenant-wide observations are left out",
    )


class SearchHit(Open):
    session: str
    score: float = Field(description="BM25, or recall's score with a scope: higher is better")
    snippet: str = Field(description="the matched words between [ and ]")
    item: ItemView = Field(description="the item a hit found, as it is now")
    signals: dict[str, float] | Absent = absent(
        "with a scope: what makes up the score (bm25, neighbours, session, semantic)"
    )
    time: str | None | Absent = absent("with a scope: when the hit's session took place")


class SearchHits(Open):
    hits: list[SearchHit] = Field(description="best first")


# ---- observations --------------------------------------------------------------------------

ObservationType = Annotated[
    str,
    Field(
        max_length=TYPE_MAX,
        pattern=NOT_BLANK,
        description=f"any non-blank type of at most {TYPE_MAX} characters; suggested: "
        + ", ".join(TYPES),
        examples=list(TYPES),
    ),
]


class _Observation(Strict):
    type: ObservationType
    title: Annotated[Text, Field(max_length=TITLE_MAX)]
    content: Text
    tags: list[str] = Field(default_factory=list)
    topic_key: Annotated[str, Field(min_length=1)] | None = Field(
        None, description="one observation per topic: a new one revises it"
    )


class SessionObservationRequest(_Observation):
    scope: Literal["user", "tenant", "session"] | None = Field(
        None,
        description="for this session's user (its metadata user_id), tenant-wide, or in this "
        "session's own section; default `user` when the session has a user, else `tenant`",
    )


# A user's observation is tenant-wide: `session` and `user` are not given together.
_SESSION_OR_USER: dict[str, Any] = {
    "not": {
        "required": ["session", "user"],
        "properties": {"session": {"type": "string"}, "user": {"type": "string"}},
    }
}


class ObservationRequest(_Observation):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_SESSION_OR_USER)

    session: Identifier | None = Field(
        None, description="in this session's own section; tenant-wide if absent"
    )
    user: UserId | None = Field(
        None, description="tenant-wide for this user only: the sessions with its user_id see it"
    )

    @model_validator(mode="after")
    def _session_or_user(self) -> Self:
        if self.session is not None and self.user is not None:
            raise PydanticCustomError(
                "session_or_user", "a user's observation is tenant-wide: give session or user"
            )
        return self


class ObservationOutcome(Open):
    id: str = Field(description="the observation's item id")
    session: str = Field(description="the session holding it (`_tenant` for tenant-wide ones)")
    tier: Literal["inserted", "revised", "duplicate"]
    revision: Count
    duplicates: Count


# ---- summaries -----------------------------------------------------------------------------


class SummariesQuery(Strict):
    model_config = ConfigDict(extra="ignore", strict=True)  # other parameters: ignored, as ever

    limit: Annotated[int, Field(ge=1, le=1000), WHOLE] = Field(
        10, description="the newest this many"
    )
    reader: Reader = READER


class SummaryQuery(Strict):
    model_config = ConfigDict(extra="ignore", strict=True)

    reader: Reader = READER


class SummaryQuote(Open):
    id: str = Field(description="the message's item id")
    text: str | None = Field(description="its text, truncated; null once erased")


class SessionSummary(Open):
    """What the memory wrote of a session when it ended (sections/retrieval/summaries.py)."""

    session: str
    seq: Count = Field(description="the session.summarized record")
    ended_seq: Count | None
    messages: Count
    first_user: SummaryQuote | None
    last_user: SummaryQuote | None
    sections: list[str] = Field(description="the sections the session wrote")


class SessionSummaries(Open):
    summaries: list[SessionSummary] = Field(description="newest first")
