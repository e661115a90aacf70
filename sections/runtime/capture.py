"""A runtime's tool call on one session through the memory's capture rules: the entry the HTTP
route (`POST /v1/sessions/{s}/tool-calls`) calls; `Session.tool_call` does the work
(sections/specs/capture_specs.py has the rules' commands)."""

from __future__ import annotations

from sections.runtime.memory import Memory
from sections.runtime.session import Session


def report(memory: Memory, tenant: str, session: str, tool: str, args: dict | None = None,
           output: object = None, call_id: str | None = None) -> dict:  # fmt: skip
    """Apply the memory's capture rules to one tool call and its result."""
    return Session(memory, tenant, session).tool_call(tool, args, output, call_id=call_id)


async def report_async(memory: Memory, tenant: str, session: str, tool: str,
                       args: dict | None = None, output: object = None,
                       call_id: str | None = None) -> dict:  # fmt: skip
    return await Session(memory, tenant, session).tool_call_async(tool, args, output,
                                                                  call_id=call_id)  # fmt: skip
