"""A runtime's tool call through the capture rules (sections/model/capture_rules.py): the glue.

`report(memory, tenant, session, tool, args, output)` runs, in this order, as commands:

1. the tool's inject rule, if any: a search of the session's and the tenant's observations for
   the rule's query, recorded as ONE `items.read` (purpose "inject") on the calling session that
   names the rule, the tool, the query and every memory found (`found`), even when none was: the
   trace of what the runtime could have been shown before the tool ran. Nothing is injected;
2. the first save rule that matches: an observation (our three tiers), whose metadata names the
   rule and the tool (`source`), in the session or tenant-wide as the rule's scope says.

Both are ordinary records, so replay rebuilds exactly what the live memory has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventstore.errors import InvalidInput, WriterClosed
from eventstore.record import Record
from sections.model import capture_rules, commands
from sections.model.capture_rules import CaptureRules, InjectRule
from sections.model.commands import Command, Decision, get_session
from sections.model.names import SESSION_SECTION, TENANT_SESSION
from sections.retrieval import inject
from sections.retrieval.observations import SECTION
from sections.retrieval.search import Query
from sections.specs.command_specs import OBSERVE as OBSERVE_SPEC
from sections.specs.command_specs import CommandSpec, observation_args

if TYPE_CHECKING:
    from sections.runtime.memory import Memory

INJECT_PURPOSE = "inject"


def _search_for_rule(memory: Memory, tenant: str, session: str, args: tuple) -> tuple:
    """Outside the lock: the rule's search (the index has its own lock)."""
    rule, query, tool, call_id = args
    if memory.writer.closed:
        raise WriterClosed("the memory is closed")
    wanted = Query(query[: inject.QUERY_CHARS], sessions=(session, TENANT_SESSION),
                   sections=(SECTION,), top_k=rule.limit)  # fmt: skip
    hits = [
        (h.session, h.id, h.content_seq, h.tags) for h in memory.search_index.search(tenant, wanted)
    ]
    return rule, query, tool, call_id, hits


def _inject_trace(_memory, state, tenant, session_id, args, _idem, _expected) -> Decision:
    rule, query, tool, call_id, hits = args
    rule: InjectRule
    target = get_session(state, tenant, session_id)
    found = []
    for sid, id_, content_seq, tags in hits:  # those still live and unchanged
        holder = state.sessions.get((tenant, sid))
        section = holder.sections.get(SECTION) if holder is not None else None
        item = section.items.get(id_) if section is not None else None
        if item is not None and (item.content_seq, item.tags) == (content_seq, tags):
            found.append({"session": sid, "id": id_})
    own = [f["id"] for f in found if f["session"] == session_id]
    payload = commands.base_payload(target, None)
    payload.update({"reader": "agent", "purpose": INJECT_PURPOSE,
                    "items": {SECTION: own} if own else {},
                    "rule": rule.name, "tool": tool, "query": query, "found": found})  # fmt: skip
    if call_id is not None:
        payload["call_id"] = call_id
    section = SECTION if own else SESSION_SECTION
    return Decision((Command(tenant, session_id, section, "items.read", payload),), found)


def _traced(_memory: Memory, record: Record | None, decision: Decision | None) -> dict:
    return {"seq": record.seq, "found": decision.result}  # type: ignore[union-attr]


INJECT_TRACE = CommandSpec(
    "capture_inject_trace", _inject_trace, result=_traced, prepare=_search_for_rule
)


def _checked(tool: object, args: object, call_id: object) -> dict:
    if not isinstance(tool, str) or not tool:
        raise InvalidInput("tool must be the tool's name: a non-empty string")
    if args is not None and not isinstance(args, dict):
        raise InvalidInput("args must be an object of the tool's arguments")
    if call_id is not None and (not isinstance(call_id, str) or not call_id):
        raise InvalidInput("call_id must be a non-empty string")
    return args or {}


def _plan(rules: CaptureRules, session: str, tool: str, args: dict, output, call_id):
    """(the inject step's spec args or None, the save step's observe args or None)."""
    rule = capture_rules.inject_rule_for(rules, tool)
    query = capture_rules.query_of(rule, args) if rule is not None else None
    trace = (rule, query, tool, call_id) if query else None
    save = capture_rules.save_rule_for(rules, tool, args, output)
    observe = None
    if save is not None:
        obs = capture_rules.observation_of(save, tool, args, output)
        if call_id is not None:
            obs["source"]["call_id"] = call_id
        observe = observation_args(
            obs["type"], obs["title"], obs["content"], tags=obs["tags"], source=obs["source"],
            session=session if save.scope == "session" else None,
            from_session=session if save.scope == "tenant" else None,
        )  # fmt: skip
    return trace, save, observe


def _answer(trace, traced, save, outcome) -> dict:
    injected = None
    if trace is not None:
        injected = {"rule": trace[0].name, "query": trace[1], **traced}
    saved = None
    if save is not None:
        saved = {"rule": save.name, "id": outcome.id, "session": outcome.session,
                 "tier": outcome.tier, "revision": outcome.revision,
                 "duplicates": outcome.duplicates}  # fmt: skip
    return {"injected": injected, "saved": saved}


def report(memory: Memory, tenant: str, session: str, tool: str, args=None, output=None,
           call_id: str | None = None) -> dict:  # fmt: skip
    """Apply the memory's capture rules to one tool call and its result (module docstring)."""
    args = _checked(tool, args, call_id)
    memory.require_session(tenant, session)
    trace, save, observe = _plan(memory.config.capture, session, tool, args, output, call_id)
    traced = memory.run(INJECT_TRACE, tenant, session, trace) if trace else None
    outcome = memory.run(OBSERVE_SPEC, tenant, None, observe) if observe else None
    return _answer(trace, traced, save, outcome)


async def report_async(memory: Memory, tenant: str, session: str, tool: str, args=None,
                       output=None, call_id: str | None = None) -> dict:  # fmt: skip
    args = _checked(tool, args, call_id)
    memory.require_session(tenant, session)
    trace, save, observe = _plan(memory.config.capture, session, tool, args, output, call_id)
    traced = await memory.run_async(INJECT_TRACE, tenant, session, trace) if trace else None
    outcome = await memory.run_async(OBSERVE_SPEC, tenant, None, observe) if observe else None
    return _answer(trace, traced, save, outcome)
