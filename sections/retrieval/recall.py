"""Recall, pure: the relevant past of a session's user, ranked, then rendered within a budget.

`context(budget, query=...)` recalls from the user's earlier sessions (docs/recall.md): the
search index gives BM25 candidates over the sessions in scope (`scope_sessions`), `rank` rescores
them with what a single turn's BM25 cannot see, and `build` renders the best units that fit what
the budget leaves into one system message, placed before the conversation.

Ranking, each signal measured on the development half of LoCoMo (docs/recall.md has the figures):

- **bm25**: the item's own BM25 score for the query with English function words left out (they
  only add noise to an OR query; "when did she go" is "go").
- **neighbours**: a conversation's meaning spans turns ("did you go?" / "yes, on Sunday"), so a
  turn also scores `NEIGHBOUR_WEIGHT` of the BM25 of the turns just before and after it in the
  same section. It brings in answers whose words are in the question before them.
- **session**: a session that several good hits come from is about the query's topic, so every
  candidate gets `SESSION_WEIGHT` of its session's share of the top hits' scores.
- **semantic**: cosine similarity from the embedding extra, when it is installed, fused in by
  `fuse` (sections/retrieval/semantic.py).

A recalled unit is the item's unit (a tool call with its results, a group), never split. Units
are rendered grouped by session, oldest session first, each under a line naming the session and
its time, each turn as `speaker: text`; a gap between recalled turns of one session is marked.
Nothing already in the context (the conversation part, the other sections) is recalled again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sections.model.item import Item, units_of
from sections.model.names import HOLDER_PREFIX, OBSERVATIONS, TENANT_SESSION
from sections.model.render import Injection
from sections.model.state import MemoryState, SessionState
from sections.model.tokens import TokenCounter
from sections.retrieval.documents import text_of
from sections.retrieval.observations import visible_to

CANDIDATES = 200  # BM25 hits a query asks the index for, before rescoring
SIMILAR = 100  # nearest items the semantic extra is asked for, when it is on
COMMON = 0.3  # a query word in more of the user's documents than this share says nothing
NEIGHBOUR_WEIGHT = 0.6
SESSION_WEIGHT = 0.2
SESSION_HITS = 20  # the top hits a session's share is taken over
DEFAULT_SHARE = 0.5  # of what the injected blocks leave, kept for recall when the rest needs it
DATE_KEY = "date"  # session metadata: when the conversation took place, shown as given
TITLE = "## recalled from earlier sessions"
GAP = "…"

_WORD = re.compile(r"\w+")
# Function words of English questions: left out of the query, as BM25 gains nothing from them.
_FUNCTION_WORDS = """a an the and or but if of to in on at by for with about as into from is are was were be
    been being do does did done have has had i me my we our you your he him his she her it its
    they them their what which who whom whose when where why how that this these those there
    here would could should will can may might shall not no so than too very just also any some
    all each other such only own same up down out over again further then once ever"""
STOPWORDS = frozenset(_FUNCTION_WORDS.split())


@dataclass(frozen=True)
class Candidate:
    """One search hit: where the item is and its BM25 score (higher is better)."""

    session: str
    section: str
    id: str
    bm25: float


@dataclass(frozen=True)
class Ranked:
    """A unit's item as recall ranks it: its score and the signals that make it up."""

    session: str
    section: str
    id: str
    score: float
    signals: dict[str, float] = field(default_factory=dict)


def query_text(text: str) -> str:
    """The query's words without function words (all of them when nothing else is left)."""
    words = [w for w in _WORD.findall(text)]
    kept = [w for w in words if w.lower() not in STOPWORDS]
    return " ".join(kept or words)


def is_holder(session_id: str) -> bool:
    """The tenant's own session and the AgentOps holders keep what is not a user's past."""
    return session_id == TENANT_SESSION or session_id.startswith(HOLDER_PREFIX)


def scope_of(
    state: MemoryState, tenant: str, session_id: str, across_users: bool, sessions: bool = True
) -> tuple[tuple[str, ...] | None, str | None]:
    """`scope_sessions` (when `sessions`, else None: it walks every session), and the
    session's user."""
    session = state.sessions.get((tenant, session_id))
    user = session.user if session is not None else None
    if not sessions:
        return None, user
    return scope_sessions(state, tenant, session_id, across_users), user


def scope_sessions(
    state: MemoryState, tenant: str, session_id: str, across_users: bool
) -> tuple[str, ...] | None:
    """The sessions whose past a session may recall: those of its user (its `user_id`), or, for
    a session without one, the tenant's sessions without one; every session of the tenant when
    the tenant lets recall cross users (None: no filter)."""
    if across_users:
        return None
    session = state.sessions.get((tenant, session_id))
    user = session.user if session is not None else None
    return tuple(
        sid
        for (t, sid), other in state.sessions.items()
        if t == tenant and not is_holder(sid) and other.user == user
    )


Key = tuple[str, str, str]  # (session, section, item id)


def _admitted(
    state: MemoryState, tenant: str, key: Key, user: str | None, across_users: bool
) -> Item | None:
    """The item a candidate names, if it is live and recall may show it."""
    session_id, section_name, id_ = key
    if section_name == OBSERVATIONS and session_id != TENANT_SESSION:
        return None  # a session's own observations are that session's alone (docs/search.md)
    if is_holder(session_id) and (session_id != TENANT_SESSION or section_name != OBSERVATIONS):
        return None  # facts come in through `facts=`; AgentOps' holders through their routes
    session = state.sessions.get((tenant, session_id))
    section = session.sections.get(section_name) if session is not None else None
    item = section.items.get(id_) if section is not None else None
    if session is None or item is None:
        return None  # gone since the index was queried
    if session_id != TENANT_SESSION and not across_users and session.user != user:
        return None  # another user's past (the index's filter says so too: defence in depth)
    if session_id == TENANT_SESSION and not (across_users or visible_to(item, user)):
        return None
    return item


def rank(
    state: MemoryState,
    tenant: str,
    candidates: Iterable[Candidate],
    user: str | None,
    across_users: bool,
    similar: Iterable[tuple[str, str, str, float]] = (),
) -> list[Ranked]:
    """The candidates still live and visible, and their neighbours, best first (ties: oldest).
    `similar`: the semantic extra's nearest items, (session, section, id, cosine), fused in."""
    items: dict[Key, Item] = {}
    bm25: dict[Key, float] = {}
    for c in candidates:
        key = (c.session, c.section, c.id)
        if key not in bm25 and (item := _admitted(state, tenant, key, user, across_users)):
            bm25[key], items[key] = c.bm25, item
    cosine: dict[Key, float] = {}
    for session_id, section_name, id_, score in similar:
        key = (session_id, section_name, id_)
        if key not in cosine and (item := _admitted(state, tenant, key, user, across_users)):
            cosine[key], items[key] = score, item
    # Each candidate lends part of its score to the turns just before and after it.
    lent: dict[Key, float] = {}
    order_of: dict[tuple[str, str], tuple[list[str], dict[str, int]]] = {}
    for key, score in bm25.items():
        session_id, section_name, id_ = key
        if section_name == OBSERVATIONS:
            continue  # observations stand alone
        section = state.sessions[(tenant, session_id)].sections[section_name]
        known = order_of.get((session_id, section_name))
        if known is None:
            ordered = [i.id for i in sorted(section.items.values(), key=lambda i: i.order)]
            known = order_of[(session_id, section_name)] = (
                ordered,
                {id_: at for at, id_ in enumerate(ordered)},
            )
        ids, position = known
        at = position[id_]
        for j in (at - 1, at + 1):
            if 0 <= j < len(ids):
                near = (session_id, section_name, ids[j])
                items.setdefault(near, section.items[ids[j]])
                lent[near] = lent.get(near, 0.0) + NEIGHBOUR_WEIGHT * score
    by_session: dict[str, float] = {}  # a session's share of the best hits
    for key, score in sorted(bm25.items(), key=lambda kv: -kv[1])[:SESSION_HITS]:
        by_session[key[0]] = by_session.get(key[0], 0.0) + score
    best_session = max(by_session.values(), default=0.0)
    keys = set(bm25) | set(lent) | set(cosine)
    lexical = {k: bm25.get(k, 0.0) + lent.get(k, 0.0) for k in keys}
    scale = max(lexical.values(), default=0.0)
    ranked = []
    for key in keys:
        signals = {}
        if key in bm25:
            signals["bm25"] = round(bm25[key], 6)
        if key in lent:
            signals["neighbours"] = round(lent[key], 6)
        if best_session > 0 and key[0] in by_session and scale > 0:
            boost = SESSION_WEIGHT * scale * by_session[key[0]] / best_session
            signals["session"] = round(boost, 6)
            lexical[key] += boost
        if key in cosine:
            signals["semantic"] = round(cosine[key], 6)
        ranked.append(Ranked(key[0], key[1], key[2], lexical[key], signals))
    if cosine:
        ranked = fuse(ranked, cosine)
    ranked.sort(key=lambda r: (-r.score, r.session, items[(r.session, r.section, r.id)].order))
    return ranked


SEMANTIC_WEIGHT = 0.4  # of the semantic ranking in the fusion (docs/recall.md: measured)


def fuse(ranked: list[Ranked], cosine: dict[Key, float]) -> list[Ranked]:
    """The lexical scores and the cosine similarities, each scaled to [0, 1] over the
    candidates (min-max), combined linearly; a candidate one side did not find gets 0 there."""

    def scaled(values: dict[Key, float]) -> dict[Key, float]:
        low, high = min(values.values()), max(values.values())
        span = high - low
        return {k: (v - low) / span if span > 0 else 1.0 for k, v in values.items()}

    lexical = scaled({(r.session, r.section, r.id): r.score for r in ranked})
    semantic = scaled(cosine)
    return [
        Ranked(r.session, r.section, r.id,
               (1 - SEMANTIC_WEIGHT) * lexical[key] + SEMANTIC_WEIGHT * semantic.get(key, 0.0),
               r.signals)
        for r in ranked
        for key in [(r.session, r.section, r.id)]
    ]  # fmt: skip


# ---- rendering ---------------------------------------------------------------------------------


def session_time(session: SessionState) -> str:
    """When a session took place: its `date` metadata as given (an import of past
    conversations names it), else the time it was created, to the minute, in UTC."""
    date = session.metadata.get(DATE_KEY) if isinstance(session.metadata, dict) else None
    if isinstance(date, str) and date.strip():
        return date.strip()
    when = datetime.fromtimestamp(session.created_ts / 1e6, UTC)
    return when.strftime("%Y-%m-%d %H:%M UTC")


def speaker(item: Item) -> str:
    name = item.extra.get("name") if item.extra else None
    return name if isinstance(name, str) and name else (item.role or "user")


def text_line(section: str, item: Item, content: object) -> str:
    """One recalled item: `speaker: text` for a message, `[section] text` for anything else."""
    text = text_of(content)  # a string is its own text
    calls = item.extra.get("tool_calls") if item.extra else None
    if isinstance(calls, list) and calls:
        text = f"{text} (calls {', '.join(_call_name(c) for c in calls)})".strip()
    if section == "messages":
        return f"{speaker(item)}: {text}"
    title = item.metadata.get("title") if isinstance(item.metadata, dict) else None
    label = f"[{item.kind or section}] {title}: " if isinstance(title, str) else f"[{section}] "
    return label + text


def render(
    state: MemoryState,
    tenant: str,
    picked: Iterable[tuple[str, str, str]],
    content_of: Callable[[Item], object],
) -> dict | None:
    """The system message of these recalled items: grouped by session, oldest first."""
    by_session: dict[str, list[tuple[str, Item]]] = {}
    for session_id, section, id_ in picked:
        session = state.sessions[(tenant, session_id)]
        by_session.setdefault(session_id, []).append(
            (section, session.sections[section].items[id_])
        )
    if not by_session:
        return None
    lines = [TITLE]
    sessions = sorted(by_session, key=lambda s: (state.sessions[(tenant, s)].created_seq, s))
    for session_id in sessions:
        session = state.sessions[(tenant, session_id)]
        lines.append(f"### {session_id} · {session_time(session)}")
        previous: tuple[str, int] | None = None
        for section, item in sorted(by_session[session_id], key=lambda p: (p[0], p[1].order)):
            if previous is not None and not _adjacent(session, previous, section, item):
                lines.append(GAP)
            lines.append(text_line(section, item, content_of(item)))
            previous = (section, item.seq * (1 << 20) + item.k)
    return {"role": "system", "content": "\n".join(lines)}


def _adjacent(session: SessionState, previous: tuple[str, int], section: str, item: Item) -> bool:
    if previous[0] != section:
        return False
    live = session.sections[section].items.values()
    here = item.seq * (1 << 20) + item.k
    return not any(previous[1] < i.seq * (1 << 20) + i.k < here for i in live)


def _call_name(call: object) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else "a tool"


def build(
    state: MemoryState,
    tenant: str,
    ranked: list[Ranked],
    exclude: set[tuple[str, str]],
    limit: int,
    counter: TokenCounter,
    content_of: Callable[[Item], object],
) -> Injection:
    """The recalled message that fits `limit` tokens (counted whole, as the model is sent it),
    best units first, and its manifest entries: each item's (session, section, id, h), its rank,
    score and signals. Units with an item in `exclude` ((session, id): already in the context)
    are left out whole, so a tool call is never recalled without its results."""
    out = Injection()
    if limit <= 0 or not ranked:
        return out
    units: dict[tuple[str, str], dict[str, list[Item]]] = {}  # (session, section) -> id -> unit

    def unit_of(r: Ranked) -> list[Item]:
        by_id = units.get((r.session, r.section))
        if by_id is None:
            section = state.sessions[(tenant, r.session)].sections[r.section]
            by_id = units[(r.session, r.section)] = {
                m.id: members for members in units_of(section.items.values()).values()
                for m in members
            }  # fmt: skip
        return sorted(by_id[r.id], key=lambda i: i.order)

    taken: set[Key] = set()
    picked: list[tuple[Ranked, list[Item], list[int]]] = []
    sessions: set[str] = set()
    estimate = counter.count(TITLE)
    for r in ranked:
        if (r.session, r.section, r.id) in taken:
            continue
        members = unit_of(r)
        if any((r.session, m.id) in exclude for m in members):
            continue
        costs = [counter.count(text_line(r.section, m, content_of(m))) + 1 for m in members]
        header = (
            0
            if r.session in sessions
            else counter.count(
                f"### {r.session} · {session_time(state.sessions[(tenant, r.session)])}"
            )
            + 2
        )
        if estimate + header + sum(costs) + 1 > limit:
            continue  # a smaller unit further down may still fit
        estimate += header + sum(costs) + 1  # +1: a gap marker, at most one per unit
        sessions.add(r.session)
        taken.update((r.session, r.section, m.id) for m in members)
        picked.append((r, members, costs))
    while picked:
        keys = [(r.session, r.section, m.id) for r, members, _ in picked for m in members]
        message = render(state, tenant, keys, content_of)
        assert message is not None
        total = counter.count(message)
        if total <= limit:
            break
        picked.pop()  # the estimate was short (JSON escapes): drop the lowest-ranked unit
    else:
        return out
    for rank_no, (r, members, costs) in enumerate(picked, 1):
        for m, cost in zip(members, costs, strict=True):
            entry: dict = {"inject": "recall", "session": r.session, "section": r.section,
                           "id": m.id, "h": m.h, "tokens": cost, "rank": rank_no}  # fmt: skip
            if m.id == r.id:
                entry["score"] = round(r.score, 6)
                entry["signals"] = r.signals
            out.entries.append(entry)
    out.messages.append(message)
    out.tokens = total
    return out


def replay(
    state: MemoryState, tenant: str, entries: list[dict], content_of: Callable[[Item], object]
) -> list[dict]:
    """The recalled message a manifest's `recall` entries name, from the state at its seq."""
    keys = []
    for entry in entries:
        session = state.sessions[(tenant, entry["session"])]
        item = session.sections[entry["section"]].items[entry["id"]]
        if item.h != entry["h"]:
            raise LookupError(f"recalled item {entry['id']} has changed since")
        keys.append((entry["session"], entry["section"], entry["id"]))
    message = render(state, tenant, keys, content_of)
    return [message] if message is not None else []
