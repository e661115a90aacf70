"""The projection: a pure fold of records into MemoryState. One handler per event type.

Replay applies what each record says and never recomputes a decision: victims, cleared items and
token counts all come from the record. Live state is made by applying the very record that was
appended, so live and rebuilt state agree by construction; the tests check it anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

import orjson

from eventstore.record import CONTROL_TENANT, Record
from sections.model.config import SectionConfig
from sections.model.item import Item, item_id, parse_item_id
from sections.model.names import CONVERSATION
from sections.model.state import INLINE_CONTENT_LIMIT, MemoryState, SectionState, SessionState

IDEMPOTENCY_WINDOW_US = 24 * 3600 * 1_000_000  # a retry within a day is recognised
IDEMPOTENCY_MAX_KEYS = 10_000  # per session; the oldest go first

# Types this projection changes state for; any other type is left to other projections.
# A handler reads the record's envelope from `r`, the line's JSON object (seq, ts, h, tenant,
# session, section, type), and its payload from `payload`.
Handler = Callable[[MemoryState, SessionState | None, dict, dict], None]
HANDLERS: dict[str, Handler] = {}
# The fold replay runs (`replay_lines`): the same handlers, except where a type has a replay form.
REPLAY_HANDLERS: dict[str, Handler] = {}


def handles(type_: str):
    def register(fn: Handler) -> Handler:
        HANDLERS[type_] = fn
        REPLAY_HANDLERS.setdefault(type_, fn)
        return fn

    return register


def replays(type_: str):
    """Register the replay form of a type's handler: same effect on the state once the lines
    are folded, cheaper on the way (see `replay_lines`)."""

    def register(fn: Handler) -> Handler:
        REPLAY_HANDLERS[type_] = fn
        return fn

    return register


# Records whose payload was erased: the erase record restates their effect without content.
# Called with the erased record's seq and the seq of the redaction that removed its payload.
Restater = Callable[[int, int | None], dict | None]


def apply(state: MemoryState, record: Record, restate: Restater | None = None) -> None:
    """Apply one record (the live path). The same fold as `apply_line`, which replay uses on the
    parsed lines: the record's fields are handed over as the line's JSON object would hold them."""
    r = {
        "seq": record.seq,
        "ts": record.ts,
        "tenant": record.tenant,
        "session": record.session,
        "section": record.section,
        "type": record.type,
        "h": record.h,
    }
    if record.salt is not None:
        r["salt"] = record.salt
        r["payload"] = record.payload
    elif record.redacted is not None:
        r["redacted"] = record.redacted
    apply_line(state, r, restate)


def apply_line(
    state: MemoryState,
    r: dict,
    restate: Restater | None = None,
    handlers: dict[str, Handler] = HANDLERS,
) -> None:
    """Apply one record given as its line's JSON object (`orjson.loads` of the line): replay
    folds the log without building a `Record` per line. Control records and unknown types only
    advance the position. Replay passes `REPLAY_HANDLERS` (see `replay_lines`)."""
    seq = r["seq"]
    state.seq, state.h = seq, r["h"]
    type_ = r["type"]
    tenant = r["tenant"]
    if tenant == CONTROL_TENANT:
        if type_ == "redaction" and r.get("salt") is not None:
            redaction_done(state, r["payload"])
        return
    handler = handlers.get(type_)
    if handler is None:
        return
    if r.get("salt") is not None:  # the payload is kept (`Record.has_payload`)
        payload = r["payload"]
    else:
        payload = restate(seq, r.get("redacted")) if restate is not None else None
        if payload is None:
            return  # an erased record of a session that is erased too
    key = (tenant, r["session"])
    sessions = state.sessions
    session = sessions.get(key)
    if session is None and type_ not in ("session.created", "session.erased"):
        return  # a record of a session erased from the log, or deleted
    handler(state, session, r, payload)
    session = sessions.get(key)
    if session is not None:
        session.last_seq = seq
        if session.version == seq:  # the handler changed the session's memory
            session.active_ts = r["ts"]
        idem = payload.get("idem")
        if idem is not None:
            _remember_key(session, idem, seq, r["ts"], type_)


def _remember_key(session: SessionState, key: str, seq: int, ts: int, type_: str) -> None:
    keys = session.idempotency
    keys[key] = (seq, ts, type_)
    horizon = ts - IDEMPOTENCY_WINDOW_US
    while keys:
        oldest = next(iter(keys))
        if keys[oldest][1] >= horizon and len(keys) <= IDEMPOTENCY_MAX_KEYS:
            break
        del keys[oldest]


def _make_item(seq: int, k: int, h: str, ts: int, data: dict) -> Item:
    # Replay runs this once per live item: positional arguments (in Item's field order) and the
    # inline rule for plain strings done here save about a third of its time.
    get = data.get
    content = get("content")
    if type(content) is str:
        if len(content) > INLINE_CONTENT_LIMIT:
            content = None
    else:
        content = _inline(content)
    return Item(
        item_id(seq, k),
        seq,
        k,
        content,
        seq,  # content_seq
        h,
        data["tokens"],
        get("kind"),
        get("role"),
        tuple(get("tags", ())),
        get("priority", 0),
        get("metadata", {}),
        get("group"),
        get("extra", {}),
        seq,  # last_use
        ts=ts,
    )


def _inline(content: object) -> object:
    """Keep small contents in memory; large ones are read back from the log when needed."""
    if isinstance(content, str):
        return content if len(content) <= INLINE_CONTENT_LIMIT else None
    if content is None:
        return None
    return content if len(orjson.dumps(content)) <= INLINE_CONTENT_LIMIT else None


def _evict(session: SessionState, section: SectionState, evicted: list[dict]) -> None:
    items = section.items
    for victim in evicted:
        id_ = victim["id"]
        item = items.get(id_)
        if item is None:
            continue
        if type(item) is tuple:  # `_take`, inlined: replay evicts most of the items it adds
            del items[id_]
            section.tokens -= item[0]
        else:
            section.remove(id_)
        section.evictions += 1


def _remove_by_section(session: SessionState, ids_by_section: dict[str, list[str]]) -> None:
    for name, ids in ids_by_section.items():
        section = session.sections.get(name)
        if section is not None:
            for id_ in ids:
                _take(section, id_)


# ---- replay: items made only for the survivors -------------------------------------------------
#
# Most items a log adds are evicted or removed by a later record of the same log (3 in 4 in
# bench/memory.py's build), and `item.added` was over half of the fold, most of it building
# `Item`s. While replay folds lines (`replay_lines`, whose `item.added` handler is the replay form
# `_added_unmade`), an added item is held in `section.items` as an `Unmade` tuple, at its
# place in the (seq, k) order, holding what `_make_item` needs: a record that reads or changes it
# makes it first (`_made`), a removal drops it as it is (`_take`), and `make_items` makes the
# survivors before anyone else sees the state. The live path never holds one: `apply` uses
# `HANDLERS`, and replay starts from a state whose sections have no eviction order (`order` is
# built by the first choice of victims, which only a command makes).
# (tokens, seq, k, h, ts, data): the record's fields, not its parsed line, which holds GC-tracked
# containers (a line kept per live item cost 2 µs per record in collections).
Unmade = tuple


def _take(section: SectionState, id_: str) -> Item | Unmade | None:
    """Remove an item from its section, made or not; None when it was not there."""
    item = section.items.get(id_)
    if type(item) is tuple:
        del section.items[id_]
        section.tokens -= item[0]
        return item
    return section.remove(id_)


def _made(section: SectionState, id_: str) -> Item | None:
    """The section's item `id_` as an `Item`, made now if replay held it unmade."""
    item = section.items.get(id_)
    if type(item) is tuple:
        item = section.items[id_] = _make_item(*item[1:])  # keeps its place
    return item


def make_items(state: MemoryState) -> None:
    """Make every item replay still holds unmade: after `replay_lines`, before any read."""
    for session in state.sessions.values():
        for section in session.sections.values():
            items = section.items
            for id_, item in items.items():
                if type(item) is tuple:
                    items[id_] = _make_item(*item[1:])


def replay_lines(
    state: MemoryState,
    lines: Iterable[tuple[int, bytes]],
    restate: Restater | None = None,
    sessions_seen: set[tuple[str, str]] | None = None,
) -> MemoryState:
    """Replay: fold these lines (`LogReader.lines`' (seq, line) pairs, in order, after
    `state.seq`) into `state`, adding to `sessions_seen` the (tenant, session) of every record
    that names one. The items are made once the lines are folded, only those still live: the
    state is then the one `apply` builds record by record."""
    loads = orjson.loads
    for _, line in lines:
        r = loads(line)
        apply_line(state, r, restate, REPLAY_HANDLERS)
        if sessions_seen is not None and r["tenant"] != CONTROL_TENANT:
            sessions_seen.add((r["tenant"], r["session"]))
    make_items(state)
    return state


@handles("session.created")
def _created(state: MemoryState, _: SessionState | None, r: dict, payload: dict) -> None:
    # JCS sorts object keys, so the sections' order travels as a list.
    order = payload.get("order") or sorted(payload["config"])
    sections = {
        name: SectionState(SectionConfig.from_json(name, payload["config"][name])) for name in order
    }
    session = SessionState(
        tenant=r["tenant"],
        id=r["session"],
        created_seq=r["seq"],
        metadata=payload.get("metadata", {}),
        counter=payload["counter"],
        sections=sections,
        version=r["seq"],
        last_seq=r["seq"],
        created_ts=r["ts"],
    )
    k = 0
    seed = payload.get("seed", {})
    for name in order:
        for data in seed.get(name, ()):
            item = _make_item(r["seq"], k, r["h"], r["ts"], data)
            item.committed = True
            sections[name].add(item)
            k += 1
    state.sessions[(r["tenant"], r["session"])] = session


def redaction_done(state: MemoryState, payload: dict) -> None:
    """A `redaction` whose request is `<erase type>@<seq>` completes that erase; one whose
    request is `session.erased@<first>..<last>` completes every erase in that range (retention
    erases sessions together, sections/specs/erase_flow.py `redact_sessions`)."""
    kind, _, seqs = str(payload.get("request", "")).partition("@")  # "…@E#2/5": not the last chunk
    if kind not in ("items.erased", "session.erased"):
        return
    first, dots, last = seqs.partition("..")
    if first.isdigit() and not dots:
        state.pending_erasures.pop(int(first), None)
    elif first.isdigit() and last.isdigit():
        low, high = int(first), int(last)
        for seq in [s for s in state.pending_erasures if low <= s <= high]:
            del state.pending_erasures[seq]


@handles("session.erased")
def _session_erased(state: MemoryState, _: SessionState | None, r: dict, payload: dict) -> None:
    deleted = payload.get("deleted_seq")
    if deleted is None:
        state.sessions.pop((r["tenant"], r["session"]), None)
    else:  # retention's erase of an incarnation already deleted: a newer one stays
        state.pending_retention.pop(deleted, None)
    if payload.get("records"):
        state.pending_erasures[r["seq"]] = payload["records"]


@handles("session.deleted")
def _deleted(state: MemoryState, _: SessionState | None, r: dict, payload: dict) -> None:
    state.sessions.pop((r["tenant"], r["session"]), None)
    if payload.get("erase"):  # retention (sections/model/retention.py): its erase follows
        state.pending_retention[r["seq"]] = [r["tenant"], r["session"], payload.get("reason", "")]


@handles("session.ended")
def _ended(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    session.ended_seq = r["seq"]
    session.version = r["seq"]


def apply_compaction(section: SectionState, compacted: dict, seq: int, h: str, ts: int) -> None:
    """Apply what a compaction decided (docs/compaction.md): cut tool outputs, then put the
    summary in the place (and under the id) of the oldest item it replaces, dropping the rest.
    Items are replaced, never changed in place, so a decision can try this on a copy of a
    section's items (sections/model/compaction.py) without touching the live ones."""
    items = section.items
    for cut in compacted.get("truncated", ()):
        item = _made(section, cut["id"])
        if item is None:
            continue
        section.tokens += cut["tokens"] - item.tokens
        items[item.id] = replace(
            item, content=_inline(cut["content"]), tokens=cut["tokens"], content_seq=seq, h=h,
            ts=ts, last_use=seq,
        )  # fmt: skip
    replaced = compacted.get("replaced")
    if replaced:
        summary = compacted["summary"]
        gone = set(replaced)
        kept: dict = {}
        for id_, item in items.items():
            if id_ not in gone:
                kept[id_] = item
                continue
            section.tokens -= item[0] if type(item) is tuple else item.tokens
            if id_ == summary["id"]:
                made = _make_item(*parse_item_id(id_), h, ts, summary)
                made.content_seq = made.last_use = seq
                made.committed = summary.get("committed", False)
                kept[id_] = made
                section.tokens += made.tokens
        section.items = kept
    section.order = None  # derived: rebuilt from the items by the next choice of victims


@handles("section.compacted")
def _compacted(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    section = session.sections.get(r["section"])
    if section is not None:
        apply_compaction(section, payload["compacted"], r["seq"], r["h"], r["ts"])
    session.version = r["seq"]
    session.touch(r["section"])


@handles("item.added")
def _added(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    section = session.sections.get(r["section"])
    if section is None:
        return
    compacted = payload.get("compacted")
    if compacted:
        apply_compaction(section, compacted, r["seq"], r["h"], r["ts"])
    evicted = payload.get("evicted")
    if evicted:
        _evict(session, section, evicted)
    seq, h, ts = r["seq"], r["h"], r["ts"]
    for k, data in enumerate(payload["items"]):
        section.add(_make_item(seq, k, h, ts, data))
    _note_added(session, r, payload)


@replays("item.added")
def _added_unmade(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    """`_added` for replay: the items are held unmade (see `Unmade`)."""
    section = session.sections.get(r["section"])
    if section is None:
        return
    if section.order is not None or "compacted" in payload:  # the live path's way
        _added(state, session, r, payload)
        return
    evicted = payload.get("evicted")
    if evicted:
        _evict(session, section, evicted)
    items, seq, h, ts = section.items, r["seq"], r["h"], r["ts"]
    for k, data in enumerate(payload["items"]):
        tokens = data["tokens"]
        # item_id, held as an `Unmade` tuple in the item's place
        items[str(seq) if k == 0 else f"{seq}.{k}"] = (tokens, seq, k, h, ts, data)  # type: ignore[assignment]  # why: replay holds an item unmade until make_items (see Unmade)
        section.tokens += tokens
    _note_added(session, r, payload)


def _note_added(session: SessionState, r: dict, payload: dict) -> None:
    session.version = r["seq"]
    name = r["section"]
    if name not in session.touched:  # `session.touch`, inlined: once per added record
        session.touched.append(name)
    if name == CONVERSATION:
        session.messages += len(payload["items"])
        roles = session.roles
        for k, data in enumerate(payload["items"]):
            role = data.get("role")
            if role is not None:
                roles[role] = roles.get(role, 0) + 1
            if role == "user":
                session.last_user = item_id(r["seq"], k)
                if session.first_user is None:
                    session.first_user = session.last_user


@handles("item.updated")
def _updated(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    # A raw `redact --force` of an add leaves later records naming an item replay never saw.
    section = session.sections.get(r["section"])
    if section is None:
        return
    _evict(session, section, payload.get("evicted", ()))
    item = _made(section, payload["id"])
    if item is None:
        session.version = r["seq"]
        return
    changes = payload["set"]
    if "content" in changes:
        section.tokens += payload["tokens"] - item.tokens
        item.tokens = payload["tokens"]
        item.content = _inline(changes["content"])
        item.content_seq = r["seq"]
        item.h = r["h"]
        item.ts = r["ts"]
    for field_name in ("tags", "priority", "metadata", "kind", "role"):
        if field_name in changes:
            value = changes[field_name]
            setattr(item, field_name, tuple(value) if field_name == "tags" else value)
    item.last_use = r["seq"]
    section.changed(item)
    session.version = r["seq"]
    session.touch(r["section"])


@handles("item.removed")
def _removed(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    _remove_by_section(session, payload["items"])
    session.version = r["seq"]
    for name in payload["items"]:
        session.touch(name)


@handles("session.summarized")
def _summarized(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    session.summary = payload["summary"]
    session.summary_at = (r["seq"], r["h"])


@handles("items.erased")
def _erased(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    _remove_by_section(session, payload["items"])
    session.version = r["seq"]
    restated = payload.get("restate")
    if restated:
        state.pending_erasures[r["seq"]] = sorted(int(seq) for seq in restated)
        # A summary quoting an erased message loses the quote, live exactly as in replay.
        if session.summary_at is not None and str(session.summary_at[0]) in restated:
            session.summary = restated[str(session.summary_at[0])]["summary"]


@handles("items.read")
@handles("context.assembled")
def _read(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
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
            item = _made(section, id_)
            if item is not None:
                item.reads += 1
                item.last_use = r["seq"]
                section.changed(item)


@handles("turn.ended")
def _turn_ended(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    _remove_by_section(session, payload["cleared"])
    session.turn = payload["turn"] + 1
    session.version = r["seq"]


@handles("section.committed")
def _committed(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    for name, ids in payload["items"].items():
        section = session.sections.get(name)
        if section is None:
            continue
        for id_ in ids:
            item = _made(section, id_)
            if item is not None:
                item.committed = True
    session.version = r["seq"]


@handles("section.configured")
def _configured(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    config = SectionConfig.from_json(r["section"], payload["config"])
    section = session.sections.get(r["section"])
    if section is None:
        session.sections[r["section"]] = SectionState(config)
    else:
        section.config = config
        _evict(session, section, payload.get("evicted", ()))
    session.version = r["seq"]


@handles("sections.cleared")
def _cleared(state: MemoryState, session: SessionState, r: dict, payload: dict) -> None:
    _remove_by_section(session, payload["items"])
    session.version = r["seq"]
