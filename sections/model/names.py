"""The names the memory gives a meaning to, each declared once: the reserved session and section,
the observations section and its vocabulary, and the sessions retention keeps.

A leaf of the model: every module may import it, and it imports nothing.
"""

from __future__ import annotations

SESSION_SECTION = "_session"  # reserved: records of commands that span sections
# The tenant's own session: tenant-wide observations and facts live there. Clients cannot
# create it; it is never listed, and retention never removes it.
TENANT_SESSION = "_tenant"

# The conversation: its items render as chat messages, a tool call's result joins its call's
# group there, and a session's summary counts and quotes its messages.
CONVERSATION = "messages"
OBSERVATIONS = "observations"  # long-term memory (sections/retrieval/observations.py)
# An observation's type is any non-blank string of at most OBSERVATION_TYPE_MAX characters (as
# AgentOps' service takes it, whose Agent CRD lets users name any type); these are the suggested
# ones, AgentOps' own, which the schemas list (docs/agentops.md).
OBSERVATION_TYPES = (
    "decision", "discovery", "bugfix", "pattern", "architecture", "config", "learning",
    "preference",
    "security", "audit",  # what AgentOps' runtime hooks write (docs/agentops.md)
)  # fmt: skip
OBSERVATION_TYPE_MAX = 50


def observation_type_error(kind: object) -> str | None:
    """Why `kind` cannot be an observation's type, or None."""
    if not isinstance(kind, str) or not kind.strip():
        return f"an observation's type must be a non-blank string, not {kind!r}"
    if len(kind) > OBSERVATION_TYPE_MAX:
        return f"an observation's type is at most {OBSERVATION_TYPE_MAX} characters"
    return None


# Where an observation is kept: the session's own `observations` section, or the tenant's, for
# one user (`metadata.user_id`: the sessions of that user see it) or for every session.
OBSERVATION_SCOPES = ("session", "user", "tenant")
# The metadata key naming a user: a session's (its creation metadata: the sessions sharing it are
# that user's) and a tenant-wide observation's (only that user's sessions see it).
USER_ID = "user_id"

# Sessions an adapter keeps what outlives any one session in (AgentOps' project holders,
# `_agentops:<project>:<scope>`, sections/adapters/agentops.py). Like `_tenant`, retention never
# counts or removes them: declared here, below retention, so the model needs no adapter.
HOLDER_PREFIX = "_agentops:"
