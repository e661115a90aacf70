"""JAF's `MemoryProvider` over ledgermem (docs/adapters/jaf.md).

`LedgerMemoryProvider` keeps the method names, arguments and return shapes of JAF's memory
providers (xynehq/jaf-py, `jaf.memory`): every method is async and returns a `Success(data)` or a
`Failure(error)`, never raising for a storage problem; conversations come back as
`ConversationMemory` with JAF's `Message` fields. A conversation is a ledgermem session (its id
the conversation id, `user_id` and the first metadata in its creation record), its messages are
the items of its `messages` section, and metadata given later is kept, in order, as items of its
`conversation_metadata` section. Every call is a ledgermem command: writes are records, and
every read leaves an `items.read` record. Nothing here holds state of its own: two providers on
one memory see the same conversations, and a reopened memory gives them back.

It constructs as JAF's providers do, with no ledgermem argument: `InMemoryProvider(config)` and
`create_in_memory_provider(config)` give an in-process memory that nothing outlives (JAF's
in-memory provider); `create_memory_provider_from_env()` picks the store as JAF's factory does from
`JAF_MEMORY_TYPE`: that in-process memory, the file log of a data directory, or a shared
PostgreSQL store (sections/runtime/store_memory.py). `LedgerMemoryProvider(memory)` is the way to
hand it a durable `Memory` of one's own.

Any string JAF takes as a conversation id is one ("chat 1", "Zoë", a 300-character key): the
session's id is its encoding by sections/adapters/foreign_ids.py, and conversations come back with
the caller's id exactly.

JAF's shapes (`Success`, `Failure`, its errors, `Message`, `ConversationMemory`, `MemoryQuery`) and
the conversions of messages are in sections/adapters/jaf_shapes.py. Results are made of JAF's own
classes when JAF is installed (its engine tests `isinstance(result, Failure)`), of that module's
otherwise; this module's `Success`, `Failure`, ... are those same classes (`shapes()`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from eventstore.errors import InvalidInput
from sections.adapters.jaf_provider import MESSAGES, METADATA, LedgerMemoryProvider
from sections.adapters.jaf_shapes import MESSAGE_FIELDS, PROVIDER, ROLES, SEED_NAMES, Result, shapes
from sections.model.config import MemoryConfig
from sections.runtime.memory import Memory

# JAF's InMemoryConfig defaults (max_conversations, max_messages_per_conversation)
JAF_MAX_CONVERSATIONS = JAF_MAX_MESSAGES = 1000

__all__ = [
    "MESSAGE_FIELDS",
    "METADATA",
    "MESSAGES",
    "PROVIDER",
    "ROLES",
    "InMemoryProvider",
    "LedgerMemoryProvider",
    "Result",
    "create_in_memory_provider",
    "create_memory_provider_from_env",
    *SEED_NAMES,
]  # fmt: skip  (SEED_NAMES: Success, Failure, the errors, Message, ...: see __getattr__)


def __getattr__(name: str) -> Any:
    """`Success`, `Failure`, the errors, `Message`, ...: JAF's classes when JAF is installed,
    sections/adapters/jaf_shapes.py's otherwise (decided when first asked for)."""
    if name in SEED_NAMES:
        return getattr(shapes(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---- JAF's constructors ------------------------------------------------------------------------


class InMemoryProvider(LedgerMemoryProvider):
    """JAF's `InMemoryProvider(config)`: a provider over an in-process memory that nothing
    outlives (removed on `close()` or at exit). `config` is JAF's `InMemoryConfig` or anything
    with its `max_conversations` and `max_messages_per_conversation` (JAF's defaults, 1000
    each, when absent)."""

    def __init__(self, config: object = None) -> None:
        super().__init__(
            max_conversations=getattr(config, "max_conversations", JAF_MAX_CONVERSATIONS),
            max_messages=getattr(config, "max_messages_per_conversation", JAF_MAX_MESSAGES),
            store="in-process",
        )
        self.config = config


def create_in_memory_provider(config: object = None) -> InMemoryProvider:
    """JAF's `create_in_memory_provider(config=None)`: `InMemoryProvider(config)`."""
    return InMemoryProvider(config)


# ---- the factory -------------------------------------------------------------------------------


async def create_memory_provider_from_env(
    external_clients: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None
) -> Result:
    """A provider as JAF's factory picks one from the environment (`env`, default
    `os.environ`), here over ledgermem:

    - `JAF_MEMORY_TYPE=memory` (JAF's default): the in-process memory of `InMemoryProvider`,
      bounded by `JAF_MEMORY_MAX_CONVERSATIONS` and `JAF_MEMORY_MAX_MESSAGES` (JAF's default,
      1000 each); unless `JAF_LEDGERMEM_DATA` or `LEDGERMEM_DATA` names a data directory: then
      that directory's file log, as `file`;
    - `JAF_MEMORY_TYPE=file`: the file log of the data directory `JAF_LEDGERMEM_DATA` or
      `LEDGERMEM_DATA` (created if new; required);
    - `JAF_MEMORY_TYPE=postgres`: the shared store `JAF_POSTGRES_CONNECTION_STRING` or
      `LEDGERMEM_STORE` (initialized by `ledgermem init-store`), led for the tenant's partition
      from the data directory above, which holds the store's key (sections/runtime/store_memory.py);
    - `JAF_MEMORY_TYPE=redis`: the same over a Redis store (issue 31), at JAF's own variables:
      `JAF_REDIS_URL`, else `LEDGERMEM_STORE` when it is a redis:// URL, else the URL made of
      `JAF_REDIS_HOST` (localhost), `JAF_REDIS_PORT` (6379), `JAF_REDIS_DB` (0) and
      `JAF_REDIS_PASSWORD`, as JAF's factory reads them. The server must fsync every write
      (appendonly yes, appendfsync always), or the factory answers a Failure saying so.
      `JAF_REDIS_PREFIX` and `JAF_REDIS_TTL` do not apply: the store's keys are its own
      (eventstore/redis/keys.py) and records are never expired (docs/adapters/jaf.md);
    - `JAF_LEDGERMEM_TENANT` (default `default`) is the tenant;
    - for `file`, `postgres` and `redis`, `JAF_MEMORY_MAX_CONVERSATIONS` and `JAF_MEMORY_MAX_MESSAGES`,
      when set, are the memory's `max_sessions` and the provider's `max_messages` (unset: no
      bound, nothing evicted from a durable memory).

    Anything else: Failure(MemoryConnectionError) naming what is supported, as JAF answers an
    unsupported type; so is a store that cannot be opened.
    `external_clients` (JAF's Redis or PostgreSQL client objects) are not used: ledgermem opens
    its own store."""
    seed = shapes()
    env = os.environ if env is None else env
    kind = env.get("JAF_MEMORY_TYPE", "memory").strip().lower()
    data = env.get("JAF_LEDGERMEM_DATA") or env.get("LEDGERMEM_DATA")
    tenant = env.get("JAF_LEDGERMEM_TENANT") or "default"
    if kind not in ("memory", "file", "postgres", "redis"):
        return seed.Failure(seed.MemoryConnectionError(f"Unsupported memory type: {kind}",
                                                       "Factory"))  # fmt: skip
    try:
        if kind == "memory" and not data:
            return seed.Success(InMemoryProvider(_JafLimits(
                _positive(env, "JAF_MEMORY_MAX_CONVERSATIONS") or JAF_MAX_CONVERSATIONS,
                _positive(env, "JAF_MEMORY_MAX_MESSAGES") or JAF_MAX_MESSAGES)))  # fmt: skip
        if not data:
            return seed.Failure(seed.MemoryConnectionError(
                "JAF_LEDGERMEM_DATA (or LEDGERMEM_DATA) must name the ledgermem data directory",
                "Factory",
            ))  # fmt: skip
        limits = {name: _positive(env, var) for name, var in (
            ("max_sessions", "JAF_MEMORY_MAX_CONVERSATIONS"),
            ("max_messages", "JAF_MEMORY_MAX_MESSAGES"))}  # fmt: skip
        config = MemoryConfig(max_sessions=limits["max_sessions"])
        if kind in ("postgres", "redis"):
            from sections.runtime.store_memory import StoreMemory

            url: str | None = None
            if kind == "redis":
                url = _redis_url(env)
            else:
                url = env.get("JAF_POSTGRES_CONNECTION_STRING") or env.get("LEDGERMEM_STORE")
            if not url:
                return seed.Failure(seed.MemoryConnectionError(
                    "JAF_POSTGRES_CONNECTION_STRING (or LEDGERMEM_STORE) must name the store",
                    "Factory",
                ))  # fmt: skip
            store = StoreMemory.open(url, data, tenant=tenant, config=config)
            engine = "redis" if kind == "redis" else "postgresql"
            provider = LedgerMemoryProvider(store.memory, tenant=tenant, closing=store,
                                            store=engine, max_messages=limits["max_messages"])  # fmt: skip
            return seed.Success(provider)
        memory = Memory.open(data, tenant=tenant, config=config)
    except Exception as exc:  # JAF answers a store it cannot open with a Failure
        return seed.Failure(seed.MemoryConnectionError(f"cannot open the {kind} store: {exc}",
                                                       "Factory", exc))  # fmt: skip
    provider = LedgerMemoryProvider(memory, tenant=tenant, closing=memory,
                                    max_messages=limits["max_messages"])  # fmt: skip
    return seed.Success(provider)


def _redis_url(env: Mapping[str, str]) -> str:
    """The Redis store's URL from JAF's variables (jaf/memory/factory.py reads the same)."""
    if env.get("JAF_REDIS_URL"):
        return env["JAF_REDIS_URL"]
    store = env.get("LEDGERMEM_STORE") or ""
    if store.startswith(("redis://", "rediss://", "unix://")):
        return store
    host = env.get("JAF_REDIS_HOST") or "localhost"
    port = _positive(env, "JAF_REDIS_PORT") or 6379
    db = env.get("JAF_REDIS_DB") or "0"
    if not db.isdigit():
        raise InvalidInput(f"JAF_REDIS_DB must be a database number, not {db!r}")
    password = env.get("JAF_REDIS_PASSWORD")
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"redis://{auth}{host}:{port}/{db}"


class _JafLimits:
    """JAF's `InMemoryConfig` limits, read from its variables."""

    def __init__(self, max_conversations: int, max_messages_per_conversation: int) -> None:
        self.max_conversations = max_conversations
        self.max_messages_per_conversation = max_messages_per_conversation


def _positive(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise InvalidInput(f"{name} must be a positive integer, not {value!r}")
    return int(value)
