"""Section configuration: budgets, eviction policies, lifetimes, and the defaults.

The config in force for a session is written into its `session.created` record, so replay never
depends on this module's current defaults.
"""

from __future__ import annotations

import functools
import logging
import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

from eventstore.identifiers import is_identifier
from sections.errors import ConfigError, ConflictingSettings
from sections.model.capture_rules import INJECT_KEY, SAVE_KEY, CaptureRules
from sections.model.capture_rules import load as load_capture_rules
from sections.model.names import CONVERSATION, OBSERVATIONS
from sections.model.tokens import DEFAULT_COUNTER, counter_named

log = logging.getLogger("ledgermem.config")

POLICIES = ("fifo", "lifo", "lru", "lfu", "priority", "refuse", "none")
LIFETIMES = ("turn", "process", "commit", "durable")
# Compaction (docs/compaction.md): off unless `compact_at_tokens` is set; the other two apply
# only then. Written into records only when set, so configs without it keep their old bytes.
COMPACTION_SETTINGS = ("compact_at_tokens", "compact_keep_turns", "compact_tool_chars")
# Retention (docs/sections.md, "Retention"): a bound on the number of items beside the token
# budget. Written into records only when set, like compaction.
RETENTION_SETTINGS = ("max_items",)
SETTINGS = frozenset(
    ("budget_tokens", "policy", "lifetime", "mutable", "searchable", "audit_reads",
     *COMPACTION_SETTINGS, *RETENTION_SETTINGS)
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
    # At most this many items (None: no bound); an add past it evicts by the policy.
    max_items: int | None = None

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
            raise ConflictingSettings(
                f"section {self.name!r}: policy 'none' never evicts, so it needs an unbounded budget "
                "or an immutable section"
            )
        max_items = self.max_items
        if max_items is not None and (type(max_items) is not int or max_items <= 0):
            raise ConfigError(
                f"section {self.name!r}: max_items must be a positive integer or unset"
            )
        if self.policy == "none" and max_items is not None and self.mutable:
            raise ConflictingSettings(
                f"section {self.name!r}: policy 'none' never evicts, so it cannot bound max_items "
                "of a mutable section; choose a policy that evicts, or 'refuse'"
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
            raise ConflictingSettings(
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
        if self.max_items is not None:
            data["max_items"] = self.max_items
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
    _s(CONVERSATION, 32_000, "fifo", "durable", searchable=True),
    _s("actions", 8_000, "fifo", "durable", searchable=True),
    _s("findings", 16_000, "priority", "durable", searchable=True),
    _s("documents", None, "none", "durable", searchable=True),
    _s(OBSERVATIONS, None, "none", "durable", searchable=True),
)


DEFAULT_TTL_INTERVAL = 60  # seconds between the service's TTL cleanups
RETENTION_KEYS = frozenset(
    ("max_sessions", "erase", "session_ttl_seconds", "ttl_interval_seconds", "tenants")
)


def _check_limit(name: str, value: object) -> None:
    if value is not None and (type(value) is not int or value <= 0):
        raise ConfigError(f"{name} must be a positive integer or unset")


def check_seconds(
    name: str, value: object, error: type[Exception], positive: bool = False
) -> int | float:
    """A number of seconds: an int or a finite float, not a boolean, >= 0 (> 0 if `positive`).
    Returns it; raises `error` naming the problem otherwise."""
    if (type(value) is not int and type(value) is not float) or not math.isfinite(value):
        raise error(f"{name} must be a finite number of seconds")
    if value < 0 or (positive and value == 0):
        raise error(f"{name} must be {'positive' if positive else 'zero or more'}")
    return value


def check_share(value: object, error: type[Exception]) -> float:
    """A share of a budget: a number from 0 to 1 (not a boolean). Returns it."""
    if (type(value) is not int and type(value) is not float) or not 0 <= value <= 1:
        raise error("the recall share must be a number from 0 to 1")
    return float(value)


@dataclass(frozen=True)
class MemoryConfig:
    """The sections a new session gets, and the content of its immutable sections."""

    sections: tuple[SectionConfig, ...] = DEFAULT_SECTIONS
    seed_items: dict[str, tuple[dict, ...]] | None = None  # immutable content, by section
    # The token counter new sessions count with (sections/model/tokens.py); None: the memory's own.
    token_counter: str | None = None
    capture: CaptureRules = CaptureRules()  # declarative capture (sections/model/capture_rules.py)
    # Retention (docs/sections.md, "Retention"). None of it goes into records as config: what
    # it decides does (each removal, with its reason), so replay never depends on it.
    max_sessions: int | None = None  # per tenant; the reserved `_tenant` never counts
    tenant_max_sessions: dict[str, int | None] | None = None  # per-tenant values over it
    retention_erase: bool = False  # also erase what retention removes from the log's files
    session_ttl_seconds: int | float | None = None  # the service's periodic cleanup (`ttl`)
    ttl_interval_seconds: int | float = DEFAULT_TTL_INTERVAL  # how often the service runs it
    # Recall (docs/recall.md): the share of a context's budget kept for the user's past when the
    # conversation would take it, and whether recall may cross users (everywhere, or in the
    # tenants named). It never crosses tenants.
    recall_share: float = 0.5
    recall_across_users: bool = False
    recall_across_users_tenants: frozenset[str] = frozenset()
    # Semantic similarity fused into recall's ranking: needs the `semantic` install extra
    # (sections/retrieval/semantic.py); off by default, as it embeds every searchable item.
    recall_semantic: bool = False

    def __post_init__(self) -> None:
        _check_limit("max_sessions", self.max_sessions)
        tenants = self.tenant_max_sessions
        if tenants is not None:
            if type(tenants) is not dict:
                raise ConfigError("tenant_max_sessions must map tenant ids to max_sessions")
            for tenant, limit in tenants.items():
                if type(tenant) is not str or not is_identifier(tenant):
                    raise ConfigError(f"tenant_max_sessions: {tenant!r} is not a tenant id")
                _check_limit(f"max_sessions of tenant {tenant!r}", limit)
        if type(self.retention_erase) is not bool:
            raise ConfigError("retention_erase must be true or false")
        ttl = self.session_ttl_seconds
        if ttl is not None:
            check_seconds("session_ttl_seconds", ttl, ConfigError, positive=True)
        check_seconds("ttl_interval_seconds", self.ttl_interval_seconds, ConfigError,
                      positive=True)  # fmt: skip
        check_share(self.recall_share, ConfigError)
        if type(self.recall_across_users) is not bool:
            raise ConfigError("recall across_users must be true or false")
        if type(self.recall_semantic) is not bool:
            raise ConfigError("recall semantic must be true or false")

    def recall_crosses_users(self, tenant: str) -> bool:
        """Whether recall in `tenant` may bring one user's past into another user's context."""
        return self.recall_across_users or tenant in self.recall_across_users_tenants

    def max_sessions_for(self, tenant: str) -> int | None:
        """The tenant's bound on live sessions (its own value, else `max_sessions`)."""
        tenants = self.tenant_max_sessions
        if tenants is not None and tenant in tenants:
            return tenants[tenant]
        return self.max_sessions

    def with_overrides(self, overrides: dict[str, dict] | None) -> MemoryConfig:
        """Per-session overrides: {section: {setting: value, items?: [...]}}; a new name adds a
        section. `items` seeds the section at creation, in place of the config's items for it
        (docs/sections.md, "Seeding a session")."""
        if not overrides:
            return self
        if type(overrides) is not dict:
            raise ConfigError("sections must be an object: {section: {setting: value}}")
        by_name = {s.name: s for s in self.sections}
        seeds = dict(self.seed_items or {})
        for name, changes in overrides.items():
            if type(changes) is not dict:
                raise ConfigError(f"override for section {name!r} must be an object")
            refuse_untraced(name, changes)
            if "items" in changes:
                seeds[name] = _seed_items(name, changes["items"])
                changes = {k: v for k, v in changes.items() if k != "items"}
            base = by_name.get(name)
            if base is None:
                by_name[name] = SectionConfig.from_json(name, changes)
            elif changes:
                unknown = set(changes) - SETTINGS
                if unknown:
                    raise ConfigError(f"section {name!r}: unknown settings {sorted(unknown)}")
                by_name[name] = replace(base, **changes)
        return replace(self, sections=tuple(by_name.values()), seed_items=seeds or None)


def _seed_items(name: str, items: object) -> tuple[dict, ...]:
    if not isinstance(items, list | tuple) or not all(type(i) is dict for i in items):
        raise ConfigError(f"section {name!r}: items must be a list of item objects")
    return tuple(items)


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
    unknown = set(data) - {"sections", "retention", "recall", "token_counter", SAVE_KEY,
                           INJECT_KEY}  # fmt: skip
    if unknown:
        raise ConfigError(f"{path}: unknown top-level keys {sorted(unknown)}")
    token_counter = data.get("token_counter")
    if token_counter is not None:
        counter_named(token_counter)
    config = replace(MemoryConfig().with_overrides(sections), token_counter=token_counter)
    try:
        capture = load_capture_rules(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return replace(config, capture=capture, **_retention(path, data.get("retention", {})),
                   **_recall(path, data.get("recall", {})))  # fmt: skip


def _recall(path: str | Path, table: object) -> dict:
    """The `[recall]` table as MemoryConfig fields (docs/recall.md):

    ```toml
    [recall]
    share = 0.5                 # of the budget kept for recall when the conversation wants it
    across_users = false        # recall stays within the session's user
    across_users_tenants = ["team-wiki"]  # tenants whose sessions recall each other's past
    semantic = true             # fuse in embeddings (the `semantic` install extra)
    ```
    """
    if type(table) is not dict:
        raise ConfigError(f"{path}: [recall] must be a table")
    unknown = set(table) - {"share", "across_users", "across_users_tenants", "semantic"}
    if unknown:
        raise ConfigError(f"{path}: unknown [recall] keys {sorted(unknown)}")
    fields: dict = {}
    if "share" in table:
        fields["recall_share"] = table["share"]
    if "across_users" in table:
        fields["recall_across_users"] = table["across_users"]
    if "semantic" in table:
        fields["recall_semantic"] = table["semantic"]
    tenants = table.get("across_users_tenants", [])
    if type(tenants) is not list or not all(type(t) is str and is_identifier(t) for t in tenants):
        raise ConfigError(f"{path}: [recall] across_users_tenants must be a list of tenant ids")
    if tenants:
        fields["recall_across_users_tenants"] = frozenset(tenants)
    return fields


def _retention(path: str | Path, table: object) -> dict:
    """The `[retention]` table as MemoryConfig fields (checked there):

    ```toml
    [retention]
    max_sessions = 1000           # per tenant
    erase = true                  # retention erases from the files too
    session_ttl_seconds = 2592000 # `ledgermem serve` removes sessions idle this long
    ttl_interval_seconds = 60

    [retention.tenants.acme]      # a tenant's own bound
    max_sessions = 5000
    ```
    """
    if type(table) is not dict:
        raise ConfigError(f"{path}: [retention] must be a table")
    unknown = set(table) - RETENTION_KEYS
    if unknown:
        raise ConfigError(f"{path}: unknown [retention] keys {sorted(unknown)}")
    fields: dict = {}
    for key, field_name in (("max_sessions", "max_sessions"), ("erase", "retention_erase"),
                            ("session_ttl_seconds", "session_ttl_seconds"),
                            ("ttl_interval_seconds", "ttl_interval_seconds")):  # fmt: skip
        if key in table:
            fields[field_name] = table[key]
    tenants = table.get("tenants")
    if tenants is not None:
        if type(tenants) is not dict or not all(type(t) is dict for t in tenants.values()):
            raise ConfigError(f"{path}: [retention.tenants.NAME] must be tables")
        for name, settings in tenants.items():
            if set(settings) != {"max_sessions"}:
                raise ConfigError(
                    f"{path}: [retention.tenants.{name}] takes max_sessions alone, not "
                    f"{sorted(set(settings) - {'max_sessions'})}"
                )
        fields["tenant_max_sessions"] = {n: t["max_sessions"] for n, t in tenants.items()}
    return fields


def warm_counter(config: object = None) -> None:
    """Load the vocabulary of the counter new sessions will use (a config file's
    `token_counter`, else the default), so a service's first write does not wait for it."""
    if isinstance(config, str):
        config = load_config(config)
    name = config.token_counter if isinstance(config, MemoryConfig) else None
    counter = counter_named(name) if name else DEFAULT_COUNTER
    warm = getattr(counter, "warm", None)
    if warm is not None:
        warm()
