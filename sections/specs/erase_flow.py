"""The steps of an erase, as specs of the command table (command_specs.py).

1. Outside the lock, read the files: walk the session's back-links down to the oldest item
   erased (items), or scan every record the session ever wrote (a whole session).
2. Under the lock, decide the record (`items.erased` / `session.erased`), taking in the records
   that landed meanwhile, and append it.
3. Once it is durable, have the writer redact the payloads it names, then purge what still holds
   them (`CommandContext.redact_erased`). A crash between 2 and 3 is finished on the next open.
"""

from __future__ import annotations

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.errors import ItemNotFound, SessionNotFound
from sections.model import commands, erasure
from sections.model.commands import Command, Decision, payload
from sections.model.item import parse_item_id
from sections.model.names import SESSION_SECTION
from sections.model.state import MemoryState
from sections.specs.context import CommandContext
from sections.specs.spec import Call, CommandSpec, appended, decided


def item_ids(ids: list[str] | str) -> list[str]:
    return [ids] if isinstance(ids, str) else list(ids)


def _walk_items(ctx: CommandContext, call: Call) -> tuple:
    """Step 1 for items: the session's chain of records back to the oldest id erased."""
    ids, reason = call.args
    if not ids:
        raise InvalidInput("give at least one item id to erase")
    try:
        oldest = min(parse_item_id(i)[0] for i in ids)
    except (ValueError, TypeError):
        raise ItemNotFound(f"session {call.session!r} has no item among {ids!r}") from None
    tenant, session_id = call.tenant, call.session
    head = ctx.read(lambda state: commands.get_session(state, tenant, session_id).last_seq)
    chain = erasure.session_chain(head, ctx.record_at, ctx.payload_of, oldest - 1)
    return ids, reason, head, chain


def _decide_items(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    """Step 2 for items: `items.erased`, restating every record that holds what goes."""
    ids, reason, head, chain = call.args
    session = commands.get_session(state, call.tenant, call.session)
    full = chain
    if session.last_seq != head:  # records that landed meanwhile: only those
        newer = erasure.session_chain(session.last_seq, ctx.record_at, ctx.payload_of, head)
        full = newer + chain
    by_seq = {r.seq: (r, p) for r, p in full}
    for id_ in ids:
        seq, k = parse_item_id(id_)
        if seq not in by_seq or k >= len(erasure.added_items(*by_seq[seq])):
            raise ItemNotFound(f"session {call.session!r} never had an item {id_!r}")
    seqs, all_ids = erasure.records_holding(session, set(ids), full)
    items: dict[str, list[str]] = {}
    for name, section in session.sections.items():
        chosen = [i for i in section.items if i in all_ids]
        if chosen:
            items[name] = chosen
    restated = {}
    for seq in sorted(seqs):
        record, _ = by_seq[seq]
        if record.has_payload:
            keep = record.type == "session.created"
            restated[str(seq)] = erasure.restate(payload(record), keep_session_metadata=keep)
    erased = commands.base_payload(session, None)
    erased.update({"reason": reason, "items": items, "restate": restated})
    command = Command(session.tenant, session.id, SESSION_SECTION, "items.erased", erased)
    return Decision((command,), sorted(all_ids, key=parse_item_id))


def _redact_items(ctx: CommandContext, record: Record | None, decision: Decision | None) -> tuple:
    """Step 3 for items; the result is the record and every erased id."""
    record = appended(record)
    erased = payload(record)
    seqs = [int(s) for s in erased["restate"]]
    ctx.redact_erased(seqs, erased["reason"], f"items.erased@{record.seq}")
    return record, decided(decision).result


def _scan_session(ctx: CommandContext, call: Call) -> tuple:
    """Step 1 for a whole session: every record it wrote, in every incarnation."""
    (reason,) = call.args
    found, scanned_to = ctx.session_records(call.tenant, call.session_id)
    if not found:
        raise SessionNotFound(f"session {call.session!r} not found")
    return reason, found[-1].seq, scanned_to, [r.seq for r in found if r.has_payload]


def _decide_session(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    """Step 2 for a whole session: `session.erased`, naming every record to redact."""
    reason, last, scanned_to, seqs = call.args
    session = state.sessions.get((call.tenant, call.session_id))
    if session is not None and session.last_seq > scanned_to:  # landed meanwhile
        newer = erasure.session_chain(session.last_seq, ctx.record_at, ctx.payload_of, scanned_to)
        seqs = seqs + [r.seq for r, _ in reversed(newer) if r.has_payload]
        last = session.last_seq
    erased = {
        "prev_seq": session.last_seq if session is not None else last,
        "reason": reason,
        "records": seqs,
    }
    command = Command(call.tenant, call.session_id, SESSION_SECTION, "session.erased", erased)
    return Decision((command,))


def _redact_session(
    ctx: CommandContext, record: Record | None, _decision: Decision | None
) -> Record:
    record = appended(record)
    erased = payload(record)
    ctx.redact_erased(erased["records"], erased["reason"], f"session.erased@{record.seq}")
    return record


def redact_sessions(ctx: CommandContext, first: Record, count: int) -> int:
    """Step 3 for `count` session erases appended together from `first` on (retention's, whose
    seqs follow each other but for the segment records the log may put between them): one
    redaction of all their records, named `session.erased@<first>..<last>` (or `@<first>` for
    one), rather than one rewrite of the segments per session. Returns `count`."""
    erases = [first]
    seq = first.seq
    while len(erases) < count:
        seq += 1
        found = ctx.record_at(seq)
        if found.type == "session.erased":
            erases.append(found)
    targets = sorted({s for r in erases for s in payload(r)["records"]})
    request = f"session.erased@{first.seq}" + (f"..{erases[-1].seq}" if count > 1 else "")
    if targets:
        ctx.redact_erased(targets, payload(first)["reason"], request)
    return count


ERASE_ITEMS = CommandSpec(
    "erase_items", _decide_items, result=_redact_items, prepare=_walk_items, result_blocks=True
)
ERASE_SESSION = CommandSpec(
    "erase_session", _decide_session, result=_redact_session, prepare=_scan_session,
    result_blocks=True,
)  # fmt: skip
