"""A session's life, as specs of the command table (command_specs.py): creation (with retention's
`max_sessions`), end (with a transcript first and a summary after), deletion, and the tenant's
own session `_tenant`, created on first use."""

from __future__ import annotations

import hashlib
import uuid

from eventstore.errors import InvalidInput
from eventstore.record import Record
from sections.model import commands, compaction, erasure, retention
from sections.model.commands import Command, Decision, get_session
from sections.model.item import parse_item_id
from sections.model.names import CONVERSATION, TENANT_SESSION
from sections.model.state import MemoryState, SessionState
from sections.retrieval import summaries
from sections.specs.context import CommandContext
from sections.specs.retention_specs import erases
from sections.specs.spec import Call, CommandSpec, appended, one

# ---- creation ---------------------------------------------------------------------------------


def check_not_reserved(session_id: str) -> None:
    if session_id == TENANT_SESSION:
        raise InvalidInput(
            f"session id {TENANT_SESSION!r} is reserved for tenant-wide observations: observe() "
            "writes there"
        )


def session_id_for(key: str | None) -> str:
    """A server-made session id: random, or, for a creation with an idempotency key, derived
    from the key, so a retry names the same session and finds the key in its `session.created`
    (32 hex digits either way: an identifier of log-format.md section 2)."""
    if key is None:
        return uuid.uuid4().hex
    digest = hashlib.sha256(b"ledgermem.session/" + key.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def _create_session(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    config, metadata = call.args
    session = call.session_id
    check_not_reserved(session)
    created = commands.create_session(
        state, call.tenant, session, config, ctx.counter_for(config), metadata, call.idem
    )
    return Decision((created, *_make_room(ctx, state, call.tenant)))


def _make_room(ctx: CommandContext, state: MemoryState, tenant: str) -> list[Command]:
    """The tenant's `max_sessions`: the least recently active sessions a creation takes past
    it, each a `session.deleted` (reason `max_sessions`) appended right after the creation."""
    config = ctx.config
    victims = retention.over_max_sessions(state, tenant, config.max_sessions_for(tenant))
    return [retention.deletion(s, retention.MAX_SESSIONS, config.retention_erase) for s in victims]


def _made(ctx: CommandContext, record: Record | None, decision: Decision | None) -> Record | None:
    if erases(decision):
        ctx.erase_retained()
    return record


def _get_or_create(ctx: CommandContext, state: MemoryState, call: Call) -> Decision | None:
    if (call.tenant, call.session) in state.sessions:
        return None
    return _create_session(ctx, state, call._replace(idem=None))


def _created(ctx: CommandContext, record: Record | None, decision: Decision | None) -> tuple:
    return _made(ctx, record, decision), record is not None


CREATE_SESSION = CommandSpec(
    "create_session", _create_session, "session.created", result=_made, result_blocks=erases
)
GET_OR_CREATE_SESSION = CommandSpec(
    "get_or_create_session", _get_or_create, result=_created, result_blocks=erases
)


def tenant_session(ctx: CommandContext, state: MemoryState, tenant: str) -> Decision | None:
    """The session that holds the tenant's observations, created once."""
    if (tenant, TENANT_SESSION) in state.sessions:
        return None
    metadata = {"reserved": "tenant-wide observations"}
    return one(
        commands.create_session(state, tenant, TENANT_SESSION, ctx.config, ctx.counter, metadata)
    )


# ---- ending and deleting ----------------------------------------------------------------------

TRANSCRIPT_KEY = "{}/transcript"  # the transcript's idempotency key, from the end's


def transcript_items(messages: object) -> list[dict]:
    """A transcript given at end (`[{role, content}]`, AgentOps' shape) as `messages` items."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidInput("messages must be a non-empty list of {role, content} objects")
    items = []
    for n, m in enumerate(messages):
        if type(m) is not dict or set(m) - {"role", "content"}:
            raise InvalidInput(f"messages[{n}] must be an object of role and content only")
        role, content = m.get("role"), m.get("content")
        if type(role) is not str or not role or type(content) is not str:
            raise InvalidInput(f"messages[{n}]: role must be a non-empty string, content a string")
        items.append({"content": content, "role": role})
    return items


def _record_transcript(ctx: CommandContext, call: Call) -> tuple:
    """Before the end, outside the lock: the transcript given at end becomes the session's
    messages (one `item.added`), so they are counted and quoted like any message. Skipped when
    the session has ended already (a retry is then answered from its first record, a second end
    refused) or when the end's key shows a retry that already recorded it."""
    items, idem, expected = call.args or (None, None, None)
    if items:
        key = TRANSCRIPT_KEY.format(idem) if idem is not None else None
        tenant, session = call.tenant, call.session

        def decide(state: MemoryState) -> Decision | None:
            target = get_session(state, tenant, session)
            if target.ended_seq is not None or (key is not None and key in target.idempotency):
                return None
            return one(
                commands.add_items(
                    target,
                    CONVERSATION,
                    items,
                    ctx.counter_of(target),
                    key,
                    expected,
                    ctx.content_of,
                    ctx.summarizer,
                )  # fmt: skip
            )

        ctx.append(decide)
    return call.args


def _end_session(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    target = get_session(state, call.tenant, call.session)
    return one(commands.end_session(target, call.idem, call.expected))


def _ended(ctx: CommandContext, record: Record | None, _decision: Decision | None) -> Record:
    """Append the summary of the session `record` ended, unless it is there already (a retry)."""
    record = appended(record)
    tenant, session = record.tenant, record.session
    summarized = ctx.read(lambda state: get_session(state, tenant, session).summary_at)
    if summarized is None or summarized[0] < record.seq:
        ctx.append(lambda state: summarize(ctx, state, tenant, session))
    return record


def summarize(
    ctx: CommandContext, state: MemoryState, tenant: str, session_id: str
) -> Decision | None:
    """The summary of a session that has just ended (sections/retrieval/summaries.py)."""
    session = state.sessions.get((tenant, session_id))
    if session is None or session.ended_seq is None:
        return None
    return one(summaries.summarize(session, lambda id_: _message(ctx, session, id_)))


def _message(ctx: CommandContext, session: SessionState, id_: str) -> object:
    """A message's content: live, or from the record that added it (None if erased)."""
    section = session.sections.get(CONVERSATION)
    item = section.items.get(id_) if section is not None else None
    if item is not None and not compaction.is_summary(item):  # a summary took over its id
        return ctx.content_of(item)
    return erasure.content_in(ctx.record_at(parse_item_id(id_)[0]), id_)


def _delete_session(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    target = get_session(state, call.tenant, call.session)
    return one(commands.delete_session(target, call.idem, call.expected))


END_SESSION = CommandSpec(
    "end_session", _end_session, "session.ended", _ended, _record_transcript, result_blocks=True
)
DELETE_SESSION = CommandSpec("delete_session", _delete_session, "session.deleted")
