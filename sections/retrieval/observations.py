"""Observations, pure: long-term knowledge that updates in place instead of piling up duplicates.

An observation is an item of the `observations` section: its `kind` is the observation's type,
its metadata holds the title, the optional topic key and two counters. Scope `session` keeps it in
the session's own section; scopes `user` and `tenant` in the reserved session `_tenant`, with the
session it came from (if any) in `metadata.session`. A user's observation carries the user in
`metadata.user_id`: only the sessions of that user (session metadata `user_id`) see it
(`visible_to`); one without `user_id` is the tenant's, seen by every session.

Writing one is a single command decided under the memory's lock, in three tiers:
The tiers compare an observation only with those of the same user (in `_tenant`, the items with
the same `metadata.user_id`, or none): one user's topic or content never touches another's.
1. same `topic_key` in the same scope: an `item.updated` that replaces it and bumps `revision`
   (earlier revisions stay in the log);
2. same normalized content (lowercased, whitespace collapsed) written within the window: an
   `item.updated` that bumps `duplicates` and adds nothing (an observation with another topic
   key is another topic, never a duplicate; one without a key takes the new write's key). With
   `strict_duplicates` (AgentOps' service's rule) the type and title must be the same too;
3. otherwise an `item.added`.

The window compares integer `ts` values: the time the new record will carry (read before
deciding, and stamped on the record) minus the `ts` of the record that last set the existing
observation's content. The wall clock can step back, so that difference can be negative; it then
counts as zero: by the log's order the existing observation came first, so it is a duplicate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eventstore.errors import InvalidInput
from sections.model import commands
from sections.model.commands import Command
from sections.model.item import Item
from sections.model.names import OBSERVATION_SCOPES as SCOPES
from sections.model.names import OBSERVATION_TYPE_MAX as TYPE_MAX
from sections.model.names import OBSERVATION_TYPES as TYPES
from sections.model.names import OBSERVATIONS as SECTION
from sections.model.names import USER_ID, observation_type_error
from sections.model.state import SessionState
from sections.model.tokens import TokenCounter

# The vocabulary is the model's (the capture rules check it too): this module's callers know it
# as observations.SECTION, .TYPES (the suggested types: any non-blank one of at most TYPE_MAX
# characters is taken) and .SCOPES.
__all__ = [
    "DEFAULT_WINDOW_US", "RESERVED_METADATA", "SCOPES", "SECTION", "TITLE_MAX", "TYPES",
    "TYPE_MAX", "USER_ID", "Observation", "Outcome", "decide", "normalize", "owner", "visible_to",
]  # fmt: skip
DEFAULT_WINDOW_US = 15 * 60 * 1_000_000
TITLE_MAX = 500
# What the dedup tiers keep in an observation's metadata: a `source` may not set them.
RESERVED_METADATA = frozenset(("title", "revision", "duplicates", "topic_key", "session", USER_ID))


@dataclass(frozen=True)
class Observation:
    type: str
    title: str
    content: str
    tags: tuple[str, ...] = ()
    topic_key: str | None = None
    # Where it came from, kept in its metadata by every tier's record (the AgentOps session,
    # the capture rule that fired): {str: str}.
    source: tuple[tuple[str, str], ...] = ()
    # Tier 2 also requires the same type and title (AgentOps' service deduplicates so)
    strict_duplicates: bool = False

    @classmethod
    def of(
        cls, type: str, title: str, content: str, tags=(), topic_key: str | None = None,
        source: dict | None = None, strict_duplicates: bool = False,
    ) -> Observation:  # fmt: skip
        wrong = observation_type_error(type)
        if wrong:
            raise InvalidInput(wrong)
        if not isinstance(title, str) or not title.strip() or len(title) > TITLE_MAX:
            raise InvalidInput(
                f"an observation needs a title: a non-empty string of at most {TITLE_MAX} characters"
            )
        if not isinstance(content, str) or not content.strip():
            raise InvalidInput("an observation needs content: a non-empty string")
        if not isinstance(tags, (list, tuple)) or not all(isinstance(t, str) for t in tags):
            raise InvalidInput("tags must be a list of strings")
        if topic_key is not None and (not isinstance(topic_key, str) or not topic_key):
            raise InvalidInput("topic_key must be a non-empty string")
        source = source or {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in source.items()):
            raise InvalidInput("an observation's source must map strings to strings")
        taken = sorted(set(source) & RESERVED_METADATA)
        if taken:  # they would overwrite what the tiers keep
            raise InvalidInput(f"an observation's source cannot set {taken}")
        return cls(
            type, title, content, tuple(tags), topic_key, tuple(sorted(source.items())),
            strict_duplicates is True,
        )  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    """What a write did: `tier` is "revised", "duplicate" or "inserted"."""

    id: str
    session: str
    tier: str
    revision: int
    duplicates: int


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def owner(item: Item) -> str | None:
    """The user a tenant-wide observation belongs to (`metadata.user_id`), or None: the tenant's."""
    user = item.metadata.get(USER_ID) if isinstance(item.metadata, dict) else None
    return user if isinstance(user, str) else None


def visible_to(item: Item, user: str | None) -> bool:
    """Whether a session of `user` (None: a session of no user) sees this tenant-wide
    observation: the tenant's are everyone's, a user's are that user's alone."""
    belongs = owner(item)
    return belongs is None or belongs == user


def decide(
    session: SessionState,
    obs: Observation,
    now: int,
    window_us: int,
    counter: TokenCounter,
    content_of: Callable[[Item], object],
    source: str | None = None,
    user: str | None = None,
) -> tuple[Command, str, Item | None]:
    """The one record that writes `obs`, which tier it is, and the observation it touches.
    `source`: the session a tenant-wide observation came from, kept in `metadata.session` by
    the write that sets its content (a duplicate keeps the first writer's). `user`: the user a
    tenant-wide observation is for (`metadata.user_id`); the tiers look at that user's only."""
    section = commands.get_section(session, SECTION)
    mine = [item for item in section.items.values() if owner(item) == user]
    if obs.topic_key is not None:
        for item in mine:
            if item.metadata.get("topic_key") == obs.topic_key:
                meta = {
                    **item.metadata,
                    **dict(obs.source),
                    "title": obs.title,
                    "revision": item.metadata.get("revision", 1) + 1,
                }
                meta.pop("session", None)
                if source is not None:
                    meta["session"] = source
                changes = {
                    "content": obs.content,
                    "kind": obs.type,
                    "tags": list(obs.tags),
                    "metadata": meta,
                }
                command = commands.update_item(session, SECTION, item.id, changes, counter)
                return command, "revised", item
    wanted = normalize(obs.content)
    for item in reversed(mine):
        elapsed = max(0, now - item.ts)  # a clock stepped back counts as no time at all
        if elapsed > window_us:
            continue
        other_key = item.metadata.get("topic_key")
        if obs.topic_key is not None and other_key is not None:
            continue  # another topic (the same one was found above)
        if obs.strict_duplicates and (item.kind, item.metadata.get("title")) != (
            obs.type,
            obs.title,
        ):
            continue
        content = content_of(item)
        if isinstance(content, str) and normalize(content) == wanted:
            meta = {**item.metadata, **dict(obs.source),
                    "duplicates": item.metadata.get("duplicates", 0) + 1}  # fmt: skip
            if obs.topic_key is not None:  # the duplicate takes the key: later revisions find it
                meta["topic_key"] = obs.topic_key
            command = commands.update_item(session, SECTION, item.id, {"metadata": meta}, counter)
            return command, "duplicate", item
    meta = {**dict(obs.source), "title": obs.title, "revision": 1, "duplicates": 0}
    if obs.topic_key is not None:
        meta["topic_key"] = obs.topic_key
    if source is not None:
        meta["session"] = source
    if user is not None:
        meta[USER_ID] = user
    data = {"content": obs.content, "kind": obs.type, "tags": list(obs.tags), "metadata": meta}
    return commands.add_items(session, SECTION, [data], counter), "inserted", None
