"""Facts, pure: a knowledge graph of (subject, predicate, object) with validity in time.

A fact is an item of the `facts` section of the tenant's own session (`_tenant`), added by an
ordinary `item.added` record whose item carries the fact in its metadata (docs/facts.md):

    {"subject", "predicate", "object", "valid_at", "sources": [{"session", "id"}],
     "multi", "closes": [ids], "closes_in_record": [k], "invalid_at", "metadata"}

so replay, snapshots, search, erasure and tenant isolation are those of items. A fact is valid
over `[valid_at, end)`. Its end is decided when a fact is asserted and stays in the records:

- a new fact closes the facts of the same subject and predicate that are valid at its start
  (`closes`, or `closes_in_record` for an earlier fact of the same record, whose id the
  decision cannot know yet): their end becomes its `valid_at`. A `multi` fact (a multi-valued
  predicate) closes only the facts with the same object;
- a fact asserted with a start before an existing fact's start ends where that one starts
  (its own `invalid_at`), so history answers "as of" as if the facts had come in time order;
- a retraction (an `item.updated` setting `retracted: {at, reason}`) ends the fact at `at`.

The end of a fact is the earliest of these, computed by `timeline` from the section's items.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass, replace

from eventstore.errors import InvalidInput
from sections.errors import FactConflict, ItemNotFound
from sections.model.commands import Command, base_payload, get_section
from sections.model.config import SectionConfig
from sections.model.item import Item, item_id
from sections.model.state import MemoryState, SectionState, SessionState
from sections.model.tokens import TokenCounter, count_input
from sections.retrieval.search import MAX_TIME

SECTION = "facts"
KIND = "fact"
# The section the tenant's session gets on its first fact: unbounded (facts leave only by
# erasure), durable, searchable, and immutable so no generic add or update can write a fact
# that skipped these checks (the fact commands build their records themselves).
CONFIG = SectionConfig(SECTION, None, "none", "durable", mutable=False, searchable=True)
FIELD_CHARS = 1000  # subject, predicate, object
MAX_SOURCES = 100
MAX_FACTS = 1000  # in one record
FACT_FIELDS = frozenset(("subject", "predicate", "object", "sources", "valid_from", "metadata",
                         "multi"))  # fmt: skip


@dataclass(frozen=True)
class Fact:
    """A fact as callers get it. `invalid_at` None: still valid. `retracted`: {at, reason}."""

    id: str
    subject: str
    predicate: str
    object: str
    valid_at: int
    invalid_at: int | None
    sources: tuple[dict, ...]
    multi: bool
    metadata: dict
    retracted: dict | None
    seq: int  # the record that asserted it
    ts: int  # when it was recorded (the record's ts, microseconds)
    session: str | None = None  # the session it was asserted in (None: tenant-wide)

    def valid(self, t: int) -> bool:
        return self.valid_at <= t and (self.invalid_at is None or t < self.invalid_at)

    @property
    def text(self) -> str:
        return text(self.subject, self.predicate, self.object)

    def to_json(self) -> dict:
        return {
            "id": self.id, "subject": self.subject, "predicate": self.predicate,
            "object": self.object, "valid_at": self.valid_at, "invalid_at": self.invalid_at,
            "sources": [dict(s) for s in self.sources], "multi": self.multi,
            "metadata": dict(self.metadata), "retracted": self.retracted, "seq": self.seq,
            "ts": self.ts, "session": self.session,
        }  # fmt: skip


def text(subject: str, predicate: str, object_: str) -> str:
    """A fact's content: what search indexes and context injection renders."""
    return f"{subject} {predicate} {object_}"


@dataclass(frozen=True)
class NewFact:
    """One fact to assert, checked; `sources` as (session, item id) pairs."""

    subject: str
    predicate: str
    object: str
    sources: tuple[tuple[str, str], ...] = ()
    valid_from: int | None = None
    metadata: dict | None = None
    multi: bool = False

    @classmethod
    def of(cls, data: builtins.object, default_session: str | None = None) -> NewFact:
        """From a caller's dict (FACT_FIELDS). A source is an item id of `default_session` (a
        session's own facts) or {"session", "id"}."""
        if not isinstance(data, dict):
            raise InvalidInput("a fact must be an object with subject, predicate and object")
        unknown = set(data) - FACT_FIELDS
        if unknown:
            raise InvalidInput(f"unknown fact fields {sorted(unknown)}")
        fields: list[str] = []
        for name in ("subject", "predicate", "object"):
            value = data.get(name)
            if type(value) is not str or not value.strip() or len(value) > FIELD_CHARS:
                raise InvalidInput(
                    f"a fact's {name} must be a non-empty string of at most {FIELD_CHARS} "
                    "characters"
                )
            fields.append(value)
        valid_from = check_time("valid_from", data.get("valid_from"))
        metadata = data.get("metadata")
        if metadata is not None and type(metadata) is not dict:
            raise InvalidInput("a fact's metadata must be an object")
        multi = data.get("multi", False)
        if type(multi) is not bool:
            raise InvalidInput("multi must be true or false")
        subject, predicate, object_ = fields
        sources = _sources(data.get("sources"), default_session)
        return cls(subject, predicate, object_, sources, valid_from, metadata, multi)


def _sources(value: object, default_session: str | None) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if isinstance(value, (str, dict)) or not isinstance(value, (list, tuple)):
        raise InvalidInput("sources must be a list")
    if len(value) > MAX_SOURCES:
        raise InvalidInput(f"a fact has at most {MAX_SOURCES} sources")
    out = []
    for source in value:
        if type(source) is str and default_session is not None:
            out.append((default_session, source))
        elif (
            type(source) is dict
            and set(source) == {"session", "id"}
            and all(type(v) is str for v in source.values())
        ):
            out.append((source["session"], source["id"]))
        else:
            shape = "an item id of this session or " if default_session is not None else ""
            raise InvalidInput(f"each source must be {shape}an object {{session, id}}")
    return tuple(dict.fromkeys(out))


def check_time(name: str, value: object) -> int | None:
    """`value` as µs since the epoch, or None. An integral double (5.0) is the integer it equals:
    JSON does not tell the two apart (JSON Schema's `integer` takes both) and a record writes
    both as `5`."""
    if type(value) is float and value.is_integer():
        value = int(value)
    if value is not None and (type(value) is not int or abs(value) > MAX_TIME):
        raise InvalidInput(
            f"{name} must be an integer of microseconds since the epoch, within ±2**62"
        )
    return value


# ---- the timeline --------------------------------------------------------------------------


def fact_of(item: Item, end: int | None = None) -> Fact:
    """The fact an item holds, ending at `end` (from `timeline`) or at its own recorded end."""
    m = item.metadata
    ends = [
        t for t in (end, m.get("invalid_at"), (m.get("retracted") or {}).get("at")) if t is not None
    ]
    return Fact(
        item.id, m["subject"], m["predicate"], m["object"], m["valid_at"],
        min(ends) if ends else None, tuple(m.get("sources", ())), m.get("multi", False),
        m.get("metadata", {}), m.get("retracted"), item.seq, item.ts, m.get("session"),
    )  # fmt: skip


def facts_items(section: SectionState | None) -> list[Item]:
    if section is None:
        return []
    return [i for i in section.items.values() if i.kind == KIND and "subject" in i.metadata]


def timeline(items: Iterable[Item]) -> list[Fact]:
    """Every fact, in the order asserted, with its end: the earliest of its recorded end, its
    retraction and the start of each fact that closed it."""
    items = list(items)
    closed_at: dict[str, int] = {}
    for item in items:
        m = item.metadata
        closers = [
            *m.get("closes", ()),
            *(item_id(item.seq, k) for k in m.get("closes_in_record", ())),
        ]
        for id_ in closers:
            closed_at[id_] = min(closed_at.get(id_, m["valid_at"]), m["valid_at"])
    return [fact_of(item, closed_at.get(item.id)) for item in items]


def tenant_facts(state: MemoryState, tenant: str, holder: str) -> list[Fact]:
    session = state.sessions.get((tenant, holder))
    section = session.sections.get(SECTION) if session is not None else None
    return timeline(facts_items(section))


# ---- asserting -----------------------------------------------------------------------------


def check_sources(state: MemoryState, tenant: str, fact: NewFact) -> None:
    for session_id, id_ in fact.sources:
        session = state.sessions.get((tenant, session_id))
        if session is None or not any(id_ in s.items for s in session.sections.values()):
            raise FactConflict(
                f"source {session_id}/{id_} is not a live item of this tenant: a fact's sources "
                "are items it was learned from"
            )


def assert_facts(
    state: MemoryState,
    holder: SessionState,
    new: list[NewFact],
    now: int,
    counter: TokenCounter,
    extractor: str | None = None,
    session: str | None = None,
    idem: str | None = None,
) -> Command:
    """The `item.added` record asserting `new`, in order, with what each closes; `session`:
    the session they are asserted in, if any."""
    if not new:
        raise InvalidInput("nothing to assert: give at least one fact")
    if len(new) > MAX_FACTS:
        raise InvalidInput(f"assert at most {MAX_FACTS} facts at once")
    section = get_section(holder, SECTION)
    existing = timeline(facts_items(section))
    # (fact, where it is: an id, or the index of a fact in this record)
    known: list[tuple[Fact, str | int]] = [(f, f.id) for f in existing]
    items = []
    for k, fact in enumerate(new):
        check_sources(state, holder.tenant, fact)
        start = now if fact.valid_from is None else fact.valid_from
        same = [
            (f, at) for f, at in known
            if f.subject == fact.subject and f.predicate == fact.predicate
            and (not fact.multi or f.object == fact.object)
        ]  # fmt: skip
        closes = [at for f, at in same if f.valid(start)]
        later = [f.valid_at for f, _ in same if f.valid_at > start]
        meta: dict = {
            "subject": fact.subject, "predicate": fact.predicate, "object": fact.object,
            "valid_at": start, "sources": [{"session": s, "id": i} for s, i in fact.sources],
            "multi": fact.multi,
        }  # fmt: skip
        if any(type(at) is str for at in closes):
            meta["closes"] = [at for at in closes if type(at) is str]
        if any(type(at) is int for at in closes):
            meta["closes_in_record"] = [at for at in closes if type(at) is int]
        if later:
            meta["invalid_at"] = min(later)
        if fact.metadata:
            meta["metadata"] = fact.metadata
        if session is not None:
            meta["session"] = session
        if extractor is not None:
            meta["extractor"] = extractor
        content = text(fact.subject, fact.predicate, fact.object)
        items.append({"content": content, "kind": KIND, "metadata": meta,
                      "tokens": count_input(counter, content)})  # fmt: skip
        # The new fact as later ones in this record see it: it ends where the first later
        # start is; closing it is written as its index.
        end = min(later) if later else None
        provisional = Fact(f"#{k}", fact.subject, fact.predicate, fact.object, start, end, (),
                           fact.multi, {}, None, -1, now)  # fmt: skip
        known = [(_ended(f, start) if at in closes else f, at) for f, at in known] + [
            (provisional, k)
        ]
    payload = base_payload(holder, idem)
    payload["items"] = items
    return Command(holder.tenant, holder.id, SECTION, "item.added", payload)


def _ended(fact: Fact, at: int) -> Fact:
    return replace(fact, invalid_at=at if fact.invalid_at is None else min(fact.invalid_at, at))


def asserted(record_seq: int, record_ts: int, payload: dict) -> list[Fact]:
    """The facts an asserting record added, from the record alone (the caller's answer)."""
    out = []
    for k, data in enumerate(payload["items"]):
        item = Item(item_id(record_seq, k), record_seq, k, data["content"], record_seq, "",
                    data["tokens"], data.get("kind"), metadata=data["metadata"], ts=record_ts)  # fmt: skip
        out.append(fact_of(item))
    return out


def retract(
    holder: SessionState, fact_id: object, at: int, reason: object, idem: str | None = None
) -> tuple[Command, Fact]:
    """The `item.updated` record ending fact `fact_id` at `at`, and the fact as it then is."""
    if type(fact_id) is not str:
        raise InvalidInput("give the id of the fact to retract")
    if reason is not None and (type(reason) is not str or len(reason) > FIELD_CHARS):
        raise InvalidInput(f"reason must be a string of at most {FIELD_CHARS} characters")
    section = get_section(holder, SECTION)
    item = section.items.get(fact_id)
    facts = {f.id: f for f in timeline(facts_items(section))}
    fact = facts.get(fact_id)
    if item is None or fact is None:
        raise ItemNotFound(f"no fact {fact_id!r}")
    if not fact.valid(at):
        raise FactConflict(
            f"fact {fact_id!r} is not valid at {at} (valid from {fact.valid_at} to "
            f"{fact.invalid_at}): only a valid fact can be retracted"
        )
    retracted = {"at": at, "reason": reason}
    payload = base_payload(holder, idem)
    payload["id"] = fact_id
    payload["set"] = {"metadata": {**item.metadata, "retracted": retracted}}
    command = Command(holder.tenant, holder.id, SECTION, "item.updated", payload)
    return command, _ended(replace(fact, retracted=retracted), at)


# ---- queries -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FactQuery:
    subject: str | None = None
    predicate: str | None = None
    object: str | None = None
    as_of: int | None = None  # None: now (the read's time)
    include_history: bool = False  # every fact, whatever its validity
    session: str | None = None  # only facts asserted in this session or sourced from its items

    @classmethod
    def of(cls, subject=None, predicate=None, object=None, as_of=None, include_history=False,
           session=None) -> FactQuery:  # fmt: skip
        for name, value in (("subject", subject), ("predicate", predicate), ("object", object)):
            if value is not None and type(value) is not str:
                raise InvalidInput(f"{name} must be a string")
        as_of = check_time("as_of", as_of)
        if type(include_history) is not bool:
            raise InvalidInput("include_history must be true or false")
        if include_history and as_of is not None:
            raise InvalidInput("give as_of or include_history, not both")
        return cls(subject, predicate, object, as_of, include_history, session)

    def matches(self, fact: Fact, now: int) -> bool:
        if self.subject is not None and fact.subject != self.subject:
            return False
        if self.predicate is not None and fact.predicate != self.predicate:
            return False
        if self.object is not None and fact.object != self.object:
            return False
        if (
            self.session is not None
            and fact.session != self.session
            and not any(s["session"] == self.session for s in fact.sources)
        ):
            return False
        return self.include_history or fact.valid(now if self.as_of is None else self.as_of)


def select(facts: list[Fact], query: FactQuery, now: int) -> list[Fact]:
    """The facts the query asks for, by start then order asserted."""
    found = [f for f in facts if query.matches(f, now)]
    found.sort(key=lambda f: (f.valid_at, f.seq, int(f.id.partition(".")[2] or 0)))
    return found


# ---- context injection -----------------------------------------------------------------------


def line(item: Item) -> str:
    m = item.metadata
    return "- " + text(m["subject"], m["predicate"], m["object"])


def choose(facts: list[Fact], hits: list[str], session_id: str, now: int, limit: int) -> list[str]:
    """Up to `limit` ids of facts valid now: the search's hits in rank order, then the facts
    learned from this session, then the newest others."""
    current = {f.id: f for f in facts if f.valid(now)}
    chosen = [i for i in dict.fromkeys(hits) if i in current][:limit]
    rest = [f for f in current.values() if f.id not in chosen]
    rest.sort(
        key=lambda f: (any(s["session"] == session_id for s in f.sources), f.valid_at, f.seq),
        reverse=True,
    )
    chosen.extend(f.id for f in rest[: limit - len(chosen)])
    return chosen
