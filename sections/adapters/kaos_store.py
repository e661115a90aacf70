"""The memory a KAOS `LocalMemory` stands on when it is given none, and KAOS's session bound
as a command (sections/adapters/kaos.py, docs/adapters/kaos.md)."""

from __future__ import annotations

import os
from typing import Any

from eventstore.record import Record
from sections.adapters.own_memory import open_scratch
from sections.model import retention
from sections.model.commands import Decision
from sections.model.config import MemoryConfig
from sections.model.state import MemoryState
from sections.runtime.memory import Memory
from sections.specs.context import CommandContext
from sections.specs.retention_specs import erases
from sections.specs.spec import Call, CommandSpec


def _make_room_decide(ctx: CommandContext, state: MemoryState, call: Call) -> Decision | None:
    """KAOS's `max_sessions`: a tenant with `bound` sessions or more loses its least recently
    active tenth (at least one) before a creation, each a `session.deleted` with reason
    `max_sessions` (and erased after, with `retention_erase`), as ledgermem's own retention
    records a removal; None (nothing appended) while there is room."""
    (bound,) = call.args
    live = retention.tenant_sessions(state, call.tenant)
    if len(live) < bound:
        return None
    victims = sorted(live, key=retention.activity)[: max(1, bound // 10)]
    erase = ctx.config.retention_erase
    records = [retention.deletion(s, retention.MAX_SESSIONS, erase) for s in victims]
    return Decision(records, [s.id for s in victims])


def _made_room(ctx: CommandContext, _record: Record | None, decision: Decision | None) -> list:
    if decision is None:
        return []
    if erases(decision):
        ctx.erase_retained()
    return list(decision.result)


MAKE_ROOM = CommandSpec("kaos_make_room", _make_room_decide, result=_made_room,
                        result_blocks=erases)  # fmt: skip


def open_own(
    data_dir: str | os.PathLike[str] | None, max_sessions: int, tenant: str | None
) -> tuple[Memory, str | None]:
    """The memory a `LocalMemory` opens for itself: in `data_dir` (durable), or in a new
    temporary directory (no fsync; returned, to be removed when the memory is closed)."""
    config = MemoryConfig(max_sessions=max_sessions)
    options: dict[str, Any] = {"config": config, "tenant": tenant or "default"}
    if data_dir is not None:
        return Memory.open(data_dir, **options), None
    return open_scratch("ledgermem-kaos-", **options)
