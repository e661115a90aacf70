"""The writes on one session's sections, as specs of the command table (command_specs.py):
add, update, remove, configure, commit, end of turn, and compaction for a payload error. Each
decides one record from the session alone (`session_local`)."""

from __future__ import annotations

from eventstore.record import Record
from sections.model import commands, context_commands
from sections.model.commands import Decision, get_session
from sections.model.state import MemoryState
from sections.retrieval.views import ItemView, added_views
from sections.specs.context import CommandContext
from sections.specs.spec import Call, CommandSpec, appended, decided, one


def _add_items(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    section, items = call.args
    target = get_session(state, call.tenant, call.session)
    return one(
        commands.add_items(
            target,
            section,
            items,
            ctx.counter_of(target),
            call.idem,
            call.expected,
            ctx.content_of,
            ctx.summarizer,
        )  # fmt: skip
    )


def _added(
    _ctx: CommandContext, record: Record | None, _decision: Decision | None
) -> list[ItemView]:
    return added_views(appended(record))


def _update_item(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    section, item, changes = call.args
    target = get_session(state, call.tenant, call.session)
    counter = ctx.counter_of(target)
    return one(
        commands.update_item(target, section, item, changes, counter, call.idem, call.expected)
    )


def _remove_items(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    section, ids = call.args
    target = get_session(state, call.tenant, call.session)
    return one(commands.remove_items(target, section, ids, call.idem, call.expected))


def _configure_section(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    section, settings = call.args
    target = get_session(state, call.tenant, call.session)
    return one(commands.configure_section(target, section, settings, call.idem, call.expected))


def _commit(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    (section,) = call.args
    target = get_session(state, call.tenant, call.session)
    return one(commands.commit(target, section, call.idem, call.expected))


def _end_turn(_ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    target = get_session(state, call.tenant, call.session)
    return one(commands.end_turn(target, call.idem, call.expected))


def _compact_for_payload(ctx: CommandContext, state: MemoryState, call: Call) -> Decision:
    section, target_bytes, budget, names, summarizer = call.args
    target = get_session(state, call.tenant, call.session)
    command, outcome = context_commands.compact_for_payload_error(
        target, section, target_bytes, budget, names, ctx.content_of, ctx.counter_of(target),
        summarizer or ctx.summarizer, call.idem, call.expected,
    )  # fmt: skip
    return Decision((command,) if command is not None else (), outcome, target.version)


def _compaction(_ctx: CommandContext, record: Record | None, decision: Decision | None) -> dict:
    if record is None:  # it fitted already: nothing was appended
        return decided(decision).result
    return context_commands.compaction_outcome(record.seq, commands.payload(record))


ADD_ITEMS = CommandSpec("add_items", _add_items, "item.added", _added, session_local=True)
UPDATE_ITEM = CommandSpec("update_item", _update_item, "item.updated", session_local=True)
REMOVE_ITEMS = CommandSpec("remove_items", _remove_items, "item.removed", session_local=True)
CONFIGURE_SECTION = CommandSpec(
    "configure_section", _configure_section, "section.configured", session_local=True
)
COMMIT = CommandSpec("commit", _commit, "section.committed", session_local=True)
END_TURN = CommandSpec("end_turn", _end_turn, "turn.ended", session_local=True)
COMPACT_FOR_PAYLOAD = CommandSpec(
    "compact_for_payload_error", _compact_for_payload, "section.compacted", _compaction,
    session_local=True,
)  # fmt: skip
