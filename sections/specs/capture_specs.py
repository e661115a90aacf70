"""A runtime's tool call through the capture rules (sections/model/capture_rules.py), as the
commands it becomes (`Session.tool_call`, `POST /v1/sessions/{s}/tool-calls`), in this order:

1. the tool's inject rule, if any: a search of the session's and the tenant's observations for
   the rule's query, recorded as ONE `items.read` (purpose "inject") on the calling session that
   names the rule, the tool, the query and every memory found (`found`), even when none was: the
   trace of what the runtime could have been shown before the tool ran. Nothing is injected
   (`INJECT_TRACE`);
2. the first save rule that matches: an observation (our three tiers, `OBSERVE`), whose metadata
   names the rule and the tool (`source`), in the session or tenant-wide as the rule's scope says.

Both are ordinary records, so replay rebuilds exactly what the live memory has.
"""

from __future__ import annotations

from typing import NamedTuple

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.model import capture_rules, commands
from sections.model.capture_rules import CaptureRules, InjectRule, SaveRule
from sections.model.commands import Command, Decision, get_session
from sections.model.names import OBSERVATIONS, SESSION_SECTION, TENANT_SESSION
from sections.model.state import MemoryState
from sections.retrieval import inject
from sections.retrieval.observations import Outcome
from sections.retrieval.search import Query
from sections.specs.context import CommandContext
from sections.specs.search_specs import SourceUser, observation_args
from sections.specs.spec import Call, CommandSpec, appended, decided

INJECT_PURPOSE = "inject"


def _search_for_rule(ctx: CommandContext, call: Call) -> tuple:
    """Outside the lock: the rule's search (the index has its own lock)."""
    rule, query, tool, call_id = call.args
    tenant, session_id = call.tenant, call.session_id
    users = ctx.read(lambda state: inject.pool_users(state, tenant, session_id))
    wanted = Query(query[: inject.QUERY_CHARS], sessions=(session_id, TENANT_SESSION),
                   sections=(OBSERVATIONS,), top_k=rule.limit, users=users)  # fmt: skip
    hits = [(h.session, h.id, h.content_seq, h.tags) for h in ctx.search(call.tenant, wanted)]
    return rule, query, tool, call_id, hits


def _inject_trace(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    rule: InjectRule
    rule, query, tool, call_id, hits = call.args
    tenant, session_id = call.tenant, call.session_id
    target = get_session(state, tenant, session_id)
    found = []
    for sid, id_, content_seq, tags in hits:  # those still live and unchanged
        holder = state.sessions.get((tenant, sid))
        section = holder.sections.get(OBSERVATIONS) if holder is not None else None
        item = section.items.get(id_) if section is not None else None
        if item is not None and (item.content_seq, item.tags) == (content_seq, tags):
            found.append({"session": sid, "id": id_})
    own = [f["id"] for f in found if f["session"] == session_id]
    payload = commands.base_payload(target, None)
    payload.update({"reader": "agent", "purpose": INJECT_PURPOSE,
                    "items": {OBSERVATIONS: own} if own else {},
                    "rule": rule.name, "tool": tool, "query": query, "found": found})  # fmt: skip
    if call_id is not None:
        payload["call_id"] = call_id
    traced_in = OBSERVATIONS if own else SESSION_SECTION
    return Decision((Command(tenant, session_id, traced_in, "items.read", payload),), found)


def _traced(_ctx: CommandContext, record: Record | None, decision: Decision | None) -> dict:
    return {"seq": appended(record).seq, "found": decided(decision).result}


INJECT_TRACE = CommandSpec(
    "capture_inject_trace", _inject_trace, result=_traced, prepare=_search_for_rule
)


def checked_call(tool: object, args: object, call_id: object) -> dict:
    """A reported call's arguments, checked: InvalidInput names what is wrong."""
    if not isinstance(tool, str) or not tool:
        raise InvalidInput("tool must be the tool's name: a non-empty string")
    if args is not None and not isinstance(args, dict):
        raise InvalidInput("args must be an object of the tool's arguments")
    if call_id is not None and (not isinstance(call_id, str) or not call_id):
        raise InvalidInput("call_id must be a non-empty string")
    return args or {}


class Plan(NamedTuple):
    """What a reported call becomes: the inject step's INJECT_TRACE args (None: no rule, or no
    query), the save rule that matched and OBSERVE's args for it (None: none matched)."""

    trace: tuple | None
    save: SaveRule | None
    observe: tuple | None


def plan(rules: CaptureRules, session: str, tool: str, args: dict, output: object,
         call_id: str | None) -> Plan:  # fmt: skip
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
            from_session=session if save.scope != "session" else None,
            user=SourceUser(required=True) if save.scope == "user" else None,
        )  # fmt: skip
    return Plan(trace, save, observe)


def answer(planned: Plan, traced: dict | None, outcome: Outcome | None) -> dict:
    """What the caller gets: {"injected": {rule, query, seq, found} | None, "saved": {rule, id,
    session, tier, revision, duplicates} | None}."""
    injected = None
    if planned.trace is not None and traced is not None:
        injected = {"rule": planned.trace[0].name, "query": planned.trace[1], **traced}
    saved = None
    if planned.save is not None and outcome is not None:
        saved = {"rule": planned.save.name, "id": outcome.id, "session": outcome.session,
                 "tier": outcome.tier, "revision": outcome.revision,
                 "duplicates": outcome.duplicates}  # fmt: skip
    return {"injected": injected, "saved": saved}
