"""ledgermem's memory for agents: sessions of typed, budgeted sections, kept as a projection of a
signed, hash-chained log (docs/sections.md; the public names, one line each: docs/api.md).

    from sections import Memory

    with Memory.open("data") as memory:
        session = memory.session("s1")
        session.add("messages", "What changed in Q3?", role="user")
        messages = session.context(budget=2000)

Every name below is imported from its module on first use, so `import sections` costs nothing
until then; type checkers read the imports under TYPE_CHECKING.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventstore.lazy import lazy_names

__all__ = [
    # the memory, and one session of it
    "Memory", "Session", "StoreMemory", "StoreBusy", "Durability",
    # configuration
    "MemoryConfig", "SectionConfig", "CaptureRules", "TokenCounter", "load_config",
    # what callers get back
    "ItemView", "SearchHit", "Outcome", "Fact", "Record",
    # the typed errors
    "InvalidInput", "MemoryError_", "ConfigError", "ConflictingSettings", "FactConflict",
    "UserConflict", "NotFound", "SessionNotFound", "SectionNotFound", "ItemNotFound", "SessionExists",
    "Refused", "ImmutableSection", "BudgetExceeded", "ItemTooLarge", "NotAdmitted",
    "CannotCompact", "SessionEnded", "IdempotencyConflict", "VersionConflict",
    "SummarizerFailed",
    # the adapters' entry points (sections/adapters/: JAF, KAOS, MARSYS)
    "LedgerMemoryProvider", "create_memory_provider_from_env", "LocalMemory", "NullMemory",
    "memory_from_env", "ManagedConversationMemory", "ManagedMemoryConfig",
]  # fmt: skip

# The module each name is imported from, on first use (`__getattr__`).
_FROM = {
    "sections.runtime.memory": ("Memory",),
    "sections.runtime.session": ("Session",),
    "sections.runtime.store_memory": ("StoreMemory", "StoreBusy"),
    "eventstore.writer": ("Durability",),
    "sections.model.config": ("MemoryConfig", "SectionConfig", "load_config"),
    "sections.model.capture_rules": ("CaptureRules",),
    "sections.model.tokens": ("TokenCounter",),
    "sections.retrieval.views": ("ItemView", "SearchHit"),
    "sections.retrieval.observations": ("Outcome",),
    "sections.retrieval.facts": ("Fact",),
    "eventstore.record": ("Record",),
    "eventstore.errors": ("InvalidInput",),
    "sections.errors": (
        "MemoryError_", "ConfigError", "ConflictingSettings", "FactConflict", "NotFound",
        "SessionNotFound", "SectionNotFound", "ItemNotFound", "SessionExists", "Refused",
        "ImmutableSection", "BudgetExceeded", "ItemTooLarge", "NotAdmitted", "CannotCompact",
        "SessionEnded", "IdempotencyConflict", "VersionConflict", "SummarizerFailed",
        "UserConflict",
    ),
    "sections.adapters.jaf": ("LedgerMemoryProvider", "create_memory_provider_from_env"),
    "sections.adapters.kaos": ("LocalMemory", "NullMemory", "memory_from_env"),
    "sections.adapters.marsys": ("ManagedConversationMemory", "ManagedMemoryConfig"),
}  # fmt: skip
_WHERE = {name: module for module, names in _FROM.items() for name in names}

if TYPE_CHECKING:
    from eventstore.errors import InvalidInput
    from eventstore.record import Record
    from eventstore.writer import Durability
    from sections.adapters.jaf import LedgerMemoryProvider, create_memory_provider_from_env
    from sections.adapters.kaos import LocalMemory, NullMemory, memory_from_env
    from sections.adapters.marsys import ManagedConversationMemory, ManagedMemoryConfig
    from sections.errors import (
        BudgetExceeded,
        CannotCompact,
        ConfigError,
        ConflictingSettings,
        FactConflict,
        IdempotencyConflict,
        ImmutableSection,
        ItemNotFound,
        ItemTooLarge,
        MemoryError_,
        NotAdmitted,
        NotFound,
        Refused,
        SectionNotFound,
        SessionEnded,
        SessionExists,
        SessionNotFound,
        SummarizerFailed,
        UserConflict,
        VersionConflict,
    )
    from sections.model.capture_rules import CaptureRules
    from sections.model.config import MemoryConfig, SectionConfig, load_config
    from sections.model.tokens import TokenCounter
    from sections.retrieval.facts import Fact
    from sections.retrieval.observations import Outcome
    from sections.retrieval.views import ItemView, SearchHit
    from sections.runtime.memory import Memory
    from sections.runtime.session import Session
    from sections.runtime.store_memory import StoreBusy, StoreMemory

__getattr__, __dir__ = lazy_names(__name__, _WHERE, globals())
