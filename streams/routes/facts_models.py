"""What the facts routes take and answer (streams/routes/facts_api.py, docs/facts.md).

The models that document the bodies and queries parse them; the memory core judges the values
(sections/retrieval/facts.py `NewFact.of`, `retract`, `FactQuery.of`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from sections.retrieval.facts import FIELD_CHARS, MAX_FACTS, MAX_SOURCES
from streams.apidoc.models import (
    NOT_BLANK,
    WHOLE,
    Absent,
    Count,
    JsonObject,
    JsonValueObject,
    Open,
    Reader,
    RecordReply,
    SafeInt,
    Strict,
    Time,
    absent,
)

# A subject, predicate or object: not empty nor only whitespace (`pattern` is a search).
FactText = Annotated[str, Field(pattern=NOT_BLANK, max_length=FIELD_CHARS)]
# A time in a body: an integer of µs; the core takes ±2**62, a record only ±(2**53-1).
FactMicros = Annotated[SafeInt, Field(description="µs since the epoch")]


class FactSource(Strict):
    """An item a fact was learned from: a live item of the tenant."""

    session: str
    id: str


class _FactFields(Strict):
    subject: FactText
    predicate: FactText
    object: FactText
    valid_from: FactMicros | None = Field(None, description="when it starts to hold; default now")
    metadata: JsonValueObject | None = None
    multi: bool = Field(
        False, description="a multi-valued predicate: it closes only the facts of the same object"
    )


class NewFactRequest(_FactFields):
    """A fact: it closes the facts of the same subject and predicate valid at its start."""

    sources: Annotated[list[FactSource], Field(max_length=MAX_SOURCES)] | None = Field(
        None, description="the items it was learned from (live items of the tenant)"
    )


class NewFactsRequest(Strict):
    """Several facts in one record, in order (a later one may close an earlier one)."""

    facts: Annotated[list[NewFactRequest], Field(min_length=1, max_length=MAX_FACTS)]


class SessionFactRequest(_FactFields):
    """A fact asserted in a session: a source may be one of its item ids."""

    sources: Annotated[list[str | FactSource], Field(max_length=MAX_SOURCES)] | None = Field(
        None, description="the items it was learned from: this session's item ids, or {session, id}"
    )


class SessionFactsRequest(Strict):
    facts: Annotated[list[SessionFactRequest], Field(min_length=1, max_length=MAX_FACTS)]


class FactRetraction(Open):
    at: SafeInt
    reason: str | None


class Fact(Open):
    """A fact as the memory keeps it (sections/retrieval/facts.py); `invalid_at` null: still valid."""

    id: str
    subject: str
    predicate: str
    object: str
    valid_at: SafeInt = Field(description="µs since the epoch")
    invalid_at: SafeInt | None = Field(description="when it stopped holding; null: it holds")
    sources: list[FactSource]
    multi: bool
    metadata: JsonObject
    retracted: FactRetraction | None
    seq: Count = Field(description="the record that asserted it")
    ts: SafeInt = Field(description="when it was recorded, µs since the epoch")
    session: str | None = Field(description="the session it was asserted in; null: tenant-wide")


class FactAsserted(RecordReply):
    fact: Fact


class FactsAsserted(RecordReply):
    facts: list[Fact] = Field(description="in the order given")


class FactRetracted(RecordReply):
    fact: Fact = Field(description="the fact as it now is")


class RetractRequest(Strict):
    at: FactMicros | None = Field(None, description="when it stops holding; default now")
    reason: Annotated[str, Field(max_length=FIELD_CHARS)] | None = None


class FactsQuery(Strict):
    subject: str | Absent = absent("exact subject")
    predicate: str | Absent = absent("exact predicate")
    object: str | Absent = absent("exact object")
    reader: Reader = Field("agent", description="who reads")


# `as_of` and `history=1` exclude each other, which separate parameters cannot say: the two are
# one form-exploded object parameter (each property its own query parameter) of either shape.
class FactsAsOf(Strict):
    """The facts valid at a time."""

    as_of: Time = Field(description="µs since the epoch, or an ISO-8601 time")
    history: Annotated[Literal[0], WHOLE] = 0


class FactsHistory(Strict):
    """The facts valid now (history=0), or every one, valid or not (history=1)."""

    history: Annotated[Literal[0, 1], WHOLE] = 0


FACTS_WHEN = (
    "when",
    FactsAsOf | FactsHistory,
    "which facts: those valid `as_of` a time, valid now, or every one (`history=1`); `as_of` "
    "and `history=1` exclude each other",
)


class FactList(Open):
    facts: list[Fact] = Field(description="by start")
