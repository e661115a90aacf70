"""The item operations' models (streams/routes/items_api.py): what /openapi.json says of the item
reads and writes and the section settings, and what parses them.

A handler is given its body and query parsed by these models; the memory core then judges what
they mean (sections/ commands.py `_fields`, config.py `SectionConfig`, item_filter.py): a
budget, a policy, a section that exists. What the document allows reaches the core, and what it
forbids is refused here, naming the field (streams/web/errors.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from eventstore.jcs import MAX_SAFE_INTEGER
from sections.model.config import LIFETIMES, POLICIES
from sections.model.item_filter import MAX_PAGE
from streams.apidoc.models import (
    WHOLE,
    Count,
    Hex64,
    Json,
    JsonObject,
    Number,
    Open,
    Reader,
    Record,
    SafeInt,
    Strict,
    Time,
    absent,
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
if TYPE_CHECKING:  # a Literal of a constant tuple is beyond mypy: to the checker, a string
    Policy = str
    Lifetime = str
else:
    Policy, Lifetime = Literal[POLICIES], Literal[LIFETIMES]


def _absent_unless_given(schema: dict[str, Any]) -> None:
    """Leave out `default: null` of an optional field: absent means "not given", and a null
    there is refused where the field's type has no null (a generator would send it)."""
    for field in schema.get("properties", {}).values():
        if "default" in field and field["default"] is None:
            del field["default"]


def _at_least_one(schema: dict[str, Any]) -> None:
    _absent_unless_given(schema)
    schema["minProperties"] = 1


class _Fields(Strict):
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_absent_unless_given)


class _Changes(Strict):
    """A change: one field or more (`minProperties: 1`), the others left as they are."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_at_least_one)

    @model_validator(mode="after")
    def _one_or_more(self) -> Self:
        if not self.model_fields_set:
            names = ", ".join(type(self).model_fields)
            raise PydanticCustomError(
                "empty_change", "give one or more of {names}", {"names": names}
            )
        return self

    def changes(self) -> dict[str, Any]:
        """The fields given, as the memory core takes them."""
        return {name: getattr(self, name) for name in self.model_fields_set}


# -- bodies


class ItemToolCall(Open):
    """One tool call of an assistant message, as an OpenAI-style API writes it."""

    id: str
    __pydantic_extra__: dict[str, Json]


class ItemToAdd(_Fields):
    """One item (sections/model/commands.py `_fields`)."""

    content: Json = Field(description="the item's content: a string or any JSON")
    kind: str | None = Field(
        None,
        description="its event type (user_message, agent_response, tool_call, tool_result, "
        "delegation_request, delegation_response, error, or any name)",
    )
    role: str | None = Field(None, description="user, assistant, tool, system, ...")
    tags: list[str] = absent("labels search can filter on")
    priority: Number = absent("what the priority policy evicts last (0)")
    metadata: dict[str, Json] = absent("any JSON object")
    group: str | None = Field(None, description="items evicted together (a tool call and result)")
    name: str | None = None
    tool_calls: list[ItemToolCall] | None = None
    tool_call_id: str | None = None
    images: list[Json] | None = None
    reasoning_details: Json = None
    agent_calls: list[Json] | None = None
    structured_data: dict[str, Json] | None = Field(
        None, description="what an agent returned as an object beside its text (MARSYS)"
    )


class ItemBatchToAdd(_Fields):
    """Many items in one record: all are added or none."""

    # At most the service's max_batch_items, 1000 unless it sets another: its handler refuses
    # more (413 batch_too_large) before any item is parsed.
    items: list[ItemToAdd] = Field(
        min_length=1,
        json_schema_extra={"maxItems": MAX_BATCH},
        description="at most max_batch_items (1000) of them",
    )


class ItemUpdate(_Changes):
    """The fields an update sets (sections/model/commands.py UPDATABLE); the others stay."""

    content: Json = None
    tags: list[str] = absent()
    priority: Number = absent()
    metadata: dict[str, Json] = absent()
    kind: str | None = None
    role: str | None = None


Positive = Annotated[int, Field(ge=1, le=MAX_SAFE_INTEGER), WHOLE]


class SectionSettingsChange(_Changes):
    """The settings a session changes of one section (sections/model/config.py SETTINGS), or those of
    a section it adds. The core also refuses some combinations: policy "none" of a mutable
    section with a budget or max_items; compact_at_tokens over budget_tokens."""

    budget_tokens: Positive | None = Field(None, description="null: unbounded")
    policy: Policy = absent()
    lifetime: Lifetime = absent()
    mutable: bool = absent()
    searchable: bool = absent()
    audit_reads: Literal[True] = absent("every read is traced: only true")
    compact_at_tokens: Positive | None = Field(None, description="compact above this many tokens")
    compact_keep_turns: Positive = absent()
    compact_tool_chars: Positive = absent()
    max_items: Positive | None = Field(None, description="null: no bound")


# -- queries

Names = Annotated[list[str], Field(description="may repeat: any of them")]
Page = Annotated[int, Field(ge=0, le=MAX_PAGE), WHOLE]


class ItemReadQuery(_Fields):
    # Its other parameters are ignored, as they always were (a filter is the reads' below).
    model_config = ConfigDict(extra="ignore", strict=True, json_schema_extra=_absent_unless_given)

    reader: Reader = absent("who reads: an operator's read counts for no eviction policy (agent)")


class _ReadQuery(ItemReadQuery):
    """sections/model/item_filter.py: types and roles, then the time range, the newest N, a page.
    A parameter it does not take is refused: a misspelt filter must not widen the read."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_absent_unless_given)

    role: Names = absent()
    since: Time = absent("content set at or after (µs or ISO-8601)")
    until: Time = absent("content set before (µs or ISO-8601)")
    recent: Page = absent("the newest N of those")
    offset: Page = absent("skip this many (0)")
    limit: Page = absent("return at most this many")


class ItemsQuery(_ReadQuery):
    id: list[Annotated[str, Field(min_length=1)]] = absent("these items only (may repeat)")
    kind: Names = absent()


class EventsQuery(_ReadQuery):
    type: Names = absent(
        "event types (user_message, agent_response, tool_call, tool_result, error, ...); may repeat"
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
    structured_data: JsonObject | None = None


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
