"""The MCP server: streams/mcp/mcp_tools.py's tools and resources registered with the official SDK.

Which memory a call reaches, and which session a connection writes to, is the caller's part:
`build_server(resolve)` takes a function from the SDK's request `Context` and the scope the call
needs (`read`, `write`) to a `Caller`. `ledgermem mcp` resolves every call to one backend,
session and user chosen at start; the service's /mcp resolves each request's own token
(streams/mcp/mcp_mount.py). Refusals become MCP errors: a tool's an `is_error` result with the
refusal's text (the model can read it and correct the call), a resource's a JSON-RPC error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import orjson
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from pydantic import Field

from sections.retrieval.observations import SCOPES, TYPE_MAX, TYPES
from sections.retrieval.views import MAX_TOP_K
from streams.apidoc.models import NOT_BLANK
from streams.mcp import mcp_tools
from streams.mcp.mcp_tools import SECTION_URI, SESSION_URI, Backend, Refusal

INSTRUCTIONS = (
    "Long-term memory on a signed, append-only log. Call mem_context at the start of a task; "
    "mem_save decisions, discoveries, fixes and preferences worth keeping (a repeated save of the "
    "same topic_key revises it, identical content is counted once); mem_search before you redo "
    "work. Every change is a record in the log."
)


@dataclass(frozen=True)
class Caller:
    """Who a call acts for: a tenant's memory, the session its saves and context use, and the
    user the connection names (None: its session's, if it has one; mcp_tools.user_of)."""

    backend: Backend
    session: str
    user: str | None = None


Resolve = Callable[[Context, str], Awaitable[Caller]]

# Built from the memory's own lists, so the tools' schemas cannot drift from what it accepts:
# any non-blank type of at most TYPE_MAX characters, TYPES the suggested ones.
ObservationType = Annotated[
    str,
    Field(
        min_length=1,
        max_length=TYPE_MAX,
        pattern=NOT_BLANK,
        description=f"what kind of knowledge this is: {', '.join(TYPES)}, or any other "
        f"non-blank name of at most {TYPE_MAX} characters",
        examples=list(TYPES),
    ),
]
Scope = Literal[SCOPES]  # type: ignore[valid-type]  # why: a Literal of a tuple named at run time, which only the interpreter expands


def _text(value: dict) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def build_server(resolve: Resolve, name: str = "ledgermem") -> MCPServer:
    server = MCPServer(name, instructions=INSTRUCTIONS, log_level="WARNING")

    async def tool(ctx: Context, need: str, call: Callable[[Caller], Awaitable[dict]]) -> dict:
        try:
            return await call(await resolve(ctx, need))
        except Refusal as exc:
            raise ToolError(str(exc)) from None

    async def resource(ctx: Context, call: Callable[[Caller], Awaitable[dict]]) -> str:
        try:
            return _text(await call(await resolve(ctx, "read")))
        except Refusal as exc:
            if exc.code == "not_found":
                raise ResourceNotFoundError(str(exc)) from None
            raise ResourceError(str(exc)) from None

    @server.tool(
        name="mem_save",
        description="Save an observation to long-term memory. Scope 'user' (the default when the "
        "connection has a user) for every session of this user, 'tenant' (the default otherwise) "
        "for every session of the tenant, 'session' in this connection's session only. The same "
        "topic_key in the same scope revises the earlier one; identical content within 15 "
        "minutes is counted as a duplicate (tier 'duplicate'), not saved twice.",
    )
    async def mem_save(
        type: ObservationType,
        title: Annotated[str, Field(description="a short title, at most 500 characters")],
        content: Annotated[str, Field(description="the observation itself")],
        ctx: Context,
        tags: Annotated[list[str] | None, Field(description="labels to filter by")] = None,
        topic_key: Annotated[
            str | None, Field(description="a stable key: a later save of it revises this one")
        ] = None,
        scope: Annotated[
            Scope | None,
            Field(
                description="'user', 'tenant' or 'session'; default 'user' with a user, else "
                "'tenant'"
            ),
        ] = None,
    ) -> dict[str, Any]:
        return await tool(
            ctx,
            "write",
            lambda c: mcp_tools.save(
                c.backend, c.session, type, title, content, tags, topic_key, scope, c.user
            ),
        )

    @server.tool(
        name="mem_search",
        description="Search long-term memory (every session of this tenant; with a user, never "
        "another user's sessions or observations; BM25, best first). Words are ORed; hits carry "
        "a snippet with the matched words in [brackets].",
    )
    async def mem_search(
        query: Annotated[str, Field(description="words to look for")],
        ctx: Context,
        limit: Annotated[int, Field(description=f"hits at most, 1 to {MAX_TOP_K}")] = 10,
    ) -> dict[str, Any]:
        return await tool(
            ctx, "read", lambda c: mcp_tools.search(c.backend, query, limit, c.session, c.user)
        )

    @server.tool(
        name="mem_context",
        description="The context to start a task with: the newest observations (this session's, "
        "the tenant's and this user's) and the summaries of the sessions that ended last, as "
        "system messages and as one text.",
    )
    async def mem_context(
        ctx: Context,
        limit: Annotated[
            int, Field(description=f"observations and summaries at most, 1 to {MAX_TOP_K}")
        ] = 10,
        query: Annotated[
            str | None,
            Field(
                description="the task at hand: ranks observations, and recalls the relevant "
                "past of the user's earlier sessions into the context"
            ),
        ] = None,
    ) -> dict[str, Any]:
        return await tool(
            ctx, "read", lambda c: mcp_tools.context(c.backend, c.session, limit, c.user, query)
        )

    @server.resource(
        SESSION_URI,
        name="session",
        description="A session: metadata, version, times, and its sections (settings, items, "
        "tokens). Its id percent-encoded.",
        mime_type="application/json",
    )
    async def session(session: str, ctx: Context) -> str:
        return await resource(ctx, lambda c: mcp_tools.session_info(c.backend, session))

    @server.resource(
        SECTION_URI,
        name="section",
        description="A section of a session: its live items, oldest first (read-only; ids "
        "percent-encoded).",
        mime_type="application/json",
    )
    async def section(session: str, section: str, ctx: Context) -> str:
        return await resource(ctx, lambda c: mcp_tools.section(c.backend, session, section))

    return server
