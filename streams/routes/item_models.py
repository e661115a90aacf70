"""The item operations' models (streams/routes/api.py): what /openapi.json says of the item reads and
writes, the section settings and the If-Match / ETag of a write.

They describe; the memory core judges (docs/openapi.md): each constraint here restates a check of
sections/ (commands.py `_fields`, config.py `SectionConfig`, item_filter.py, eventstore/jcs.py),
so that what the document allows the server takes, and what it forbids the server refuses.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from eventstore.jcs import MAX_SAFE_INTEGER
from sections.model.config import LIFETIMES, POLICIES
from sections.model.item_filter import MAX_PAGE
from streams.apidoc.models import (
    Count,
    Hex64,
    JsonObject,
    JsonValue,
    Open,
    Record,
    SafeInt,
    SafeNumber,
    Strict,
    Time,
)
from streams.server.settings import Settings

ItemId = Annotated[
    str,
    Field(
        pattern=r"^[0-9]+(\.[0-9]+)?$",
        description="an item's id: the seq of the record that added it, then .k for the k-th "
        "item of a batch (k > 0)",
    ),
]
ITEM_PATH = {"item": (ItemId, "the item's id")}
# sections/model/config.py SectionConfig: a section's name is an identifier not starting with "_".
SECTION_NAME = r"^[A-Za-z0-9.:@/+-][A-Za-z0-9._:@/+-]{0,127}$"
SectionName = Annotated[str, Field(pattern=SECTION_NAME)]
SECTION_PATH = {"section": (SectionName, "the section's name: an identifier not starting with _")}
# The service's default; a service may set another (413 batch_too_large beyond it).
MAX_BATCH = Settings.max_batch_items


def _absent_unless_given(schema: dict[str, Any]) -> None:
    """Leave out `default: null` of an optional field: absent means "not given", and a null
    there is refused where the field's type has no null (a generator would send it)."""
    for field in schema.get("properties", {}).values():
        if "default" in field and field["default"] is None:
            del field["default"]


def _at_least_one(schema: dict[str, Any]) -> None:
    _absent_unless_given(schema)
    schema["minProperties"] = 1  # the core refuses an empty change


class _Fields(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_absent_unless_given)


class _Changes(Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_at_least_one)


# -- bodies


class ItemToolCall(Open):
    """One tool call of an assistant message, as an OpenAI-style API writes it."""

    id: str
    __pydantic_extra__: dict[str, JsonValue]  # type: ignore[assignment]


class ItemToAdd(_Fields):
    """One item (sections/model/commands.py `_fields`)."""

    content: JsonValue = Field(description="the item's content: a string or any JSON")
    kind: str | None = Field(
        None,
        description="its event type (user_message, agent_response, tool_call, tool_result, "
        "delegation_request, delegation_response, error, or any name)",
    )
    role: str | None = Field(None, description="user, assistant, tool, system, ...")
    tags: list[str] = Field(None, description="labels search can filter on")
    priority: SafeNumber = Field(None, description="what the priority policy evicts last (0)")
    metadata: dict[str, JsonValue] = Field(None, description="any JSON object")
    group: str | None = Field(None, description="items evicted together (a tool call and result)")
    name: str | None = None
    tool_calls: list[ItemToolCall] | None = None
    tool_call_id: str | None = None
    images: list[JsonValue] | None = None
    reasoning_details: JsonValue = None
    agent_calls: list[JsonValue] | None = None


class ItemBatchToAdd(_Fields):
    """Many items in one record: all are added or none."""

    items: list[ItemToAdd] = Field(
        min_length=1, max_length=MAX_BATCH, description="at most max_batch_items (1000) of them"
    )


class ItemUpdate(_Changes):
    """The fields an update sets (sections/model/commands.py UPDATABLE); the others stay."""

    content: JsonValue = None
    tags: list[str] = None  # type: ignore[assignment]
    priority: SafeNumber = None  # type: ignore[assignment]
    metadata: dict[str, JsonValue] = None  # type: ignore[assignment]
    kind: str | None = None
    role: str | None = None


Positive = Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER)]


class SectionSettingsChange(_Changes):
    """The settings a session changes of one section (sections/model/config.py SETTINGS), or those of
    a section it adds. The core also refuses some combinations: policy "none" of a mutable
    section with a budget or max_items; compact_at_tokens over budget_tokens."""

    budget_tokens: Positive | None = Field(None, description="null: unbounded")
    policy: Literal[POLICIES] = None  # type: ignore[valid-type]
    lifetime: Literal[LIFETIMES] = None  # type: ignore[valid-type]
    mutable: bool = None  # type: ignore[assignment]
    searchable: bool = None  # type: ignore[assignment]
    audit_reads: Literal[True] = Field(None, description="every read is traced: only true")
    compact_at_tokens: Positive | None = Field(None, description="compact above this many tokens")
    compact_keep_turns: Positive = None  # type: ignore[assignment]
    compact_tool_chars: Positive = None  # type: ignore[assignment]
    max_items: Positive | None = Field(None, description="null: no bound")


# -- queries

Names = Annotated[list[str], Field(description="may repeat: any of them")]
Page = Annotated[int, Field(ge=0, le=MAX_PAGE)]


class ItemReadQuery(_Fields):
    reader: Literal["agent", "operator"] = Field(
        None, description="who reads: an operator's read counts for no eviction policy (agent)"
    )


class _ReadQuery(ItemReadQuery):
    """sections/model/item_filter.py: types and roles, then the time range, the newest N, a page."""

    role: Names = None  # type: ignore[assignment]
    since: Time = Field(None, description="content set at or after (µs or ISO-8601)")
    until: Time = Field(None, description="content set before (µs or ISO-8601)")
    recent: Page = Field(None, description="the newest N of those")
    offset: Page = Field(None, description="skip this many (0)")
    limit: Page = Field(None, description="return at most this many")


class ItemsQuery(_ReadQuery):
    id: list[Annotated[str, Field(min_length=1)]] = Field(
        None, description="these items only (may repeat)"
    )
    kind: Names = None  # type: ignore[assignment]


class EventsQuery(_ReadQuery):
    type: Names = Field(
        None,
        description="event types (user_message, agent_response, tool_call, tool_result, "
        "error, ...); may repeat",
    )


# -- answers


class ItemView(Open):
    """An item as reads give it (sections/retrieval/views.py `ItemView.to_json`)."""

    id: ItemId
    section: str
    content: Any = Field(description="a string or any JSON, as it was written")
    tokens: Count
    kind: str | None
    role: str | None
    tags: list[str]
    priority: float
    metadata: JsonObject
    group: str | None
    seq: Count = Field(description="the record that added it")
    h: Hex64 = Field(description="that record's hash")
    ts: SafeInt = Field(description="when its content was set, µs since the epoch")
    name: str | None = None
    tool_calls: list[JsonObject] | None = None
    tool_call_id: str | None = None
    images: list[Any] | None = None
    reasoning_details: Any = None
    agent_calls: list[Any] | None = None


class ItemEvent(ItemView):
    """An item of the session's timeline, with its event type."""

    type: str = Field(
        description="its kind, else what its role implies (sections/model/item_filter.py)"
    )


class ItemList(Open):
    items: list[ItemView]


class ItemEventList(Open):
    events: list[ItemEvent] = Field(description="in the order they were written")


class ItemAdded(Open):
    """One item added: its record and the item."""

    record: Record
    item: ItemView


class ItemsAdded(Open):
    """A batch added: its one record and the items, in order."""

    record: Record
    items: list[ItemView]
