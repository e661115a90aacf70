"""Section configuration: budgets, eviction policies, lifetimes, and the defaults.

The config in force for a session is written into its `session.created` record, so replay never
depends on this module's current defaults.
"""

from __future__ import annotations

import functools
import logging
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from eventstore.identifiers import is_identifier

from .errors import ConfigError

log = logging.getLogger("ledgermem.config")

POLICIES = ("fifo", "lifo", "lru", "lfu", "priority", "refuse", "none")
LIFETIMES = ("turn", "process", "commit", "durable")
SESSION_SECTION = "_session"  # reserved: records of commands that span sections
# Compaction (docs/compaction.md): off unless `compact_at_tokens` is set; the other two apply
# only then. Written into records only when set, so configs without it keep their old bytes.
COMPACTION_SETTINGS = ("compact_at_tokens", "compact_keep_turns", "compact_tool_chars")
SETTINGS = frozenset(
    ("budget_tokens", "policy", "lifetime", "mutable", "searchable", "audit_reads",
     *COMPACTION_SETTINGS)
)  # fmt: skip
DEFAULT_KEEP_TURNS = 1  # MARSYS's `grace_recent_messages`: at least the last assistant round
DEFAULT_TOOL_CHARS = 4000  # about MARSYS's 1200-token `max_tool_message_tokens`


@dataclass(frozen=True)
class SectionConfig:
    name: str
    budget_tokens: int | None = None  # None: unbounded
    policy: str = "fifo"
    lifetime: str = "durable"
    mutable: bool = True
    searchable: bool = False
    # Every read leaves a record, whatever the config says: kept as a field because old logs
    # wrote it, but only true is accepted (from_json turns an old record's false into true).
    audit_reads: bool = True
    # Compaction instead of eviction once the section holds more than this (None: never).
    compact_at_tokens: int | None = None
    compact_keep_turns: int = DEFAULT_KEEP_TURNS  # assistant rounds kept whole at the end
    compact_tool_chars: int = DEFAULT_TOOL_CHARS  # tool outputs longer than this are cut first

    def __post_init__(self) -> None:
        if not is_identifier(self.name) or self.name.startswith("_"):
            raise ConfigError(
                f"section name {self.name!r} is not an identifier (or starts with '_')"
            )
        budget = self.budget_tokens
        if budget is not None and (type(budget) is not int or budget <= 0):
            raise ConfigError(
                f"section {self.name!r}: budget_tokens must be a positive integer or unbounded"
            )
        if self.policy not in POLICIES:
            raise ConfigError(
                f"section {self.name!r}: policy {self.policy!r} is not one of {', '.join(POLICIES)}"
            )
        if self.lifetime not in LIFETIMES:
            raise ConfigError(
                f"section {self.name!r}: lifetime {self.lifetime!r} is not one of {', '.join(LIFETIMES)}"
            )
        for flag in ("mutable", "searchable", "audit_reads"):
            if type(getattr(self, flag)) is not bool:
                raise ConfigError(f"section {self.name!r}: {flag} must be true or false")
        if self.policy == "none" and budget is not None and self.mutable:
            raise ConfigError(
                f"section {self.name!r}: policy 'none' never evicts, so it needs an unbounded budget "
                "or an immutable section"
            )
        self._check_compaction()
        if not self.audit_reads:
            raise ConfigError(
                f"section {self.name!r}: audit_reads cannot be false: every read leaves a "
                "record; remove the setting"
            )

    def _check_compaction(self) -> None:
        at = self.compact_at_tokens
        for name in COMPACTION_SETTINGS:
            value = getattr(self, name)
            if (value is not None or name != "compact_at_tokens") and (
                type(value) is not int or value <= 0
            ):
                raise ConfigError(f"section {self.name!r}: {name} must be a positive integer")
        if at is not None and self.budget_tokens is not None and at > self.budget_tokens:
            raise ConfigError(
                f"section {self.name!r}: compact_at_tokens ({at}) must not exceed budget_tokens "
                f"({self.budget_tokens}): compaction runs before the budget evicts"
            )

    @property
    def compacts(self) -> bool:
        return self.compact_at_tokens is not None

    def to_json(self) -> dict:
        # Written out rather than dataclasses.asdict, which deep-copies and is slow in replay.
        data = {
            "budget_tokens": self.budget_tokens,
            "policy": self.policy,
            "lifetime": self.lifetime,
            "mutable": self.mutable,
            "searchable": self.searchable,
            "audit_reads": self.audit_reads,
        }
        if self.compacts:
            data.update((name, getattr(self, name)) for name in COMPACTION_SETTINGS)
        return data

    @classmethod
    def from_json(cls, name: str, data: dict) -> SectionConfig:
        unknown = set(data) - SETTINGS - {"items"}
        if unknown:
            raise ConfigError(f"section {name!r}: unknown settings {sorted(unknown)}")
        settings = {k: v for k, v in data.items() if k != "items"}
        if settings.get("audit_reads") is False:  # an old record: replay it, traced
            _warn_untraced()
            settings["audit_reads"] = True
        return cls(name=name, **settings)


def refuse_untraced(name: str, settings: dict) -> None:
    """New settings (config files, overrides, configure) may not ask for untraced reads; old
    records that did still replay (`SectionConfig.from_json`)."""
    if "audit_reads" in settings and settings["audit_reads"] is not True:
        raise ConfigError(
            f"section {name!r}: audit_reads cannot be false: every read leaves a record; "
            "remove the setting"
        )


@functools.cache  # once per process, not once per replayed record
def _warn_untraced() -> None:
    log.warning("audit_reads=false in the log is ignored: every read is traced")


OBSERVATIONS = "observations"  # long-term memory (sections/observations.py)


def _s(name: str, budget: int | None, policy: str, lifetime: str, **flags: bool) -> SectionConfig:
    return SectionConfig(name, budget, policy, lifetime, **flags)


# The defaults; docs/sections.md has the same table with the reasons for each budget.
DEFAULT_SECTIONS: tuple[SectionConfig, ...] = (
    _s("role", 2_000, "none", "durable", mutable=False),
    _s("playbooks", 8_000, "none", "durable", mutable=False),
    _s("plan_examples", 4_000, "none", "durable", mutable=False),
    _s("planning_context", 4_000, "fifo", "turn"),
    _s("working", 8_000, "lru", "turn"),
    _s("plan_history", 4_000, "fifo", "durable"),
    _s("last_intent", 500, "lifo", "durable"),
    _s("reflection", 2_000, "fifo", "durable"),
    _s("messages", 32_000, "fifo", "durable", searchable=True),
    _s("actions", 8_000, "fifo", "durable", searchable=True),
    _s("findings", 16_000, "priority", "durable", searchable=True),
    _s("documents", None, "none", "durable", searchable=True),
    _s(OBSERVATIONS, None, "none", "durable", searchable=True),
)


@dataclass(frozen=True)
class MemoryConfig:
    """The sections a new session gets, and the content of its immutable sections."""

    sections: tuple[SectionConfig, ...] = DEFAULT_SECTIONS
    seed_items: dict[str, tuple[dict, ...]] | None = None  # immutable content, by section
    # The token counter new sessions count with (sections/tokens.py); None: the memory's own.
    token_counter: str | None = None

    def with_overrides(self, overrides: dict[str, dict] | None) -> MemoryConfig:
        """Per-session overrides: {section: {setting: value}}; a new name adds a section."""
        if not overrides:
            return self
        by_name = {s.name: s for s in self.sections}
        for name, changes in overrides.items():
            if type(changes) is not dict:
                raise ConfigError(f"override for section {name!r} must be an object")
            refuse_untraced(name, changes)
            base = by_name.get(name)
            if base is None:
                by_name[name] = SectionConfig.from_json(name, changes)
            else:
                unknown = set(changes) - SETTINGS
                if unknown:
                    raise ConfigError(f"section {name!r}: unknown settings {sorted(unknown)}")
                by_name[name] = replace(base, **changes)
        return replace(self, sections=tuple(by_name.values()))


def load_config(path: str | Path) -> MemoryConfig:
    """Read a TOML file of `[sections.NAME]` tables; `items` gives an immutable section's content.

    ```toml
    [sections.role]
    budget_tokens = 2000
    items = [{ content = "You are a buy-side analyst." }]

    [sections.scratch]        # a new section
    budget_tokens = 1000
    policy = "lru"
    lifetime = "turn"
    ```

    A top-level `token_counter = "cl100k_base"` picks the counter new sessions count with.
    """
    try:
        data = tomllib.loads(Path(path).read_text("utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    sections = data.get("sections", {})
    unknown = set(data) - {"sections", "token_counter"}
    if unknown:
        raise ConfigError(f"{path}: unknown top-level keys {sorted(unknown)}")
    token_counter = data.get("token_counter")
    if token_counter is not None:
        from .tokens import counter_named  # the counters import config's errors

        counter_named(token_counter)
    config = MemoryConfig().with_overrides(
        {k: {x: y for x, y in v.items() if x != "items"} for k, v in sections.items()}
    )
    seeds = {name: tuple(table["items"]) for name, table in sections.items() if "items" in table}
    return replace(config, seed_items=seeds or None, token_counter=token_counter)
