"""The fact commands (sections/retrieval/facts.py), as specs of the command table (command_specs.py).

Facts live in the tenant's own session (`_tenant`), section `facts`, so every fact command
runs on that session (`HOLDER`): an idempotency key is remembered there, as the records are.
The session a caller works in comes first in the command's arguments (`where`): the facts it
asserts are asserted in it (its item ids are their sources) and its reads ask for the facts
asserted in it or learned from its items; None for the tenant as a whole.

- ASSERT_FACTS: the facts are checked outside the lock (`prepare`), where an extraction also
  reads its items and calls the runtime's extractor; then, once `_tenant` and its `facts`
  section exist, one `item.added` decides what each new fact closes. An extraction appends the
  `items.read` trace of the items it read in the same group.
- RETRACT_FACT: one `item.updated` ending a valid fact.
- READ_FACTS: the facts a query asks for, traced as an `items.read` of `_tenant` (purpose
  "facts") like every read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.errors import ItemNotFound
from sections.model import commands
from sections.model.commands import Decision, get_session, payload
from sections.model.names import TENANT_SESSION
from sections.model.state import MemoryState
from sections.retrieval import facts
from sections.retrieval.documents import text_of
from sections.retrieval.facts import SECTION, FactQuery, NewFact
from sections.specs.context import CommandContext
from sections.specs.session_specs import tenant_session
from sections.specs.spec import Call, CommandSpec, appended, replayed_from, what_was_decided

EXTRACT_PURPOSE = "facts.extract"
HOLDER = TENANT_SESSION
Extractor = Callable[[str], object]  # a runtime's fn(text) -> [(subject, predicate, object), ...]


def facts_section(state: MemoryState, tenant: str) -> Decision | None:
    """The `facts` section of the tenant's session, configured on its first fact. A memory
    config that gives every session a `facts` section of its own kind (a budget that would
    evict facts) has it set to the facts' settings in `_tenant`, where it is still mutable."""
    holder = get_session(state, tenant, TENANT_SESSION)
    section = holder.sections.get(SECTION)
    if section is not None and (section.config == facts.CONFIG or not section.config.mutable):
        return None
    return Decision((commands.configure_section(holder, SECTION, facts.CONFIG.to_json()),))


def _holder_ready(ctx: CommandContext, tenant: str) -> None:
    ctx.append(lambda state: tenant_session(ctx, state, tenant))
    ctx.append(lambda state: facts_section(state, tenant))


def _check_sources(ctx: CommandContext, tenant: str, new: list[NewFact]) -> None:
    """Sources are checked before `_tenant` is made, so a refused fact appends nothing; the
    decision checks them again under the lock."""

    def check(state: MemoryState) -> None:
        for fact in new:
            facts.check_sources(state, tenant, fact)

    ctx.read(check)


def _prepare_assert(ctx: CommandContext, call: Call) -> tuple:
    session, given, extract, ids = call.args
    tenant = call.tenant
    if ids is not None:
        new, reads, extractor = _extract(ctx, tenant, session, ids, extract)
    else:
        if isinstance(given, (dict, str)) or not isinstance(given, (list, tuple)):
            raise InvalidInput("give the facts as a list of objects")
        new, reads, extractor = [NewFact.of(data, session) for data in given], {}, None
    if not new and ids is None:
        raise InvalidInput("nothing to assert: give at least one fact")
    _check_sources(ctx, tenant, new)
    if new:
        _holder_ready(ctx, tenant)
    return session, new, reads, extractor


def _extract(
    ctx: CommandContext, tenant: str, session: str | None, ids: list[str], extract: object
) -> tuple[list[NewFact], dict[str, list[str]], str]:
    """Run the runtime's extractor on the items' text, outside the lock: its output is what the
    record stores, so replay never calls it."""
    if session is None:
        raise InvalidInput("extraction reads a session's items: use Session.extract_facts")
    if not callable(extract):
        raise InvalidInput(
            "no fact extractor: pass extract=fn(text) -> [(subject, predicate, object), ...] "
            "or set Memory.fact_extractor"
        )
    if isinstance(ids, str) or not ids or not all(type(i) is str for i in ids):
        raise InvalidInput("give the ids of the items to extract facts from")

    def found(state: MemoryState) -> list:
        target = get_session(state, tenant, session)
        out = []
        for id_ in dict.fromkeys(ids):
            name = commands.section_of(target, id_)
            out.append((name, target.sections[name].items[id_]))
        return out

    items = ctx.read(found)
    new: list[NewFact] = []
    reads: dict[str, list[str]] = {}
    for name, item in items:
        reads.setdefault(name, []).append(item.id)
        for data in _triples(extract(text_of(ctx.content_of(item)))):
            new.append(NewFact.of({**data, "sources": [item.id]}, session))
    return new, reads, getattr(extract, "__name__", type(extract).__name__)


def _triples(output: object) -> list[dict]:
    """An extractor's output: (subject, predicate, object) triples or fact objects."""
    if output is None:
        return []
    if isinstance(output, (str, dict)) or not isinstance(output, (list, tuple)):
        raise InvalidInput("the extractor must return a list of (subject, predicate, object)")
    out = []
    for fact in output:
        if isinstance(fact, (list, tuple)) and len(fact) == 3:
            out.append(dict(zip(("subject", "predicate", "object"), fact, strict=True)))
        elif type(fact) is dict and "sources" not in fact:
            out.append(fact)
        else:
            raise InvalidInput(
                "each extracted fact must be a (subject, predicate, object) triple or an object "
                "without sources (its source is the item it came from)"
            )
    return out


def _assert(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    session, new, reads, extractor = call.args
    tenant = call.tenant
    made = []
    if session is not None:
        get_session(state, tenant, session)
    if new:  # an extraction may find nothing; its read is traced all the same
        holder = get_session(state, tenant, TENANT_SESSION)
        made.append(
            facts.assert_facts(
                state,
                holder,
                new,
                ctx.decision_ts,
                ctx.counter_of(holder),
                extractor,
                session,
                call.idem,
            )  # fmt: skip
        )
    if reads:
        source = get_session(state, tenant, session)
        read = commands.read_items(source, reads, "agent", EXTRACT_PURPOSE)
        if read is not None:
            made.append(read)
    return Decision(made)


def _asserted(_ctx: CommandContext, record: Record | None, _decision: Decision | None) -> tuple:
    """(the first record appended, the facts asserted): the REST answer shows the record."""
    if record is None or record.type != "item.added":  # nothing extracted: only the read
        return record, []
    if _decision is None:  # a retry: the first call's record, which must be an assertion's
        replayed_from(record, SECTION, "fact assertion")
    return record, facts.asserted(record.seq, record.ts, payload(record))


ASSERT_FACTS = CommandSpec(
    "assert_facts", _assert, "item.added", result=_asserted, prepare=_prepare_assert
)


def _retract(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    _where, fact_id, at, reason = call.args
    at = facts.check_time("at", at)
    holder = state.sessions.get((call.tenant, TENANT_SESSION))
    if holder is None or SECTION not in holder.sections:
        raise ItemNotFound(f"no fact {fact_id!r}")
    at = ctx.decision_ts if at is None else at
    command, fact = facts.retract(holder, fact_id, at, reason, call.idem)
    return Decision((command,), fact)


def _retracted(ctx: CommandContext, record: Record | None, decision: Decision | None) -> tuple:
    if decision is not None:
        return record, decision.result
    # A retry answered from the first record: the fact as it now is.
    record = replayed_from(appended(record), SECTION, "fact retraction")
    id_, tenant = payload(record)["id"], record.tenant
    found = ctx.read(lambda state: facts.tenant_facts(state, tenant, HOLDER))
    return record, next((f for f in found if f.id == id_), None)


RETRACT_FACT = CommandSpec("retract_fact", _retract, "item.updated", result=_retracted)


def _read(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    query: FactQuery
    session, query, reader = call.args
    tenant = call.tenant
    if session is not None:  # a session's facts: asserted in it or learned from its items
        get_session(state, tenant, session)  # SessionNotFound
        query = replace(query, session=session)
    holder = state.sessions.get((tenant, TENANT_SESSION))
    if holder is None:
        return Decision((), [], state.seq)
    found = facts.select(facts.tenant_facts(state, tenant, TENANT_SESSION), query,
                         ctx.decision_ts)  # fmt: skip
    command = commands.read_items(holder, {SECTION: [f.id for f in found]}, reader, "facts")
    return Decision((command,) if command is not None else (), found, state.seq)


READ_FACTS = CommandSpec("read_facts", _read, result=what_was_decided)

SPECS = (ASSERT_FACTS, RETRACT_FACT, READ_FACTS)


# ---- the arguments of each command (Memory's and Session's methods, the HTTP routes) ----------
# Each returns (the spec's args after `where`, the idempotency key, None); `where` is the session
# a call is for (None: the tenant as a whole), which the caller puts first.

Arguments = tuple[tuple, str | None, None]


def assert_one(subject: str, predicate: str, object: str, *, sources: list | None = None,
               valid_from: int | None = None, metadata: dict | None = None,
               multi: bool = False, idempotency_key: str | None = None) -> Arguments:  # fmt: skip
    """Assert one fact: it closes the facts of the same subject and predicate valid at its
    start (`valid_from`, default now; with `multi=True` only those with the same object).
    `sources`: the items it was learned from. Returns the Fact."""
    data: dict[str, Any] = {"subject": subject, "predicate": predicate, "object": object,
                            "multi": multi}  # fmt: skip
    if sources is not None:
        data["sources"] = sources
    if valid_from is not None:
        data["valid_from"] = valid_from
    if metadata is not None:
        data["metadata"] = metadata
    return ([data], None, None), idempotency_key, None


def assert_many(facts_: list[dict], *, idempotency_key: str | None = None) -> Arguments:
    """Assert several facts in one record, in order (a later one may close an earlier one)."""
    return (facts_, None, None), idempotency_key, None


def extract(items: list[str] | str, *, extract: Extractor | None = None,
            idempotency_key: str | None = None) -> Arguments:  # fmt: skip
    """Facts extracted from these items' text by `extract(text) -> [(s, p, o), ...]` (default
    `Memory.fact_extractor`), called outside the lock; its output is stored in the record."""
    ids = [items] if isinstance(items, str) else list(items)
    return (None, extract, ids), idempotency_key, None


def retract(fact: str, *, at: int | None = None, reason: str | None = None,
            idempotency_key: str | None = None) -> Arguments:  # fmt: skip
    """End a valid fact at `at` (default now). Returns the Fact as it now is."""
    return (fact, at, reason), idempotency_key, None


def query(subject: str | None = None, predicate: str | None = None, object: str | None = None,
          *, as_of: int | None = None, include_history: bool = False,
          reader: str = "agent") -> Arguments:  # fmt: skip
    """Facts matching the given fields, valid now (or `as_of` a time, microseconds), or every
    one of them with `include_history=True`; by start. A read: traced on `_tenant`."""
    if reader not in commands.READERS:
        raise InvalidInput(f"reader must be one of {', '.join(commands.READERS)}")
    q = FactQuery.of(subject, predicate, object, as_of, include_history)
    return (q, reader), None, None
