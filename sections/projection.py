"""The projection: a pure fold of records into MemoryState. One handler per event type.

Replay applies what each record says and never recomputes a decision: victims, cleared items and
token counts all come from the record. Live state is made by applying the very record that was
appended, so live and rebuilt state agree by construction; the tests check it anyway.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson

from eventstore.record import Record

from .config import SectionConfig
from .state import INLINE_CONTENT_BYTES, Item, MemoryState, SectionState, SessionState, item_id

IDEMPOTENCY_WINDOW_US = 24 * 3600 * 1_000_000  # a retry within a day is recognised
IDEMPOTENCY_MAX_KEYS = 10_000  # per session; the oldest go first

# Types this projection changes state for; any other type is left to other projections.
Handler = Callable[[MemoryState, SessionState | None, Record, dict], None]
HANDLERS: dict[str, Handler] = {}


def handles(type_: str):
    def register(fn: Handler) -> Handler:
        HANDLERS[type_] = fn
        return fn

    return register


# Records whose payload was erased: the erase record restates their effect without content.
Restater = Callable[[Record], dict | None]


def apply(state: MemoryState, record: Record, restate: Restater | None = None) -> None:
    """Apply one record. Control records and unknown types only advance the position."""
    state.seq, state.h = record.seq, record.h
    if record.is_control:
        if record.type == "redaction" and record.has_payload:
            redaction_done(state, record.payload)
        return
    handler = HANDLERS.get(record.type)
    if handler is None:
        return
    if record.salt is not None:  # record.has_payload, without the property call
        payload = record.payload
    else:
        payload = restate(record) if restate is not None else None
        if payload is None:
            return  # an erased record of a session that is erased too
    key = (record.tenant, record.session)
    session = state.sessions.get(key)
    if session is None and record.type not in ("session.created", "session.erased"):
        return  # a record of a session erased from the log, or deleted
    handler(state, session, record, payload)  # type: ignore[arg-type]
    session = state.sessions.get(key)
    if session is not None:
        session.last_seq = record.seq
        idem = payload.get("idem")
        if idem is not None:
            _remember_key(session, idem, record)


def _remember_key(session: SessionState, key: str, record: Record) -> None:
    keys = session.idempotency
    keys[key] = (record.seq, record.ts, record.type)
    horizon = record.ts - IDEMPOTENCY_WINDOW_US
    while keys:
        oldest = next(iter(keys))
        if keys[oldest][1] >= horizon and len(keys) <= IDEMPOTENCY_MAX_KEYS:
            break
        del keys[oldest]


def _make_item(record: Record, k: int, data: dict, content_seq: int | None = None) -> Item:
    # Replay runs this once per item of every add: positional arguments (in Item's field order)
    # and the inline rule for plain strings done here save about a third of its time.
    seq = record.seq
    get = data.get
    content = get("content")
    if type(content) is str:
        if len(content) > INLINE_CONTENT_BYTES:
            content = None
    else:
        content = _inline(content)
    return Item(
        item_id(seq, k),
        seq,
        k,
        content,
        seq if content_seq is None else content_seq,
        record.h,
        data["tokens"],
        get("kind"),
        get("role"),
        tuple(get("tags", ())),
        get("priority", 0),
        get("metadata", {}),
        get("group"),
        get("extra", {}),
        seq,  # last_use
        ts=record.ts,
    )


def _inline(content: object) -> object:
    """Keep small contents in memory; large ones are read back from the log when needed."""
    if isinstance(content, str):
        return content if len(content) <= INLINE_CONTENT_BYTES else None
    if content is None:
        return None
    return content if len(orjson.dumps(content)) <= INLINE_CONTENT_BYTES else None


def _evict(session: SessionState, section: SectionState, evicted: list[dict]) -> None:
    for victim in evicted:
        if section.remove(victim["id"]) is not None:
            section.evictions += 1


def _remove_by_section(session: SessionState, ids_by_section: dict[str, list[str]]) -> None:
    for name, ids in ids_by_section.items():
        section = session.sections.get(name)
        if section is not None:
            for id_ in ids:
                section.remove(id_)


@handles("session.created")
def _created(state: MemoryState, _: SessionState | None, record: Record, payload: dict) -> None:
    # JCS sorts object keys, so the sections' order travels as a list.
    order = payload.get("order") or sorted(payload["config"])
    sections = {
        name: SectionState(SectionConfig.from_json(name, payload["config"][name])) for name in order
    }
    session = SessionState(
        tenant=record.tenant,
        id=record.session,
        created_seq=record.seq,
        metadata=payload.get("metadata", {}),
        counter=payload["counter"],
        sections=sections,
        version=record.seq,
        last_seq=record.seq,
    )
    k = 0
    seed = payload.get("seed", {})
    for name in order:
        for data in seed.get(name, ()):
            item = _make_item(record, k, data)
            item.committed = True
            sections[name].add(item)
            k += 1
    state.sessions[(record.tenant, record.session)] = session


def redaction_done(state: MemoryState, payload: dict) -> None:
    """A `redaction` whose request is `<erase type>@<seq>` completes that erase."""
    kind, _, seq = str(payload.get("request", "")).partition("@")  # "…@E#2/5": not the last chunk
    if kind in ("items.erased", "session.erased") and seq.isdigit():
        state.pending_erasures.pop(int(seq), None)


@handles("session.erased")
def _session_erased(
    state: MemoryState, _: SessionState | None, record: Record, payload: dict
) -> None:
    state.sessions.pop((record.tenant, record.session), None)
    if payload.get("records"):
        state.pending_erasures[record.seq] = payload["records"]


@handles("session.deleted")
def _deleted(state: MemoryState, _: SessionState | None, record: Record, payload: dict) -> None:
    state.sessions.pop((record.tenant, record.session), None)


@handles("session.ended")
def _ended(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    session.ended_seq = record.seq
    session.version = record.seq


@handles("item.added")
def _added(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    section = session.sections.get(record.section)
    if section is None:
        return
    evicted = payload.get("evicted")
    if evicted:
        _evict(session, section, evicted)
    for k, data in enumerate(payload["items"]):
        section.add(_make_item(record, k, data))
    session.version = record.seq
    session.touch(record.section)
    if record.section == "messages":
        session.messages += len(payload["items"])
        for k, data in enumerate(payload["items"]):
            if data.get("role") == "user":
                session.last_user = item_id(record.seq, k)
                if session.first_user is None:
                    session.first_user = session.last_user


@handles("item.updated")
def _updated(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    # A raw `redact --force` of an add leaves later records naming an item replay never saw.
    section = session.sections.get(record.section)
    if section is None:
        return
    _evict(session, section, payload.get("evicted", ()))
    item = section.items.get(payload["id"])
    if item is None:
        session.version = record.seq
        return
    changes = payload["set"]
    if "content" in changes:
        section.tokens += payload["tokens"] - item.tokens
        item.tokens = payload["tokens"]
        item.content = _inline(changes["content"])
        item.content_seq = record.seq
        item.h = record.h
        item.ts = record.ts
    for field_name in ("tags", "priority", "metadata", "kind", "role"):
        if field_name in changes:
            value = changes[field_name]
            setattr(item, field_name, tuple(value) if field_name == "tags" else value)
    item.last_use = record.seq
    section.changed(item)
    session.version = record.seq
    session.touch(record.section)


@handles("item.removed")
def _removed(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    _remove_by_section(session, payload["items"])
    session.version = record.seq
    for name in payload["items"]:
        session.touch(name)


@handles("session.summarized")
def _summarized(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    session.summary = payload["summary"]
    session.summary_at = (record.seq, record.h)


@handles("items.erased")
def _erased(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    _remove_by_section(session, payload["items"])
    session.version = record.seq
    restated = payload.get("restate")
    if restated:
        state.pending_erasures[record.seq] = sorted(int(seq) for seq in restated)
        # A summary quoting an erased message loses the quote, live exactly as in replay.
        if session.summary_at is not None and str(session.summary_at[0]) in restated:
            session.summary = restated[str(session.summary_at[0])]["summary"]


@handles("items.read")
@handles("context.assembled")
def _read(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    if payload.get("reader") != "agent":
        return  # operators' reads are traced but change no policy's order
    if "manifest" in payload:
        reads: dict[str, list[str]] = {}
        for entry in payload["manifest"]:
            if "inject" not in entry:  # injected observations and summaries are not this session's
                reads.setdefault(entry["section"], []).append(entry["id"])
    else:
        reads = payload["items"]
    for name, ids in reads.items():
        section = session.sections.get(name)
        if section is None:
            continue
        for id_ in ids:
            item = section.items.get(id_)
            if item is not None:
                item.reads += 1
                item.last_use = record.seq
                section.changed(item)


@handles("turn.ended")
def _turn_ended(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    _remove_by_section(session, payload["cleared"])
    session.turn = payload["turn"] + 1
    session.version = record.seq


@handles("section.committed")
def _committed(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    for name, ids in payload["items"].items():
        section = session.sections.get(name)
        if section is None:
            continue
        for id_ in ids:
            item = section.items.get(id_)
            if item is not None:
                item.committed = True
    session.version = record.seq


@handles("section.configured")
def _configured(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    config = SectionConfig.from_json(record.section, payload["config"])
    section = session.sections.get(record.section)
    if section is None:
        session.sections[record.section] = SectionState(config)
    else:
        section.config = config
        _evict(session, section, payload.get("evicted", ()))
    session.version = record.seq


@handles("sections.cleared")
def _cleared(state: MemoryState, session: SessionState, record: Record, payload: dict) -> None:
    _remove_by_section(session, payload["items"])
    session.version = record.seq
