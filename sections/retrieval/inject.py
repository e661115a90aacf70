"""Context injection, pure: observations for a query and recent sessions' summaries.

`context(query=..., observations=N, summaries=M)` adds up to two system messages before the
conversation: the top N observations for the query (`observation_pool`: the session's own, the
tenant's and its user's; ranked by BM25, then backfilled newest first when the search finds fewer
than N), each truncated to a set number of characters, and the summaries of the M sessions of
the tenant that ended most recently.
`facts=K` adds the K facts valid at the assembly (docs/facts.md: the query's hits, then those of
this session, then the newest) as a third message between the two.
They are paid for first out of the budget, and each entry goes into the `context.assembled`
manifest (marked `inject`), so `context_at` renders them again byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

import orjson

from sections.model.item import Item
from sections.model.names import TENANT_SESSION
from sections.model.render import Injection
from sections.model.state import MemoryState, SessionState
from sections.model.tokens import TokenCounter
from sections.retrieval import facts, summaries
from sections.retrieval.observations import SECTION, visible_to

QUERY_CHARS = 1000  # of the prompt, as the search query
OBSERVATION_CHARS = 500  # of each observation's content, by default


def observation_line(item: Item, content: object, chars: int) -> str:
    title = item.metadata.get("title", "")
    return f"- [{item.kind}] {title}: {summaries.truncate(summaries.as_text(content), chars)}"


def block(title: str, lines: list[str]) -> dict:
    return {"role": "system", "content": f"## {title}\n" + "\n".join(lines)}


def user_of(state: MemoryState, tenant: str, session_id: str) -> str | None:
    """The user a session belongs to (`SessionState.user`), or None: the tenant's."""
    session = state.sessions.get((tenant, session_id))
    return session.user if session is not None else None


def pool_users(state: MemoryState, tenant: str, session_id: str) -> tuple[str, ...]:
    """`Query.users` for a search of the session's observation pool: its user's, or none."""
    user = user_of(state, tenant, session_id)
    return (user,) if user is not None else ()


def observation_pool(state: MemoryState, tenant: str, session_id: str) -> list[tuple[str, Item]]:
    """Every live observation the session may see: its own, the tenant's (no `user_id`) and
    its user's (`user_id` = the session's); never another user's."""
    user = user_of(state, tenant, session_id)
    pool: list[tuple[str, Item]] = []
    for sid in (session_id, TENANT_SESSION):
        session = state.sessions.get((tenant, sid))
        section = session.sections.get(SECTION) if session is not None else None
        if section is not None:
            pool.extend(
                (sid, item)
                for item in section.items.values()
                if sid != TENANT_SESSION or visible_to(item, user)
            )
    return pool


def choose_facts(
    state: MemoryState, tenant: str, session_id: str, hits: list[str], now: int, limit: int
) -> list[Item]:
    """Up to `limit` of the tenant's facts valid `now` (sections/retrieval/facts.py `choose`)."""
    if not limit:
        return []
    session = state.sessions.get((tenant, TENANT_SESSION))
    section = session.sections.get(facts.SECTION) if session is not None else None
    known = {item.id: item for item in facts.facts_items(section)}
    picked = facts.choose(facts.timeline(known.values()), hits, session_id, now, limit)
    return [known[id_] for id_ in picked]


BM25 = "bm25"  # an observation the query's search found (its entry keeps the score)
RECENCY = "recency"  # one taken newest first to fill up to N when the search found fewer


def choose_observations(
    pool: list[tuple[str, Item]], hits: list[tuple[str, str, float]], limit: int
) -> list[tuple[str, Item, str, float | None]]:
    """The live hits in rank order, then the newest of the rest, up to `limit`: each as
    (session, item, method, BM25 score or None for the recency backfill)."""
    by_key = {(sid, item.id): (sid, item) for sid, item in pool}
    scores: dict[tuple[str, str], float] = {}
    for sid, id_, score in hits:
        scores.setdefault((sid, id_), score)
    chosen: list[tuple[str, Item, str, float | None]] = [
        (*by_key[k], BM25, s) for k, s in scores.items() if k in by_key
    ]
    del chosen[limit:]
    if len(chosen) < limit:
        taken = {(sid, item.id) for sid, item, _, _ in chosen}
        rest = [p for p in pool if (p[0], p[1].id) not in taken]
        rest.sort(key=lambda p: (p[1].ts, p[1].order), reverse=True)
        chosen.extend((sid, item, RECENCY, None) for sid, item in rest[: limit - len(chosen)])
    return chosen


def build(
    observations: list[tuple[str, Item, str, float | None]],
    recent: list[SessionState],
    chars: int,
    content_of: Callable[[Item], object],
    counter: TokenCounter,
    budget: int,
    settings: dict,
    fact_items: Sequence[Item] = (),
) -> Injection:
    """The injected messages that fit `budget`, taken in order, and their manifest entries.

    An observation's entry also says why it is there: its `rank` (1 for the first injected),
    `method` (`bm25` or `recency`) and, for a search hit, its BM25 `score`. `replay` reads none
    of them (the lines depend on the item alone); they are what a trace of the assembly shows
    (sections/runtime/tracing.py), kept in the record so that the log and the trace agree."""
    out = Injection(settings=settings)

    def observation(rank: int, sid: str, item: Item, method: str, score: float | None):
        entry = {"inject": "observation", "session": sid, "section": SECTION, "id": item.id,
                 "h": item.h, "rank": rank, "method": method}  # fmt: skip
        if score is not None:
            entry["score"] = score
        return observation_line(item, content_of(item), chars), entry

    lines = take(out, counter, budget, (observation(r, *o) for r, o in enumerate(observations, 1)))
    if lines:
        out.messages.append(block("observations", lines))
    lines = take(out, counter, budget, (
        (facts.line(item), {"inject": "fact", "session": TENANT_SESSION,
                            "section": facts.SECTION, "id": item.id, "h": item.h})
        for item in fact_items
    ))  # fmt: skip
    if lines:
        out.messages.append(block("facts", lines))
    lines = take(out, counter, budget, _summaries(recent, "summary", summaries.line))
    if lines:
        out.messages.append(block("recent sessions", lines))
    return out


def _summaries(
    recent: list[SessionState], kind: str, line: Callable[[str, dict], str]
) -> Iterator[tuple[str, dict]]:
    """(line, manifest entry) of each of these summarized sessions, made one at a time."""
    for session in recent:
        summary, seq, h = summaries.summarized(session)
        yield line(session.id, summary), {"inject": kind, "session": session.id, "seq": seq, "h": h}


def take(
    out: Injection, counter: TokenCounter, budget: int, candidates: Iterable[tuple[str, dict]]
) -> list[str]:
    """The lines of `candidates` ((line, manifest entry) pairs, made one at a time) taken in
    order while they fit what `budget` leaves of `out`; each taken entry goes into `out`'s
    manifest with its `tokens`."""
    lines = []
    for text, entry in candidates:
        tokens = counter.count(text)
        if out.tokens + tokens > budget:
            break
        out.tokens += tokens
        lines.append(text)
        out.entries.append({**entry, "tokens": tokens})
    return lines


# ---- recent sessions as AgentOps' runtime injects them (`sessions=N`) ---------------------------
# A block of its own, after the others, so the default output (sessions=0) is unchanged.

SESSIONS_OPEN, SESSIONS_CLOSE = "<memory:sessions>", "</memory:sessions>"


def session_line(summary: dict) -> str:
    """`- Session with N messages. Started: "…" — Ended: "…"`, from a `session.summarized`."""
    parts = [f"- Session with {summary['messages']} messages."]
    for which, label in (("first_user", "Started"), ("last_user", "Ended")):
        quoted = summary.get(which)
        if quoted and quoted.get("text") is not None:
            said = orjson.dumps(quoted["text"]).decode()  # quotes and newlines escaped
            parts.append(f"— {label}: {said}" if len(parts) > 1 else f"{label}: {said}")
    return " ".join(parts)


def sessions_block(lines: list[str]) -> dict:
    return {"role": "system", "content": "\n".join([SESSIONS_OPEN, *lines, SESSIONS_CLOSE])}


def add_sessions(
    out: Injection, recent: list[SessionState], counter: TokenCounter, budget: int
) -> Injection:
    """`out` with the `<memory:sessions>` block of `recent` that fits `budget`, taken in order."""
    lines = take(out, counter, budget,
                 _summaries(recent, "session", lambda _, summary: session_line(summary)))  # fmt: skip
    if lines:
        out.messages.append(sessions_block(lines))
    return out


def replay_sessions(state: MemoryState, tenant: str, entries: list[dict]) -> list[dict]:
    """The `<memory:sessions>` block the manifest's `session` entries name, or nothing."""
    lines = []
    for entry in entries:
        session = state.sessions[(tenant, entry["session"])]
        summary = session.summary
        if session.summary_at != (entry["seq"], entry["h"]) or summary is None:
            raise LookupError(f"the summary of session {entry['session']} has changed since")
        lines.append(session_line(summary))
    return [sessions_block(lines)] if lines else []


def replay(
    state: MemoryState, tenant: str, entries: list[dict], chars: int,
    content_of: Callable[[Item], object],
) -> list[dict]:  # fmt: skip
    """The injected messages a manifest's `inject` entries name, from the state at its seq."""
    agentops = replay_sessions(state, tenant, [e for e in entries if e["inject"] == "session"])
    entries = [e for e in entries if e["inject"] != "session"]
    observations, known, recent = [], [], []
    for entry in entries:
        session = state.sessions[(tenant, entry["session"])]
        if entry["inject"] in ("observation", "fact"):
            item = session.sections[entry.get("section", SECTION)].items[entry["id"]]
            if item.h != entry["h"]:
                raise LookupError(f"{entry['inject']} {entry['id']} has changed since")
            if entry["inject"] == "fact":
                known.append(facts.line(item))
            else:
                observations.append(observation_line(item, content_of(item), chars))
        else:
            summary = session.summary
            if session.summary_at != (entry["seq"], entry["h"]) or summary is None:
                raise LookupError(f"the summary of session {entry['session']} has changed since")
            recent.append(summaries.line(session.id, summary))
    messages = []
    if observations:
        messages.append(block("observations", observations))
    if known:
        messages.append(block("facts", known))
    if recent:
        messages.append(block("recent sessions", recent))
    return messages + agentops
