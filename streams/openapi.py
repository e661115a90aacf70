"""`/openapi.json`, generated from the routes the app serves (streams/apidoc), and the explorer
over it at `/docs` (streams/explorer.py).

The operations not yet described by their handlers are taken from `_legacy_paths` until they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from starlette.requests import Request
from starlette.responses import Response

from . import apidoc, explorer
from .apidoc.models import JsonObject
from .responses import json_response
from .routing import RawRoute, routes_of

_ERROR = {"description": "refused: {error: {code, message}}; nothing was appended"}
_WRITE = {"description": "durable: the record's exact line under `record`"}
# streams/guards.py: what a web page must not be able to make the service do.
_FOREIGN = {
    "description": "forbidden_origin: Origin is neither the service's own nor in allowed_origins"
}
_HOST = {"description": "unknown_host: Host is not one of the service's names (allowed_hosts)"}
_MEDIA = {"description": "unsupported_media_type: a body must be JSON sent as application/json"}
_SESSION = {"name": "session", "in": "path", "required": True, "schema": {"type": "string"},
            "description": "percent-encoded; may hold / : @ +"}  # fmt: skip
_SECTION = {"name": "section", "in": "path", "required": True, "schema": {"type": "string"}}
_ITEM = {"name": "item", "in": "path", "required": True, "schema": {"type": "string"}}
_IDEM = {"name": "Idempotency-Key", "in": "header", "schema": {"type": "string"},
         "description": "a retry with the same key returns the first record"}  # fmt: skip
_IF_MATCH = {"name": "If-Match", "in": "header", "schema": {"type": "string"},
             "description": "expected session version; stale gives 409"}  # fmt: skip
_AFTER = {
    "name": "after",
    "in": "query",
    "schema": {"type": "integer", "default": -1},
    "description": "cursor",
}
_PARTITION = {
    "name": "partition",
    "in": "query",
    "schema": {"type": "integer", "minimum": 0},
    "description": "a shared store's partition to read (an unscoped stream with P > 1 needs it)",
}
_FILTERS = [_PARTITION] + [
    {
        "name": name,
        "in": "query",
        "schema": {"type": "array", "items": {"type": "string"}},
        "style": "form",
        "explode": True,
        "description": f"filter on {name}; may repeat",
    }  # fmt: skip
    for name in ("tenant", "session", "section", "type")
]
_ITEM_BODY = {
    "type": "object",
    "properties": {
        "content": {"description": "string or any JSON"},
        "kind": {"type": "string"}, "role": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "priority": {"type": "number"}, "metadata": {"type": "object"}, "group": {"type": "string"},
        "name": {"type": "string"}, "tool_calls": {"type": "array"}, "tool_call_id": {"type": "string"},
        "items": {"type": "array", "description": "a batch instead: one record, atomic"},
    },
}  # fmt: skip

_SEARCH = [{"name": "q", "in": "query", "required": True, "schema": {"type": "string"}}] + [
    {"name": name, "in": "query", "schema": {"type": "array", "items": {"type": "string"}},
     "style": "form", "explode": True, "description": f"filter on {name}; may repeat"}
    for name in ("session", "section", "tag")
] + [
    {"name": "since", "in": "query", "schema": {"type": "string"}, "description": "item time >= (µs or ISO-8601)"},
    {"name": "until", "in": "query", "schema": {"type": "string"}, "description": "item time < (µs or ISO-8601)"},
    {"name": "top_k", "in": "query", "schema": {"type": "integer", "default": 10}},
    {"name": "reader", "in": "query", "schema": {"type": "string", "enum": ["agent", "operator"]}},
]  # fmt: skip
_OBSERVATION = {
    "type": "object", "required": ["type", "title", "content"],
    "properties": {
        "type": {"enum": ["decision", "discovery", "bugfix", "pattern", "architecture", "config", "learning", "preference"]},
        "title": {"type": "string"}, "content": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
        "topic_key": {"type": "string"}, "session": {"type": "string", "description": "omit for tenant-wide"},
    },
}  # fmt: skip

_OBSERVATION_FROM = {
    **_OBSERVATION,
    "properties": {**{k: v for k, v in _OBSERVATION["properties"].items() if k != "session"},
                   "scope": {"enum": ["tenant", "session"], "default": "tenant"}},
}  # fmt: skip


_FACT = {
    "type": "object", "required": ["subject", "predicate", "object"],
    "properties": {
        "subject": {"type": "string"}, "predicate": {"type": "string"}, "object": {"type": "string"},
        "sources": {"type": "array", "description": "items it was learned from: {session, id} (item ids on a session's route)"},
        "valid_from": {"type": "integer", "description": "µs since the epoch; default now"},
        "metadata": {"type": "object"}, "multi": {"type": "boolean", "description": "a multi-valued predicate: close only the same object"},
        "facts": {"type": "array", "description": "a batch instead: one record, in order"},
    },
}  # fmt: skip
_FACT_ID = {"name": "fact", "in": "path", "required": True, "schema": {"type": "string"}}
_FACT_QUERY = [
    {"name": name, "in": "query", "schema": {"type": "string"}, "description": f"exact {name}"}
    for name in ("subject", "predicate", "object")
] + [
    {"name": "as_of", "in": "query", "schema": {"type": "string"}, "description": "valid at this time (µs or ISO-8601); default now"},
    {"name": "history", "in": "query", "schema": {"type": "integer", "enum": [0, 1]}, "description": "1: every fact, valid or not"},
    {"name": "reader", "in": "query", "schema": {"type": "string", "enum": ["agent", "operator"]}},
]  # fmt: skip

# Issue 16: sessions made by the server, seeded at creation; filtered reads and the timeline.
_NEW_SESSION = {"type": "object", "properties": {
    "metadata": {"type": "object"},
    "sections": {"type": "object", "description": "per section: settings, and items: [item, ...] to seed it (immutable sections too)"},
    "token_counter": {"type": "string", "enum": ["o200k_base", "cl100k_base", "approx-chars-per-4"], "description": "the counter the session counts with for good (default o200k_base; docs/tokens.md)"},
}}  # fmt: skip
_LIST = [
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 0}},
    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
    {"name": "since", "in": "query", "schema": {"type": "string"}, "description": "last activity >= (µs or ISO-8601)"},
    {"name": "until", "in": "query", "schema": {"type": "string"}, "description": "last activity < (µs or ISO-8601)"},
]  # fmt: skip
_READ_FILTERS = [
    {"name": "role", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}, "style": "form", "explode": True, "description": "may repeat"},
    {"name": "since", "in": "query", "schema": {"type": "string"}, "description": "content set at >= (µs or ISO-8601)"},
    {"name": "until", "in": "query", "schema": {"type": "string"}, "description": "content set at < (µs or ISO-8601)"},
    {"name": "recent", "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": "the newest N of those"},
    {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 0}},
    {"name": "reader", "in": "query", "schema": {"type": "string", "enum": ["agent", "operator"]}},
]  # fmt: skip


def _types(name: str) -> dict:
    return {"name": name, "in": "query", "schema": {"type": "array", "items": {"type": "string"}},
            "style": "form", "explode": True,
            "description": "event types (user_message, agent_response, tool_call, tool_result, error, ...); may repeat"}  # fmt: skip


_ITEM_FILTERS = [_types("kind"), *_READ_FILTERS]
_EVENT_FILTERS = [_types("type"), *_READ_FILTERS]


_TILE_LEVEL = {"name": "level", "in": "path", "required": True, "schema": {"type": "string"},
               "description": "0..63, or `entries` on the entries route"}  # fmt: skip
_TILE_INDEX = {"name": "index", "in": "path", "required": True, "schema": {"type": "string"},
               "description": "3-digit elements, all but the last x-prefixed; `.p/W` for a partial tile"}  # fmt: skip


def _int_query(name: str, required: bool = False) -> dict:
    return {"name": name, "in": "query", "required": required,
            "schema": {"type": "integer", "minimum": 0}}  # fmt: skip


def _op(
    summary: str,
    params: list | None = None,
    body: dict | None = None,
    ok: str = "200",
    write: bool = False,
):
    op: dict = {
        "summary": summary,
        "parameters": params or [],
        "responses": {
            ok: _WRITE if write else {"description": "ok"},
            "403": _FOREIGN,
            "421": _HOST,
            "4XX": _ERROR,
        },
    }
    if body is not None:
        op["requestBody"] = {"content": {"application/json": {"schema": body}}}
        op["responses"]["415"] = _MEDIA
    return op


def _legacy_paths() -> dict:
    s, sec, item = [_SESSION], [_SESSION, _SECTION], [_SESSION, _SECTION, _ITEM]
    w = [_IDEM, _IF_MATCH]
    paths = {
        "/v1/sessions": {
            "get": _op("list the tenant's sessions in creation order: ?limit=&offset= page, ?since=&until= bound the last activity; any other parameter (?app=, ?metadata.app=) filters creation metadata", _LIST),
            "post": _op("create a session with a server-made id: 201, Location; with Idempotency-Key a retry gives the same session", [_IDEM], _NEW_SESSION, "201", write=True),
        },
        "/v1/sessions/{session}": {
            "put": _op("get or create a session: 201 created, 200 existed", s, _NEW_SESSION, "201", write=True),
            "get": _op("a session, its sections and version (ETag)", s),
            "delete": _op("delete a session", s + w, write=True),
        },
        "/v1/sessions/{session}/stats": {"get": _op("items, tokens and evictions per section", s)},
        "/v1/sessions/{session}/end": {"post": _op("end the session (session.ended)", s + w, write=True)},
        "/v1/sessions/{session}/turns/end": {"post": _op("end the turn: clears turn-lifetime sections", s + w, write=True)},
        "/v1/sessions/{session}/commit": {"post": _op("commit commit-lifetime sections (or {section})", s + w, {"type": "object"}, write=True)},
        "/v1/sessions/{session}/compact": {"post": _op("after a payload-too-large: compact {section} (messages) until context({budget}, {sections}) fits {target_bytes}; section.compacted", s + w,
                                                       {"type": "object", "properties": {"target_bytes": {"type": "integer"}, "section": {"type": "string"}, "budget": {"type": "integer"}, "sections": {"type": "array"}}}, write=True)},
        "/v1/sessions/{session}/context": {"post": _op("assemble context within {budget} tokens; records the manifest", s,
                                                       {"type": "object", "properties": {"budget": {"type": "integer"}, "sections": {"type": "array"}, "reader": {"type": "string"},
                                                        "query": {"type": "string", "description": "the prompt: ranks observations"},
                                                        "observations": {"type": "integer", "description": "inject up to N observations"},
                                                        "summaries": {"type": "integer", "description": "inject the M newest session summaries"},
                                                        "observation_chars": {"type": "integer", "default": 500},
                                                        "facts": {"type": "integer", "description": "inject up to N valid facts: the query's, this session's, the newest"}}}, write=True)},
        "/v1/sessions/{session}/state": {"get": _op("the session as it was at ?at=SEQ", s)},
        "/v1/sessions/{session}/erase": {"post": _op("erase items ({ids, reason}) or the session ({all: true, reason}); admin", s,
                                                     {"type": "object"}, write=True)},
        "/v1/sessions/{session}/items": {"get": _op("items of every section, filtered; leaves an items.read record", s + _ITEM_FILTERS)},
        "/v1/sessions/{session}/events": {"get": _op("the session's timeline: items with an event type across sections in write order, each with its type; leaves an items.read record (purpose events)", s + _EVENT_FILTERS)},
        "/v1/sessions/{session}/sections/{section}": {"put": _op("change a section's settings for this session", sec + w, {"type": "object"}, write=True)},
        "/v1/sessions/{session}/sections/{section}/items": {
            "post": _op("add an item (or a batch with {items: [...]})", sec + w, _ITEM_BODY, "201", write=True),
            "get": _op("items of a section (?id= repeats, ?reader=agent|operator), filtered; leaves an items.read record", sec + _ITEM_FILTERS),
        },
        "/v1/sessions/{session}/sections/{section}/items/{item}": {
            "get": _op("one item", item),
            "patch": _op("update content, tags, priority, metadata, kind or role", item + w, {"type": "object"}, write=True),
            "delete": _op("remove an item", item + w, write=True),
        },
        "/v1/search": {"get": _op("BM25 search of the tenant's searchable sections: {hits: [{session, score, snippet, item}]}; hits leave items.read records", _SEARCH)},
        "/v1/sessions/{session}/search": {"get": _op("search one session", s + _SEARCH)},
        "/v1/observations": {"post": _op("record an observation (tenant-wide, or {session}); dedup: revised 200, duplicate 200, inserted 201", None, _OBSERVATION, "201", write=True)},
        "/v1/sessions/{session}/observations": {"post": _op("record an observation from this session: tenant-wide (metadata.session names this one) unless {scope: session}", s, _OBSERVATION_FROM, "201", write=True)},
        "/v1/summaries": {"get": _op("the newest session summaries (?limit=N)")},
        "/v1/sessions/{session}/summary": {"get": _op("the summary appended when the session ended", s)},
        "/v1/facts": {
            "post": _op("assert a fact (or {facts: [...]} in one record): it closes the facts of the same subject and predicate valid at its start; 201", [_IDEM], _FACT, "201", write=True),
            "get": _op("facts valid now, as_of a time, or every one (history=1); leaves an items.read record (purpose facts)", _FACT_QUERY),
        },
        "/v1/facts/{fact}/retract": {"post": _op("end a valid fact at {at} (default now), with {reason}", [_FACT_ID, _IDEM],
                                                 {"type": "object", "properties": {"at": {"type": "integer"}, "reason": {"type": "string"}}}, write=True)},
        "/v1/sessions/{session}/facts": {
            "post": _op("assert a fact learned from this session: sources are its item ids", s + [_IDEM], _FACT, "201", write=True),
            "get": _op("the facts asserted in this session or learned from its items", s + _FACT_QUERY),
        },
        "/v1/cleanup": {"post": _op("admin: remove the tenant's sessions idle longer than {max_age_seconds} (reason max_age; erased from the files with [retention] erase): {removed, reason, erased}", None,
                                    {"type": "object", "properties": {"max_age_seconds": {"type": "number", "minimum": 0}}}, write=True)},
        "/v1/stats": {"get": _op("the tenant's totals")},
        "/v1/state": {"get": _op("every session of the tenant at ?at=SEQ")},
        "/v1/log/checkpoint": {"get": _op("the newest signed checkpoint (C2SP signed note), as text")},
        "/v1/log/tile/{level}/{index}": {"get": _op("C2SP tlog-tiles: 256 (or .p/W) hashes of the tree of the newest checkpoint; index as x001/x234/067 (docs/proofs.md)", [_TILE_LEVEL, _TILE_INDEX])},
        "/v1/log/tile/entries/{index}": {"get": _op("C2SP tlog-tiles entry bundle: the records' leaf preimages, u16-length-prefixed (admin with tokens)", [_TILE_INDEX])},
        "/v1/log/proof/inclusion": {"get": _op("RFC 9162 inclusion proof of ?seq=N to the signed checkpoint of ?size=M (default newest); format=text: C2SP tlog-proof", [_int_query("seq", True), _int_query("size")])},
        "/v1/log/proof/consistency": {"get": _op("RFC 9162 consistency proof from ?old=A to the signed checkpoint of ?new=B (default newest)", [_int_query("old", True), _int_query("new")])},
        "/v1/log/status": {"get": _op("head seq, newest checkpoint size and age, subscribers, background verifier")},
        "/v1/stream/sse": {"get": _op("Server-Sent Events: id = seq, data = the record; Last-Event-ID resumes; typed=1 adds event:", [_AFTER, *_FILTERS])},
        "/v1/stream/ws": {"get": _op("WebSocket: send {after, filter, partition} first; each text frame is one record")},
        "/v1/stream/jsonl": {"get": _op("application/x-ndjson: one record a line, and an empty line (a keep-alive, no record) every heartbeat_seconds while idle; follow=1 stays open", [_AFTER, *_FILTERS])},
        "/v1/events": {"get": _op("long-poll: {records, next, head}; waits up to wait=S (default 30, max 60) for a match", [_AFTER, *_FILTERS])},
        "/healthz": {"get": _op("alive")},
        "/readyz": {"get": _op("ready to serve (503 while starting or stopping)")},
        "/metrics": {"get": _op("Prometheus text format")},
        # issue 17: declarative capture and AgentOps' memory contract (docs/agentops.md)
        "/v1/sessions/{session}/tool-calls": {"post": _op("report a tool call {tool, args, output, call_id?}: the capture rules trace an inject search and save a matching result as an observation", s, {"type": "object"}, write=True)},
        **{path: {m: _op(f"AgentOps memory contract: {m.upper()} {path} (docs/agentops.md)", write=m != "get") for m in methods}
           for path, methods in (("/sessions", ("post",)), ("/sessions/{id}/end", ("post",)), ("/sessions/recent", ("get",)),
                                 ("/observations", ("post",)), ("/observations/recent", ("get",)),
                                 ("/observations/{id}", ("get", "patch", "delete")), ("/search", ("get",)), ("/context", ("get",)),
                                 ("/timeline", ("get",)), ("/stats", ("get",)), ("/export", ("get",)), ("/import", ("post",)),
                                 ("/health", ("get",)))},
        # KAOS's memory endpoints (streams/kaos_api.py, docs/adapters/kaos.md)
        "/memory/events": {"get": _op("KAOS: the newest events (?limit=100, max 1000; ?session_id=), oldest first: {agent, events, total}; leaves items.read records (operator)")},
        "/memory/sessions": {"get": _op("KAOS: the tenant's session ids: {agent, sessions, total}")},
    }  # fmt: skip
    return paths


def document(routes: Iterable[RawRoute]) -> dict:
    doc = apidoc.document(routes)
    for path, methods in _legacy_paths().items():
        for method, op in methods.items():
            doc["paths"].setdefault(path, {}).setdefault(method, op)
    return doc


def routes(served: Callable[[], list[RawRoute]]) -> list[RawRoute]:
    """`/openapi.json`, the document of the routes `served()` gives (the app's, once it is
    built), made once; and the explorer over it at `/docs` (streams/explorer.py)."""
    made: list[dict] = []

    def built() -> dict:
        if not made:
            made.append(document(served()))
        return made[0]

    @apidoc.operation(
        "getApiDescription",
        "this document: the API in OpenAPI 3.1, generated from the routes served",
        replies={200: apidoc.Reply(JsonObject, "the OpenAPI document")},
        tags=("service",),
    )
    async def openapi_json(request: Request) -> Response:
        return json_response(built())

    return routes_of([("/openapi.json", {"GET": openapi_json})]) + explorer.routes()
