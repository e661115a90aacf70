"""The command table: every memory command, each defined once in the module of its domain.

What a spec is and how its steps run: sections/specs/spec.py; what its steps may use:
sections/specs/context.py. The specs, by domain:

| module              | commands                                                                |
|---------------------|-------------------------------------------------------------------------|
| `item_specs`        | ADD_ITEMS, UPDATE_ITEM, REMOVE_ITEMS, CONFIGURE_SECTION, COMMIT,         |
|                     | END_TURN, COMPACT_FOR_PAYLOAD                                           |
| `session_specs`     | CREATE_SESSION, GET_OR_CREATE_SESSION, END_SESSION, DELETE_SESSION       |
| `read_specs`        | READ_ITEMS, READ_STATE, READ_SUMMARIES, TRACE_STREAM, ASSEMBLE_CONTEXT  |
| `search_specs`      | SEARCH, OBSERVE                                                         |
| `erase_flow`        | ERASE_ITEMS, ERASE_SESSION                                              |
| `retention_specs`   | CLEANUP, ERASE_DELETED                                                  |

and, beside the table: the facts (`fact_specs`), capture's trace (`capture_specs`) and AgentOps'
reads (sections/adapters/agentops_specs.py). This module is where callers find them, with the
argument helpers the HTTP routes share with `Memory` and `Session`.
"""

from __future__ import annotations

from sections.specs.erase_flow import ERASE_ITEMS, ERASE_SESSION
from sections.specs.item_specs import (
    ADD_ITEMS,
    COMMIT,
    COMPACT_FOR_PAYLOAD,
    CONFIGURE_SECTION,
    END_TURN,
    REMOVE_ITEMS,
    UPDATE_ITEM,
)
from sections.specs.read_specs import (
    ASSEMBLE_CONTEXT,
    READ_ITEMS,
    READ_STATE,
    READ_SUMMARIES,
    TRACE_STREAM,
)
from sections.specs.retention_specs import CLEANUP, ERASE_DELETED
from sections.specs.search_specs import (
    OBSERVE,
    SEARCH,
    observation_args,
    search_args,
    search_query,
)
from sections.specs.session_specs import (
    CREATE_SESSION,
    DELETE_SESSION,
    END_SESSION,
    GET_OR_CREATE_SESSION,
    check_not_reserved,
    session_id_for,
    transcript_items,
)
from sections.specs.spec import CommandSpec

SPECS: tuple[CommandSpec, ...] = (
    ADD_ITEMS, COMPACT_FOR_PAYLOAD, UPDATE_ITEM, REMOVE_ITEMS, CONFIGURE_SECTION, COMMIT, END_TURN,
    END_SESSION, DELETE_SESSION, CREATE_SESSION, GET_OR_CREATE_SESSION, READ_ITEMS, READ_STATE,
    READ_SUMMARIES, TRACE_STREAM, ASSEMBLE_CONTEXT, SEARCH, OBSERVE, ERASE_ITEMS, ERASE_SESSION,
    CLEANUP, ERASE_DELETED,
)  # fmt: skip

__all__ = [
    "ADD_ITEMS", "ASSEMBLE_CONTEXT", "CLEANUP", "COMMIT", "COMPACT_FOR_PAYLOAD",
    "CONFIGURE_SECTION", "CREATE_SESSION", "DELETE_SESSION", "END_SESSION", "END_TURN",
    "ERASE_DELETED", "ERASE_ITEMS", "ERASE_SESSION", "GET_OR_CREATE_SESSION", "OBSERVE",
    "READ_ITEMS", "READ_STATE", "READ_SUMMARIES", "REMOVE_ITEMS", "SEARCH", "SPECS",
    "TRACE_STREAM", "UPDATE_ITEM", "CommandSpec", "check_not_reserved", "observation_args",
    "search_args", "search_query", "session_id_for", "transcript_items",
]  # fmt: skip
