"""Commands, pure: from the state and the caller's arguments to the one record a command appends.

Each function checks everything first and raises a typed error when the command is refused, so a
refused command appends nothing. The `Memory` glue appends the returned record and applies it with
the projection; the decision (victims, cleared items, token counts) travels in the record, and
what the caller gets besides it travels in a `Decision` (sections/specs/command_specs.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eventstore.errors import InvalidInput
from eventstore.identifiers import check_identifier
from eventstore.record import Record
from sections.errors import (
    BudgetExceeded,
    ImmutableSection,
    ItemNotFound,
    SectionNotFound,
    SessionEnded,
    SessionExists,
    SessionNotFound,
    VersionConflict,
)
from sections.model import compaction, render
from sections.model.config import SETTINGS, MemoryConfig, SectionConfig, refuse_untraced
from sections.model.item import Item
from sections.model.names import SESSION_SECTION
from sections.model.policies import choose_evictions
from sections.model.state import MemoryState, SectionState, SessionState
from sections.model.tokens import TokenCounter, count_input
from sections.model.tool_calls import default_group

READERS = ("agent", "operator")
UPDATABLE = frozenset(("content", "tags", "priority", "metadata", "kind", "role"))


@dataclass(frozen=True)
class Command:
    """The record a command appends."""

    tenant: str
    session: str
    section: str
    type: str
    payload: dict


@dataclass(slots=True)
class Decision:
    """What deciding a command under the lock produced: the records to append (none, one, or
    several appended together with consecutive seqs) and what the caller gets besides them (the
    views a read took, the messages a context assembled, ...). With no record, `durable_at` is
    the seq the result reflects: the caller is answered once the log is durable up to it."""

    records: tuple[Command, ...] | list[Command]
    result: Any = None  # each command's own: its spec's result step knows what it is
    durable_at: int | None = None


def get_session(state: MemoryState, tenant: str, session: str | None) -> SessionState:
    """The live session; SessionNotFound otherwise (a tenant's command names none: None)."""
    found = state.sessions.get((tenant, session)) if session is not None else None
    if found is None:
        raise SessionNotFound(f"session {session!r} not found")
    return found


def get_section(session: SessionState, name: str) -> SectionState:
    section = session.sections.get(name)
    if section is None:
        raise SectionNotFound(
            f"session {session.id!r} has no section {name!r}; it has {', '.join(session.sections)}"
        )
    return section


def check_version(session: SessionState, expected: int | None) -> None:
    if expected is not None and expected != session.version:
        raise VersionConflict(session.id, expected, session.version)


def payload(record: Record) -> dict:
    """The payload of a record this memory appended, not erased: the JSON object its command
    made (`Record.payload` is typed for any log, whose payloads may be any JSON)."""
    found = record.payload
    if not isinstance(found, dict):
        raise TypeError(f"record {record.seq} holds no payload object (erased?)")
    return found


def base_payload(session: SessionState, idem: str | None) -> dict:
    payload: dict = {"prev_seq": session.last_seq}
    if idem is not None:
        payload["idem"] = idem
    return payload


def check_open(session: SessionState) -> None:
    """Refuse a write to an ended session. Only the memory's own record-keeping (the summary,
    restart clears), reads, erasure and deletion go on after `session.ended`."""
    if session.ended_seq is not None:
        raise SessionEnded(
            f"session {session.id!r} ended at seq {session.ended_seq}: it takes no more writes; "
            "start a new session (reads, erasure and deletion still work)"
        )


def check_writable(section: SectionState, session: SessionState) -> None:
    if not section.config.mutable:
        raise ImmutableSection(
            f"section {section.config.name!r} is immutable: loaded from config at seq "
            f"{session.created_seq}; writes are refused"
        )


# ---- sessions ---------------------------------------------------------------------------------


def create_session(
    state: MemoryState,
    tenant: str,
    session: str,
    config: MemoryConfig,
    counter: TokenCounter,
    metadata: dict | None = None,
    idem: str | None = None,
) -> Command:
    check_identifier("tenant", tenant)
    check_identifier("session", session)
    if (tenant, session) in state.sessions:
        raise SessionExists(f"session {session!r} already exists")
    if metadata is not None and type(metadata) is not dict:
        raise InvalidInput("metadata must be an object")
    payload: dict[str, Any] = {
        "prev_seq": None,
        "metadata": metadata or {},
        "config": {s.name: s.to_json() for s in config.sections},
        "order": [s.name for s in config.sections],
        "counter": {"name": counter.name, "version": counter.version},
        "seed": seed_payload(config, counter),
    }
    if idem is not None:  # a session made by POST /v1/sessions with an Idempotency-Key
        payload["idem"] = idem
    return Command(tenant, session, SESSION_SECTION, "session.created", payload)


def seed_payload(config: MemoryConfig, counter: TokenCounter) -> dict[str, list[dict]]:
    """The seed items of each section in record form, grouped as one `add_many` would group
    them. Seeds are admitted whole or the session is not created: they may not exceed their
    section's budget, since evicting part of what the caller gave as the session's start would
    lose it silently."""
    seed: dict[str, list[dict]] = {}
    by_name = {s.name: s for s in config.sections}
    for name, items in (config.seed_items or {}).items():
        section = by_name.get(name)
        if section is None:
            raise InvalidInput(f"items are given for section {name!r}, which is not configured")
        made: list[dict] = []
        for data in items:
            if type(data) is not dict:
                raise InvalidInput(f"section {name!r}: each seed item must be an object")
            made.append(_new_item(section, data, counter, None, made))
        tokens = sum(i["tokens"] for i in made)
        budget = section.budget_tokens
        if budget is not None and tokens > budget:
            raise BudgetExceeded(
                f"section {name!r}: its seed items take {tokens} tokens and its budget is "
                f"{budget}: give fewer or shorter items, or a larger budget_tokens"
            )
        seed[name] = made
    return seed


def configure_section(
    session: SessionState,
    name: str,
    settings: dict,
    idem: str | None = None,
    expected_version: int | None = None,
) -> Command:
    """Change (or add) one section's config for this session; a smaller budget evicts by policy."""
    check_version(session, expected_version)
    check_open(session)
    section = session.sections.get(name)
    if section is not None:
        check_writable(section, session)  # its config is part of what was loaded from config
    base = section.config.to_json() if section is not None else {}
    if "items" in settings:
        raise InvalidInput(
            f"section {name!r}: items are not a setting: seed them when the session is created "
            "(sections={name: {'items': [...]}}), or add them to a mutable section"
        )
    unknown = set(settings) - SETTINGS
    if unknown:
        raise InvalidInput(f"unknown section settings {sorted(unknown)}")
    refuse_untraced(name, settings)
    config = SectionConfig.from_json(name, {**base, **settings})
    payload = base_payload(session, idem)
    payload["config"] = config.to_json()
    if section is not None and (
        (config.budget_tokens is not None and section.tokens > config.budget_tokens)
        or (config.max_items is not None and len(section.items) > config.max_items)
    ):
        trial = SectionState(config, dict(section.items), section.tokens)
        payload["evicted"] = _evicted(choose_evictions(trial, 0))
    return Command(session.tenant, session.id, name, "section.configured", payload)


def end_session(
    session: SessionState, idem: str | None = None, expected_version: int | None = None
) -> Command:
    check_version(session, expected_version)
    check_open(session)  # a retry with the first call's key is answered before this
    return Command(
        session.tenant, session.id, SESSION_SECTION, "session.ended", base_payload(session, idem)
    )


def delete_session(
    session: SessionState, idem: str | None = None, expected_version: int | None = None
) -> Command:
    check_version(session, expected_version)
    return Command(
        session.tenant, session.id, SESSION_SECTION, "session.deleted", base_payload(session, idem)
    )


# ---- items ------------------------------------------------------------------------------------


# Fields kept in an item's `extra`: how a message was said rather than what it says. Every read
# returns them beside the content; context renders them as an OpenAI-style API expects.
EXTRA_FIELDS = (
    "name",
    "tool_calls",
    "tool_call_id",
    "images",
    "reasoning_details",
    "agent_calls",
    "structured_data",  # MARSYS's: what an agent returned as a dict beside its text
)
_ITEM_FIELDS = {"content", "kind", "role", "tags", "priority", "metadata", "group", *EXTRA_FIELDS}


def _new_item(
    config: SectionConfig,
    data: dict,
    counter: TokenCounter,
    existing: SectionState | None,
    batch: Sequence[dict] = (),
) -> dict:
    """Check one item's fields and return its record form, with its token count."""
    # Content alone, the common add, has no other field to check or copy.
    item = {"content": data["content"]} if len(data) == 1 and "content" in data else _fields(data)
    group = data.get("group") or default_group(config.name, item, existing, batch)
    if group is not None:
        item["group"] = group
    tokens = count_input(counter, data["content"])
    tool_calls = data.get("tool_calls")
    if tool_calls:
        tokens += count_input(counter, tool_calls)
    structured = data.get("structured_data")
    if structured is not None:  # context renders it in the content
        tokens += count_input(counter, structured)
    item["tokens"] = tokens
    return item


def _fields(data: dict) -> dict:
    """An item's fields checked and in record form, without its group and token count."""
    unknown = set(data) - _ITEM_FIELDS
    if unknown:
        raise InvalidInput(f"unknown item fields {sorted(unknown)}")
    if "content" not in data:
        raise InvalidInput("an item needs content (a string or JSON)")
    item: dict = {"content": data["content"]}
    for name in ("kind", "role", "group", "name", "tool_call_id"):
        value = data.get(name)
        if value is not None and type(value) is not str:
            raise InvalidInput(f"item field {name!r} must be a string")
    tags = data.get("tags", [])
    if type(tags) is not list or not all(type(t) is str for t in tags):
        raise InvalidInput("tags must be a list of strings")
    priority = data.get("priority", 0)
    if type(priority) not in (int, float) or not math.isfinite(priority):
        raise InvalidInput("priority must be a finite number")
    metadata = data.get("metadata", {})
    if type(metadata) is not dict:
        raise InvalidInput("metadata must be an object")
    tool_calls = data.get("tool_calls")
    if tool_calls is not None and (
        type(tool_calls) is not list
        or not all(type(c) is dict and type(c.get("id")) is str for c in tool_calls)
    ):
        raise InvalidInput("tool_calls must be a list of objects, each with a string id")
    for name in ("images", "agent_calls"):
        value = data.get(name)
        if value is not None and type(value) is not list:
            raise InvalidInput(f"item field {name!r} must be a list")
    structured = data.get("structured_data")
    if structured is not None and type(structured) is not dict:
        raise InvalidInput("item field 'structured_data' must be an object")
    for name in ("kind", "role"):
        if data.get(name) is not None:
            item[name] = data[name]
    if tags:
        item["tags"] = tags
    if priority:
        item["priority"] = priority
    if metadata:
        item["metadata"] = metadata
    extra = {k: data[k] for k in EXTRA_FIELDS if data.get(k) is not None}
    if extra:
        item["extra"] = extra
    return item


def add_items(
    session: SessionState,
    section_name: str,
    items: list[dict],
    counter: TokenCounter,
    idem: str | None = None,
    expected_version: int | None = None,
    content_of: render.ContentOf | None = None,
    summarizer: compaction.Summarizer = compaction.digest,
) -> Command:
    """The `item.added` record. A section with compaction that the add takes past its
    threshold is compacted first, in the same record (`compacted`, sections/model/compaction.py):
    the policy evicts only what still does not fit the budget after that."""
    check_version(session, expected_version)
    section = get_section(session, section_name)
    check_open(session)
    check_writable(section, session)
    if not items:
        raise InvalidInput("nothing to add: give at least one item")
    new: list[dict] = []
    for data in items:
        if type(data) is not dict:
            raise InvalidInput("each item must be an object")
        new.append(_new_item(section.config, data, counter, section, new))
    # Items in one batch that share a group join each other, not an existing one twice.
    incoming = sum(i["tokens"] for i in new)
    units = frozenset(i["group"] for i in new if "group" in i)
    newcomers = _newcomers(new) if section.config.policy == "priority" else None  # only it competes
    config = section.config
    compacted = None
    room = section
    if config.compacts and section.tokens + incoming > config.compact_at_tokens:
        if content_of is None:
            raise TypeError("compacting a section needs content_of")
        found = compaction.plan(
            section, compaction.Settings.of(config), config.compact_at_tokens - incoming,
            content_of, counter, summarizer, "threshold", new,
        )  # fmt: skip
        if found is not None:
            compacted, room = found.compacted, found.trial
    victims = choose_evictions(room, incoming, units, newcomers=newcomers,
                               incoming_count=len(new))  # fmt: skip
    payload = base_payload(session, idem)
    payload["items"] = new
    if compacted is not None:
        payload["compacted"] = compacted
    if victims:
        payload["evicted"] = _evicted(victims)
    return Command(session.tenant, session.id, section_name, "item.added", payload)


def _evicted(victims: list[tuple[Item, str]]) -> list[dict]:
    """The record's `evicted`: each victim with its reason (the policy, or `max_items`)."""
    return [{"id": item.id, "reason": reason} for item, reason in victims]


def _newcomers(new: list[dict]) -> dict[str, float]:
    """The units an add brings, each with its highest priority."""
    newcomers: dict[str, float] = {}
    for k, i in enumerate(new):
        unit = i.get("group", f"#new.{k}")
        newcomers[unit] = max(newcomers.get(unit, i.get("priority", 0)), i.get("priority", 0))
    return newcomers


def update_item(
    session: SessionState,
    section_name: str,
    item_id_: str,
    changes: dict,
    counter: TokenCounter,
    idem: str | None = None,
    expected_version: int | None = None,
) -> Command:
    check_version(session, expected_version)
    section = get_section(session, section_name)
    check_open(session)
    check_writable(section, session)
    item = get_item(section, item_id_)
    allowed = UPDATABLE
    if type(changes) is not dict or not changes or set(changes) - allowed:
        raise InvalidInput(f"an update sets one or more of {sorted(allowed)}")
    # The same field checks as an add; an update without content keeps the item's content.
    checked = _new_item(section.config, {"content": "", **changes}, counter, None)
    payload = base_payload(session, idem)
    payload["id"] = item.id
    payload["set"] = dict(changes)
    if "content" in changes:
        payload["tokens"] = checked["tokens"]
        victims = choose_evictions(
            section, checked["tokens"], frozenset({item.unit}), replacing=item.id
        )
        if victims:
            payload["evicted"] = _evicted(victims)
    return Command(session.tenant, session.id, section_name, "item.updated", payload)


def remove_items(
    session: SessionState,
    section_name: str,
    ids: list[str],
    idem: str | None = None,
    expected_version: int | None = None,
) -> Command:
    check_version(session, expected_version)
    section = get_section(session, section_name)
    check_open(session)
    check_writable(section, session)
    if not ids:
        raise InvalidInput("nothing to remove: give at least one item id")
    for id_ in ids:
        get_item(section, id_)
    payload = base_payload(session, idem)
    payload["items"] = {section_name: list(dict.fromkeys(ids))}
    return Command(session.tenant, session.id, section_name, "item.removed", payload)


def section_of(session: SessionState, id_: str) -> str:
    """The section holding item `id_` (ItemNotFound if none does)."""
    for name, section in session.sections.items():
        if id_ in section.items:
            return name
    raise ItemNotFound(f"session {session.id!r} has no item {id_!r}")


def get_item(section: SectionState, id_: str) -> Item:
    item = section.items.get(id_) if type(id_) is str else None
    if item is None:
        raise ItemNotFound(f"section {section.config.name!r} has no item {id_!r}")
    return item


# ---- reads ------------------------------------------------------------------------------------


def read_items(
    session: SessionState,
    reads: dict[str, list[str]],
    reader: str,
    purpose: str,
    at: int | None = None,
) -> Command | None:
    """The `items.read` record for a read, or None when it read nothing. No setting silences it.
    `at`: the seq of the past state the ids were read from (time travel)."""
    if reader not in READERS:
        raise InvalidInput(f"reader must be one of {', '.join(READERS)}")
    audited = {n: ids for n, ids in reads.items() if ids}
    if not audited:
        return None
    payload = base_payload(session, None)
    payload.update({"reader": reader, "purpose": purpose, "items": audited})
    if at is not None:
        payload["at"] = at
    section = next(iter(audited)) if len(audited) == 1 else SESSION_SECTION
    return Command(session.tenant, session.id, section, "items.read", payload)


# ---- turns, commits, restarts -----------------------------------------------------------------


def end_turn(
    session: SessionState, idem: str | None = None, expected_version: int | None = None
) -> Command:
    check_version(session, expected_version)
    check_open(session)
    cleared = {
        name: list(section.items)
        for name, section in session.sections.items()
        if section.config.lifetime == "turn" and section.items
    }
    payload = base_payload(session, idem)
    payload.update({"turn": session.turn, "cleared": cleared})
    return Command(session.tenant, session.id, SESSION_SECTION, "turn.ended", payload)


def commit(
    session: SessionState,
    section_name: str | None = None,
    idem: str | None = None,
    expected_version: int | None = None,
) -> Command:
    """Mark what a `commit`-lifetime section holds now as surviving restarts."""
    check_version(session, expected_version)
    check_open(session)
    if section_name is not None:
        names = [section_name]
        get_section(session, section_name)
    else:
        names = [n for n, s in session.sections.items() if s.config.lifetime == "commit"]
    ids = {n: [i.id for i in session.sections[n].items.values() if not i.committed] for n in names}
    payload = base_payload(session, idem)
    payload["items"] = {n: v for n, v in ids.items() if v}
    section = section_name if section_name is not None else SESSION_SECTION
    return Command(session.tenant, session.id, section, "section.committed", payload)


def restart(state: MemoryState) -> list[Command]:
    """What a restart takes away, as explicit records: process-lifetime items are cleared,
    uncommitted commit-lifetime items reverted."""
    commands = []
    for session in state.sessions.values():
        items: dict[str, list[str]] = {}
        for name, section in session.sections.items():
            lifetime = section.config.lifetime
            if lifetime == "process":
                gone = list(section.items)
            elif lifetime == "commit":
                gone = [i.id for i in section.items.values() if not i.committed]
            else:
                continue
            if gone:
                items[name] = gone
        if items:
            payload = base_payload(session, None)
            payload.update({"reason": "restart", "items": items})
            commands.append(
                Command(session.tenant, session.id, SESSION_SECTION, "sections.cleared", payload)
            )
    return commands
