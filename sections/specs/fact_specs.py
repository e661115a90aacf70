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
from typing import TYPE_CHECKING, Any

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.errors import ItemNotFound
from sections.model import commands
from sections.model.commands import Decision
from sections.model.names import TENANT_SESSION
from sections.model.state import MemoryState
from sections.retrieval import facts
from sections.retrieval.facts import SECTION, FactQuery, NewFact
from sections.retrieval.search import text_of
from sections.specs.command_specs import CommandSpec, get_session, tenant_session

if TYPE_CHECKING:
    from sections.runtime.memory import Memory

EXTRACT_PURPOSE = "facts.extract"
HOLDER = TENANT_SESSION


def facts_section(state: MemoryState, tenant: str) -> Decision | None:
    """The `facts` section of the tenant's session, configured on its first fact. A memory
    config that gives every session a `facts` section of its own kind (a budget that would
    evict facts) has it set to the facts' settings in `_tenant`, where it is still mutable."""
    holder = get_session(state, tenant, TENANT_SESSION)
    section = holder.sections.get(SECTION)
    if section is not None and (section.config == facts.CONFIG or not section.config.mutable):
        return None
    return Decision((commands.configure_section(holder, SECTION, facts.CONFIG.to_json()),))


def _holder_ready(memory: Memory, tenant: str) -> None:
    memory.append(lambda state: tenant_session(memory, state, tenant))
    memory.append(lambda state: facts_section(state, tenant))


def _check_sources(memory: Memory, tenant: str, new: list[NewFact]) -> None:
    """Sources are checked before `_tenant` is made, so a refused fact appends nothing; the
    decision checks them again under the lock."""
    memory.read(lambda state: [facts.check_sources(state, tenant, fact) for fact in new])


def _prepare_assert(memory: Memory, tenant: str, _holder: str, args: tuple) -> tuple:
    session, given, extract, ids = args
    if ids is not None:
        new, reads, extractor = _extract(memory, tenant, session, ids, extract)
    else:
        if isinstance(given, (dict, str)) or not isinstance(given, (list, tuple)):
            raise InvalidInput("give the facts as a list of objects")
        new, reads, extractor = [NewFact.of(data, session) for data in given], {}, None
    if not new and ids is None:
        raise InvalidInput("nothing to assert: give at least one fact")
    _check_sources(memory, tenant, new)
    if new:
        _holder_ready(memory, tenant)
    return session, new, reads, extractor


def _extract(
    memory: Memory, tenant: str, session: str | None, ids: list[str], extract: Any
) -> tuple[list[NewFact], dict[str, list[str]], str]:
    """Run the runtime's extractor on the items' text, outside the lock: its output is what the
    record stores, so replay never calls it."""
    if session is None:
        raise InvalidInput("extraction reads a session's items: use Session.extract_facts")
    extract = extract if extract is not None else memory.fact_extractor
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

    items = memory.read(found)
    new: list[NewFact] = []
    reads: dict[str, list[str]] = {}
    for name, item in items:
        reads.setdefault(name, []).append(item.id)
        for data in _triples(extract(text_of(memory.content_of(item)))):
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


def _assert(memory, state, tenant, _holder, args, idem, _expected) -> Decision:
    session, new, reads, extractor = args
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
                memory.decision_ts,
                memory.counter_of(holder),
                extractor,
                session,
                idem,
            )
        )
    if reads:
        source = get_session(state, tenant, session)
        made.append(commands.read_items(source, reads, "agent", EXTRACT_PURPOSE))
    return Decision(made)


def _asserted(_memory: Memory, record: Record | None, _decision: Decision | None) -> tuple:
    """(the first record appended, the facts asserted): the REST answer shows the record."""
    if record is None or record.type != "item.added":  # nothing extracted: only the read
        return record, []
    return record, facts.asserted(record.seq, record.ts, record.payload)


ASSERT_FACTS = CommandSpec(
    "assert_facts", _assert, "item.added", result=_asserted, prepare=_prepare_assert
)


def _retract(memory, state, tenant, _holder, args, idem, _expected) -> Decision:
    _where, fact_id, at, reason = args
    at = facts.check_time("at", at)
    holder = state.sessions.get((tenant, TENANT_SESSION))
    if holder is None or SECTION not in holder.sections:
        raise ItemNotFound(f"no fact {fact_id!r}")
    at = memory.decision_ts if at is None else at
    command, fact = facts.retract(holder, fact_id, at, reason, idem)
    return Decision((command,), fact)


def _retracted(memory: Memory, record: Record | None, decision: Decision | None) -> tuple:
    if decision is not None:
        return record, decision.result
    # A retry answered from the first record: the fact as it now is.
    id_ = record.payload["id"]  # type: ignore[union-attr]
    found = memory.read(lambda state: facts.tenant_facts(state, record.tenant, HOLDER))  # type: ignore[union-attr]
    return record, next((f for f in found if f.id == id_), None)


def _decided(_memory: Memory, _record: Record | None, decision: Decision | None) -> Any:
    return decision.result  # type: ignore[union-attr]


RETRACT_FACT = CommandSpec("retract_fact", _retract, "item.updated", result=_retracted)


def _read(memory, state, tenant, _holder, args, _idem, _expected) -> Decision:
    session, query, reader = args
    query: FactQuery
    if session is not None:  # a session's facts: asserted in it or learned from its items
        get_session(state, tenant, session)  # SessionNotFound
        query = replace(query, session=session)
    holder = state.sessions.get((tenant, TENANT_SESSION))
    if holder is None:
        return Decision((), [], state.seq)
    found = facts.select(facts.tenant_facts(state, tenant, TENANT_SESSION), query,
                         memory.decision_ts)  # fmt: skip
    command = commands.read_items(holder, {SECTION: [f.id for f in found]}, reader, "facts")
    return Decision((command,) if command is not None else (), found, state.seq)


READ_FACTS = CommandSpec("read_facts", _read, result=_decided)

SPECS = (ASSERT_FACTS, RETRACT_FACT, READ_FACTS)


# ---- the arguments of each command (Memory's and Session's methods) ---------------------------

Arguments = Callable[..., tuple[tuple, str | None, None]]  # (args, idempotency key, None)


def assert_one(subject: str, predicate: str, object: str, *, sources: list | None = None,
               valid_from: int | None = None, metadata: dict | None = None,
               multi: bool = False, idempotency_key: str | None = None):  # fmt: skip
    """Assert one fact: it closes the facts of the same subject and predicate valid at its
    start (`valid_from`, default now; with `multi=True` only those with the same object).
    `sources`: the items it was learned from. Returns the Fact."""
    data = {"subject": subject, "predicate": predicate, "object": object, "multi": multi}
    if sources is not None:
        data["sources"] = sources
    if valid_from is not None:
        data["valid_from"] = valid_from
    if metadata is not None:
        data["metadata"] = metadata
    return ([data], None, None), idempotency_key, None


def assert_many(facts_: list[dict], *, idempotency_key: str | None = None):
    """Assert several facts in one record, in order (a later one may close an earlier one)."""
    return (facts_, None, None), idempotency_key, None


def extract(items: list[str] | str, *, extract: Callable | None = None,
            idempotency_key: str | None = None):  # fmt: skip
    """Facts extracted from these items' text by `extract(text) -> [(s, p, o), ...]` (default
    `Memory.fact_extractor`), called outside the lock; its output is stored in the record."""
    ids = [items] if isinstance(items, str) else list(items)
    return (None, extract, ids), idempotency_key, None


def retract(fact: str, *, at: int | None = None, reason: str | None = None,
            idempotency_key: str | None = None):  # fmt: skip
    """End a valid fact at `at` (default now). Returns the Fact as it now is."""
    return (fact, at, reason), idempotency_key, None


def query(subject: str | None = None, predicate: str | None = None, object: str | None = None,
          *, as_of: int | None = None, include_history: bool = False,
          reader: str = "agent"):  # fmt: skip
    """Facts matching the given fields, valid now (or `as_of` a time, microseconds), or every
    one of them with `include_history=True`; by start. A read: traced on `_tenant`."""
    if reader not in commands.READERS:
        raise InvalidInput(f"reader must be one of {', '.join(commands.READERS)}")
    q = FactQuery.of(subject, predicate, object, as_of, include_history)
    return (q, reader), None, None


def facts_of(result: tuple) -> Any:
    """The caller's part of ASSERT_FACTS' and RETRACT_FACT's (record, result)."""
    return result[1]


def first_fact(result: tuple) -> Any:
    return result[1][0]


def fact_twins(spec: CommandSpec, arguments: Arguments, pick=None):
    """The sync and async methods running `spec` on the tenant's `HOLDER` session with what
    `arguments` makes of the caller's arguments; the object's `_fact_scope(kw)` says which
    memory, tenant and caller's session (`where`) a call is for."""

    def run(self: FactCommands, *a: Any, **kw: Any) -> Any:
        memory, tenant, where = self._fact_scope(kw)
        args, key, _ = arguments(*a, **kw)
        result = memory.run(spec, tenant, HOLDER, (where, *args), key)
        return result if pick is None else pick(result)

    async def run_async(self: FactCommands, *a: Any, **kw: Any) -> Any:
        memory, tenant, where = self._fact_scope(kw)
        args, key, _ = arguments(*a, **kw)
        result = await memory.run_async(spec, tenant, HOLDER, (where, *args), key)
        return result if pick is None else pick(result)

    for method in (run, run_async):
        method.__doc__ = arguments.__doc__
    return run, run_async


class FactCommands:
    """The fact methods of `Memory` (tenant-wide; `tenant=` picks the tenant) and of `Session`
    (asserted in that session, its item ids as sources; its reads: the facts asserted in it or
    learned from its items). Each class says how in `_fact_scope`."""

    def _fact_scope(self, kw: dict) -> tuple[Memory, str, str | None]:
        raise NotImplementedError

    assert_fact, assert_fact_async = fact_twins(ASSERT_FACTS, assert_one, first_fact)
    assert_facts, assert_facts_async = fact_twins(ASSERT_FACTS, assert_many, facts_of)
    extract_facts, extract_facts_async = fact_twins(ASSERT_FACTS, extract, facts_of)
    retract_fact, retract_fact_async = fact_twins(RETRACT_FACT, retract, facts_of)
    facts, facts_async = fact_twins(READ_FACTS, query)
