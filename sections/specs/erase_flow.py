"""The steps of an erase, as command specs run them (sections/specs/command_specs.py).

1. Outside the lock, read the files: walk the session's back-links down to the oldest item
   erased (items), or scan every record the session ever wrote (a whole session).
2. Under the lock, decide the record (`items.erased` / `session.erased`), taking in the records
   that landed meanwhile, and append it.
3. Once it is durable, have the writer redact the payloads it names, then purge what still holds
   them (Memory.redact_erased). A crash between 2 and 3 is finished on the next open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventstore.errors import InvalidInput
from eventstore.filters import RecordFilter
from eventstore.record import Record
from sections.errors import ItemNotFound, SessionNotFound
from sections.model import commands, erasure
from sections.model.commands import Command, Decision
from sections.model.item import parse_item_id
from sections.model.names import SESSION_SECTION
from sections.model.state import MemoryState

if TYPE_CHECKING:
    from sections.runtime.memory import Memory


def item_ids(ids: list[str] | str) -> list[str]:
    return [ids] if isinstance(ids, str) else list(ids)


def walk_items(memory: Memory, tenant: str, session_id: str, args: tuple) -> tuple:
    """Step 1 for items: the session's chain of records back to the oldest id erased."""
    ids, reason = args
    if not ids:
        raise InvalidInput("give at least one item id to erase")
    try:
        oldest = min(parse_item_id(i)[0] for i in ids)
    except (ValueError, TypeError):
        raise ItemNotFound(f"session {session_id!r} has no item among {ids!r}") from None
    head = memory.read(lambda state: commands.get_session(state, tenant, session_id).last_seq)
    chain = erasure.session_chain(head, memory.record_at, memory.history.payload_of, oldest - 1)
    return ids, reason, head, chain


def decide_items(memory, state: MemoryState, tenant, session_id, args, _idem, _expected):
    """Step 2 for items: `items.erased`, restating every record that holds what goes."""
    ids, reason, head, chain = args
    session = commands.get_session(state, tenant, session_id)
    full = chain
    if session.last_seq != head:  # records that landed meanwhile: only those
        newer = erasure.session_chain(
            session.last_seq, memory.record_at, memory.history.payload_of, head
        )
        full = newer + chain
    by_seq = {r.seq: (r, p) for r, p in full}
    for id_ in ids:
        seq, k = parse_item_id(id_)
        if seq not in by_seq or k >= len(erasure.added_items(*by_seq[seq])):
            raise ItemNotFound(f"session {session_id!r} never had an item {id_!r}")
    seqs, all_ids = erasure.records_holding(session, set(ids), full)
    items: dict[str, list[str]] = {}
    for name, section in session.sections.items():
        chosen = [i for i in section.items if i in all_ids]
        if chosen:
            items[name] = chosen
    payload = commands.base_payload(session, None)
    restated = {}
    for seq in sorted(seqs):
        record, _ = by_seq[seq]
        if record.has_payload:
            keep = record.type == "session.created"
            restated[str(seq)] = erasure.restate(record.payload, keep_session_metadata=keep)
    payload.update({"reason": reason, "items": items, "restate": restated})
    command = Command(tenant, session_id, SESSION_SECTION, "items.erased", payload)
    return Decision((command,), sorted(all_ids, key=parse_item_id))


def redact_items(memory: Memory, record: Record | None, decision: Decision | None) -> tuple:
    """Step 3 for items; the result is the record and every erased id."""
    payload = record.payload  # type: ignore[union-attr]
    seqs = [int(s) for s in payload["restate"]]
    memory.redact_erased(seqs, payload["reason"], f"items.erased@{record.seq}")  # type: ignore[union-attr]
    return record, decision.result  # type: ignore[union-attr]


def scan_session(memory: Memory, tenant: str, session_id: str, args: tuple) -> tuple:
    """Step 1 for a whole session: every record it wrote, in every incarnation."""
    (reason,) = args
    where = RecordFilter.of(tenant=tenant, session=session_id)
    found = [r for r in memory.reader.records(where=where)]  # a scan of the files, unlocked
    if not found:
        raise SessionNotFound(f"session {session_id!r} not found")
    scanned_to = memory.writer.size - 1
    return reason, found[-1].seq, scanned_to, [r.seq for r in found if r.has_payload]


def decide_session(memory, state: MemoryState, tenant, session_id, args, _idem, _expected):
    """Step 2 for a whole session: `session.erased`, naming every record to redact."""
    reason, last, scanned_to, seqs = args
    session = state.sessions.get((tenant, session_id))
    if session is not None and session.last_seq > scanned_to:  # landed meanwhile
        newer = erasure.session_chain(
            session.last_seq, memory.record_at, memory.history.payload_of, scanned_to
        )
        seqs = seqs + [r.seq for r, _ in reversed(newer) if r.has_payload]
        last = session.last_seq
    payload = {
        "prev_seq": session.last_seq if session is not None else last,
        "reason": reason,
        "records": seqs,
    }
    return Decision((Command(tenant, session_id, SESSION_SECTION, "session.erased", payload),))


def redact_session(memory: Memory, record: Record | None, _decision: Decision | None) -> Record:
    payload = record.payload  # type: ignore[union-attr]
    memory.redact_erased(payload["records"], payload["reason"], f"session.erased@{record.seq}")  # type: ignore[union-attr]
    return record  # type: ignore[return-value]


def redact_sessions(memory: Memory, first: Record, count: int) -> int:
    """Step 3 for `count` session erases appended together from `first` on (retention's, whose
    seqs follow each other but for the segment records the log may put between them): one
    redaction of all their records, named `session.erased@<first>..<last>` (or `@<first>` for
    one), rather than one rewrite of the segments per session. Returns `count`."""
    erases = [first]
    seq = first.seq
    while len(erases) < count:
        seq += 1
        found = memory.record_at(seq)
        if found.type == "session.erased":
            erases.append(found)
    targets = sorted({s for r in erases for s in r.payload["records"]})  # type: ignore[index]
    request = f"session.erased@{first.seq}" + (f"..{erases[-1].seq}" if count > 1 else "")
    if targets:
        memory.redact_erased(targets, first.payload["reason"], request)  # type: ignore[index]
    return count
