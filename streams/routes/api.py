"""The REST API under /v1: sessions, sections, items, turns, context, state, erasure.

Every write returns only once its record is durable, with the record as the exact bytes of its
line under `record`. `Idempotency-Key` makes a retry return the first call's record; `If-Match`
carries the expected session version (a stale one is 409, nothing appended).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from urllib.parse import quote

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from eventstore.errors import InvalidInput, LedgerError
from eventstore.jcs import MAX_SAFE_INTEGER
from eventstore.timestamps import parse_time
from sections.model.commands import UPDATABLE, seed_payload
from sections.model.config import COMPACTION_SETTINGS, SETTINGS, MemoryConfig
from sections.model.item_filter import MAX_PAGE, NO_FILTER, ItemFilter, event_type
from sections.retrieval.views import Extra
from sections.runtime.memory import Memory, Session
from sections.runtime.session import item_ids
from sections.specs import command_specs as specs
from sections.specs.command_specs import CommandSpec
from streams.apidoc import IDEMPOTENCY_KEY, Reply, keep_operation, operation
from streams.apidoc.models import RecordReply
from streams.apidoc.operation import ETAG, IF_MATCH, LOCATION
from streams.routes import session_models as sm
from streams.routes.item_models import (
    ITEM_PATH,
    SECTION_PATH,
    EventsQuery,
    ItemAdded,
    ItemBatchToAdd,
    ItemEventList,
    ItemList,
    ItemReadQuery,
    ItemsAdded,
    ItemsQuery,
    ItemToAdd,
    ItemUpdate,
    ItemView,
    SectionSettingsChange,
)
from streams.server.service import Service
from streams.web.auth import Principal
from streams.web.errors import ApiError, error_response, from_exception
from streams.web.json_body import parse_object, read_body
from streams.web.responses import json_response, record_json, send_json
from streams.web.routing import RawRoute, routes_of

Handler = Callable[[Request], Awaitable[Response]]
# A lean route's handler: (scope, receive) -> (status, JSON body, headers); see `lean`.
LeanHandler = Callable[[Scope, Receive], Awaitable[tuple[int, bytes, list[tuple[bytes, bytes]]]]]
# Writes with bodies larger than this run on a worker thread: encoding megabytes of JSON (JCS) takes
# long enough to stall every stream and request sharing the event loop.
LARGE_BODY = 256 * 1024
# Context injection (sections/retrieval/inject.py): observations for a query, recent sessions' summaries.
CONTEXT_EXTRAS = ("query", "observations", "summaries", "observation_chars", "facts", "sessions")
CONTEXT_FIELDS = ("budget", "sections", "reader", *CONTEXT_EXTRAS)
CONTEXT_COUNTS = ("budget", "observations", "summaries", "observation_chars", "facts", "sessions")
# Section settings that are counts (sections/model/config.py SETTINGS).
COUNT_SETTINGS = ("budget_tokens", "max_items", *COMPACTION_SETTINGS)
COMPACT_FIELDS = frozenset(("target_bytes", "section", "budget", "sections"))
# Query parameters of the reads (`token` is a credential: streams/web/auth.py).
LIST_PAGING = frozenset(("limit", "offset", "since", "until"))
_FILTERS = ("role", "since", "until", "recent", "offset", "limit", "reader", "token")
ITEM_PARAMS = frozenset(("id", "kind", *_FILTERS))
EVENT_PARAMS = frozenset(("type", *_FILTERS))
# What an item write says of itself: its headers and its answer, the record and the new version.
_ITEM_WRITE = {"headers": (IDEMPOTENCY_KEY, IF_MATCH), "writes": True, "tags": ("items",)}
_ITEMS = Reply(ItemList, headers=(ETAG,))
_WRITTEN = Reply(RecordReply, "durable: the record's exact line under `record`", headers=(ETAG,))
STATE_AT_CALLS = (
    1  # replays at once: a second one only shares the GIL (bench/state_at.py); 429 busy
)


async def read_json(request: Request, limit: int, required: bool = True) -> dict:
    """The request body as a JSON object: size-limited, strictly parsed (no duplicate keys)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "body_too_large", f"the body is {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"the body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    request.state.body_bytes = size
    if not body.strip():
        if required:
            raise ApiError(400, "invalid_input", "a JSON object body is required")
        if body:  # no body is zero bytes; blanks are no JSON text
            raise ApiError(400, "invalid_input", "a blank body: send a JSON object, or no body")
        return {}
    return _json_object(body)


def _json_object(body: bytes) -> dict:
    value = parse_object(body)  # loads_strict's answer, through orjson when it is the same
    if type(value) is not dict:
        raise ApiError(400, "invalid_input", "the body must be a JSON object")
    return value


_INTEGER = re.compile(r"-?[0-9]{1,18}")  # ASCII digits only: "²" is a digit to str.isdigit


def _integer(value: str, what: str) -> int:
    if not _INTEGER.fullmatch(value):
        raise ApiError(400, "invalid_input", f"{what} must be an integer, not {value[:40]!r}")
    return int(value)


def _if_match(request: Request) -> int | None:
    return _expected_version(request.headers.get("if-match"))


def _expected_version(value: str | None) -> int | None:
    if value is None:
        return None
    return _integer(
        value.strip().removeprefix("W/").strip('"'), "If-Match (the expected session version)"
    )


def _write_headers(scope: Scope) -> tuple[str | None, str | None]:
    """Idempotency-Key and If-Match from the raw headers (the first of each, as Headers.get)."""
    key = match = None
    for name, value in scope["headers"]:
        if name == b"idempotency-key" and key is None:
            key = value.decode("latin-1")
        elif name == b"if-match" and match is None:
            match = value.decode("latin-1")
    return key, match


def _int_param(request: Request, name: str, default: int | None = None) -> int | None:
    value = request.query_params.get(name)
    return default if value is None else _integer(value, f"query parameter {name}")


def _only(body: dict, allowed: frozenset[str], what: str) -> dict:
    """`body`, refused unless it gives one or more of `allowed`, and nothing else (`_known`)."""
    if not body:
        raise ApiError(
            400, "invalid_input", f"give {what}: one or more of {', '.join(sorted(allowed))}"
        )
    return _known(body, tuple(sorted(allowed)), what)


def _reader(request: Request) -> str:
    reader = request.query_params.get("reader", "agent")
    if reader not in ("agent", "operator"):
        raise ApiError(400, "invalid_input", "reader must be 'agent' or 'operator'")
    return reader


def _string(body: dict, key: str, required: bool = False) -> str | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if type(value) is not str or not value:
        raise ApiError(400, "invalid_input", f"{key!r} must be a non-empty string")
    return value


class Api:
    def __init__(self, service: Service) -> None:
        self.service = service
        self._state_calls = 0  # time-travel calls running (one event loop: a plain counter)

    def memory(self, principal: Principal) -> Memory:
        """The memory holding the principal's tenant (its partition's, in store mode)."""
        return self.service.memory_for(principal)

    def _session(self, principal: Principal, request: Request) -> Session:
        return self.memory(principal).session(
            request.path_params["session"], tenant=principal.tenant, create=False
        )

    def _etag(self, session: Session) -> dict:
        return {"ETag": f'"{session.version}"'}

    async def _body(self, request: Request, required: bool = True) -> dict:
        return await read_json(request, self.service.settings.max_body_bytes, required)

    # -- sessions

    @operation(
        "listSessions",
        "the tenant's sessions in creation order, paged, filtered by last activity and metadata",
        query=sm.SessionListQuery,
        free_query=sm.METADATA_FILTERS,
        replies={200: sm.SessionList},
        tags=("sessions",),
    )
    async def list_sessions(self, request: Request) -> Response:
        """GET /v1/sessions: `limit`, `offset` page, `since`/`until` bound the last activity
        (µs or ISO-8601); every other parameter is a metadata filter (`app=` or
        `metadata.app=`; `metadata.limit=` for a metadata key named like a paging one)."""
        p = self.service.principal(request, "read")
        filters, paging = {}, {}
        for k, v in request.query_params.multi_items():
            if k in LIST_PAGING:
                paging[k] = (
                    _time_param(k, v) if k in ("since", "until") else _count_param(k, v, 2**31)
                )
            elif k != "token":
                filters[k.removeprefix("metadata.")] = v
        sessions = self.memory(p).list_sessions(p.tenant, where=filters, **paging)
        return json_response({"sessions": sessions})

    @operation(
        "createSession",
        "create a session with a server-made id; with Idempotency-Key a retry gives the same one",
        description=sm.NEW_SESSION_REFUSALS,
        headers=(IDEMPOTENCY_KEY,),
        body=sm.SessionCreateRequest,
        body_required=False,
        replies={201: Reply(sm.SessionCreated, "created", headers=(LOCATION, ETAG))},
        writes=True,
        tags=("sessions",),
    )
    async def create_session(self, request: Request) -> Response:
        """POST /v1/sessions: a session with a server-made id; 201 with `Location`. With an
        Idempotency-Key the id is derived from the key, so a retry answers the same session
        (its first `session.created`) and creates nothing."""
        p = self.service.principal(request, "write")
        memory = self.memory(p)
        metadata, config = await self._new_session(request, memory)
        key = request.headers.get("idempotency-key")
        session_id = specs.session_id_for(key)
        with self.service.write():
            record = await memory.run_async(
                specs.CREATE_SESSION, p.tenant, session_id, (config, metadata), key
            )
        session = Session(memory, p.tenant, record.session)
        content = {"record": record_json(record), "session": session.info()}
        location = "/v1/sessions/" + quote(record.session, safe="")
        return json_response(content, 201, {"Location": location, **self._etag(session)})

    async def _new_session(
        self, request: Request, memory: Memory
    ) -> tuple[dict | None, MemoryConfig]:
        """The metadata and config of the session the body asks for, its seed items checked
        even when no session will be made (it exists, or a retry finds its key): the same body
        has one answer."""
        metadata, sections, counter = _session_body(await self._body(request, required=False))
        config = memory.session_config(sections, counter)
        if config.seed_items:
            seed_payload(config, memory.counter_for(config))
        return metadata, config

    @operation(
        "getOrCreateSession",
        "get or create a session: 201 created (the settings and seeds apply), 200 it existed",
        description=sm.NEW_SESSION_REFUSALS,
        body=sm.SessionCreateRequest,
        body_required=False,
        replies={
            201: Reply(sm.SessionCreated, "created", headers=(ETAG,)),
            200: Reply(sm.SessionExisted, "it existed: nothing appended", headers=(ETAG,)),
        },
        writes=True,
        tags=("sessions",),
    )
    async def put_session(self, request: Request) -> Response:
        p = self.service.principal(request, "write")
        memory = self.memory(p)
        metadata, config = await self._new_session(request, memory)
        with self.service.write():
            record, created = await memory.run_async(
                specs.GET_OR_CREATE_SESSION,
                p.tenant,
                request.path_params["session"],
                (config, metadata),
            )
        session = self._session(p, request)
        content = {"record": record_json(record) if record else None, "session": session.info()}
        return json_response(content, 201 if created else 200, self._etag(session))

    @operation(
        "getSession",
        "a session, its sections and version (ETag)",
        replies={200: Reply(sm.SessionDetail, headers=(ETAG,))},
        tags=("sessions",),
    )
    async def get_session(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "read"), request)
        info = session.info()
        info["sections"] = session.memory.session_sections(session.tenant, session.id)
        return json_response(info, headers=self._etag(session))

    async def _run(
        self, session: Session, spec: CommandSpec, args: tuple, request: Request | None = None
    ):
        """Run a command of the table (sections/specs/command_specs.py) on `session`: the one path
        every route takes. With `request`, its Idempotency-Key and If-Match go along."""
        if request is None:
            return await session.memory.run_async(spec, session.tenant, session.id, args)
        key, expected = request.headers.get("idempotency-key"), _if_match(request)
        size = getattr(request.state, "body_bytes", 0)
        return await self._command(session, spec, args, key, expected, size)

    async def _command(self, session: Session, spec: CommandSpec, args, key, expected, size: int):
        if size > LARGE_BODY:  # canonicalizing it must not stall the event loop
            return await asyncio.to_thread(
                session.memory.run, spec, session.tenant, session.id, args, key, expected
            )
        return await session.memory.run_async(spec, session.tenant, session.id, args, key, expected)

    async def _write(self, request: Request, session: Session, spec: CommandSpec, args=()):
        """A write that answers its record (and the session's new version as ETag)."""
        with self.service.write():
            record = await self._run(session, spec, args, request)
        return json_response({"record": record_json(record)}, headers=self._etag(session))

    @operation(
        "deleteSession",
        "delete a session",
        headers=sm.WRITE_HEADERS,
        replies={200: sm.SessionWritten},
        writes=True,
        tags=("sessions",),
    )
    async def delete_session(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "write"), request)
        with self.service.write():
            record = await self._run(session, specs.DELETE_SESSION, (), request)
        return json_response({"record": record_json(record)})

    @operation(
        "getSessionStats",
        "a session's items, and its tokens and evictions by section",
        replies={200: sm.SessionStats},
        tags=("sessions",),
    )
    async def stats(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "read"), request)
        return json_response(session.stats())

    @operation(
        "getTenantStats",
        "the tenant's sessions, items, and tokens and evictions by section",
        replies={200: sm.SessionStats},
        tags=("sessions",),
    )
    async def tenant_stats(self, request: Request) -> Response:
        p = self.service.principal(request, "read")
        return json_response(self.memory(p).stats(p.tenant))

    def _writer_session(self, request: Request) -> Session:
        return self._session(self.service.principal(request, "write"), request)

    @operation(
        "endSession",
        "end the session (session.ended, then its summary), optionally after its transcript",
        headers=sm.WRITE_HEADERS,
        body=sm.SessionEndRequest,
        body_required=False,
        replies={200: sm.WRITTEN},
        writes=True,
        tags=("sessions",),
    )
    async def end_session(self, request: Request) -> Response:
        """POST .../end, optionally {"messages": [{role, content}]}: a transcript, recorded as
        the session's messages before the end, so its summary counts them."""
        session = self._writer_session(request)
        body = _only(await self._body(request, required=False) or {"messages": None},
                     frozenset(("messages",)), "the transcript as messages")  # fmt: skip
        messages = body["messages"]
        if messages is None:
            return await self._write(request, session, specs.END_SESSION)
        key, expected = request.headers.get("idempotency-key"), _if_match(request)
        args = (specs.transcript_items(messages), key, expected)
        with self.service.write():  # `expected` is the transcript's: the end follows it at once
            record = await self._command(session, specs.END_SESSION, args, key, None, 0)
        return json_response({"record": record_json(record)}, headers=self._etag(session))

    @operation(
        "endTurn",
        "end the turn: clears the turn-lifetime sections (turn.ended)",
        headers=sm.WRITE_HEADERS,
        replies={200: sm.WRITTEN},
        writes=True,
        tags=("sessions",),
    )
    async def end_turn(self, request: Request) -> Response:
        return await self._write(request, self._writer_session(request), specs.END_TURN)

    @operation(
        "commitSession",
        "commit the commit-lifetime sections (or one): they survive a restart",
        headers=sm.WRITE_HEADERS,
        body=sm.SessionCommitRequest,
        body_required=False,
        replies={200: sm.WRITTEN},
        writes=True,
        tags=("sessions",),
    )
    async def commit(self, request: Request) -> Response:
        body = _known(await self._body(request, required=False), ("section",), "a commit")
        args = (_string(body, "section"),)
        return await self._write(request, self._writer_session(request), specs.COMMIT, args)

    @operation(
        "configureSection",
        "change a section's settings for this session (or add the section)",
        body=SectionSettingsChange,
        path=SECTION_PATH,
        replies={200: _WRITTEN},
        **_ITEM_WRITE,
    )
    async def configure_section(self, request: Request) -> Response:
        session = self._writer_session(request)
        body = _only(await self._body(request), SETTINGS, "section settings")
        args = (request.path_params["section"], body)
        return await self._write(request, session, specs.CONFIGURE_SECTION, args)

    # -- items

    @operation(
        "addItems",
        "add an item, or a batch {items: [...]} in one record (all or none)",
        body=ItemToAdd | ItemBatchToAdd,
        replies={
            201: Reply(
                ItemAdded | ItemsAdded,
                "durable: the record, and the item (`item`) or the batch's (`items`)",
                headers=(ETAG,),
            )
        },
        **_ITEM_WRITE,
    )
    async def add_items(self, scope: Scope, receive: Receive):
        """POST .../items, a lean route (`lean`): the hot write path, with no Starlette request
        or response. The same checks in the same order as every other write: principal, session,
        body, Idempotency-Key and If-Match; the answer is the record and the item(s), 201."""
        p = self.service.principal_of(scope, "write")
        path = scope["path_params"]
        session = self.memory(p).session(path["session"], tenant=p.tenant, create=False)
        body = await read_body(scope, receive, self.service.settings.max_body_bytes)
        if not body.strip():
            raise ApiError(400, "invalid_input", "a JSON object body is required")
        value = _json_object(body)
        batch = "items" in value
        if batch:
            if set(value) != {"items"} or type(value["items"]) is not list:
                raise ApiError(400, "invalid_input", 'a batch is {"items": [item, ...]}')
            items = value["items"]
            if len(items) > self.service.settings.max_batch_items:
                raise ApiError(
                    413,
                    "batch_too_large",
                    f"{len(items)} items; the limit is {self.service.settings.max_batch_items}",
                )
        else:
            items = [value]
        with self.service.write():
            key, match = _write_headers(scope)
            args = (path["section"], items)
            expected = _expected_version(match)
            added = await self._command(session, specs.ADD_ITEMS, args, key, expected, len(body))
        content: dict = {"record": orjson.Fragment(added[0].record.line)}
        if batch:
            content["items"] = [a.to_json() for a in added]
        else:
            content["item"] = added[0].to_json()
        etag = b'"%d"' % session.version
        return 201, orjson.dumps(content), [(b"etag", etag)]

    @operation(
        "listSessionItems",
        "items of every section, filtered; leaves an items.read record",
        query=ItemsQuery,
        replies={200: _ITEMS},
        tags=("items",),
    )
    async def list_session_items(self, request: Request) -> Response:
        return await self.get_items(request)

    @operation(
        "listSectionItems",
        "items of a section, filtered (or ?id= those); leaves an items.read record",
        query=ItemsQuery,
        replies={200: _ITEMS},
        tags=("items",),
    )
    async def list_section_items(self, request: Request) -> Response:
        return await self.get_items(request)

    async def get_items(self, request: Request) -> Response:
        """GET .../items?kind=&role=&since=&until=&recent=&offset=&limit= (sections/model/item_filter.py;
        kind and role may repeat; times in µs or ISO-8601), or ?id= (repeats) for those items."""
        session = self._session(self.service.principal(request, "read"), request)
        chosen = _item_filter(request, ITEM_PARAMS)
        ids = request.query_params.getlist("id") or None
        args = (request.path_params.get("section"), ids, _reader(request), chosen)
        views = await self._run(session, specs.READ_ITEMS, args)
        return json_response({"items": [v.to_json() for v in views]}, headers=self._etag(session))

    @operation(
        "listSessionEvents",
        "the session's timeline: items with an event type across sections in write order, each "
        "with its type; leaves an items.read record (purpose events)",
        query=EventsQuery,
        replies={200: Reply(ItemEventList, headers=(ETAG,))},
        tags=("items",),
    )
    async def get_events(self, request: Request) -> Response:
        """GET .../events?type=&role=&since=&until=&recent=&offset=&limit=: the session's
        timeline (`Session.events`), traced as an `items.read` of purpose `events`."""
        session = self._session(self.service.principal(request, "read"), request)
        chosen = _item_filter(request, EVENT_PARAMS, timeline=True)
        args = (None, None, _reader(request), chosen)
        views = await self._run(session, specs.READ_ITEMS, args)
        # A view has the fields `event_type` reads (kind, role, extra): the same rule as the filter.
        events = [{"type": event_type(v), **v.to_json()} for v in views]  # type: ignore[arg-type]
        return json_response({"events": events}, headers=self._etag(session))

    @operation(
        "getItem",
        "one item; leaves an items.read record",
        query=ItemReadQuery,
        path=ITEM_PATH,
        replies={200: Reply(ItemView, headers=(ETAG,))},
        tags=("items",),
    )
    async def get_item(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "read"), request)
        path = request.path_params
        args = (path["section"], [path["item"]], _reader(request), NO_FILTER)
        views = await self._run(session, specs.READ_ITEMS, args)
        return json_response(views[0].to_json(), headers=self._etag(session))

    @operation(
        "updateItem",
        "update an item's content, tags, priority, metadata, kind or role",
        body=ItemUpdate,
        path=ITEM_PATH,
        replies={200: _WRITTEN},
        **_ITEM_WRITE,
    )
    async def update_item(self, request: Request) -> Response:
        session = self._writer_session(request)
        body = _only(await self._body(request), UPDATABLE, "item fields to update")
        args = (request.path_params["section"], request.path_params["item"], body)
        return await self._write(request, session, specs.UPDATE_ITEM, args)

    @operation(
        "removeItem",
        "remove an item (its content stays in the log until erased)",
        path=ITEM_PATH,
        replies={200: _WRITTEN},
        **_ITEM_WRITE,
    )
    async def remove_item(self, request: Request) -> Response:
        path = request.path_params
        args = (path["section"], item_ids(path["item"]))
        return await self._write(request, self._writer_session(request), specs.REMOVE_ITEMS, args)

    # -- context, state, erasure

    @operation(
        "assembleContext",
        "the context within a token budget, as messages; its context.assembled record is the "
        "manifest (the read's trace)",
        body=sm.SessionContextRequest,
        body_required=False,
        replies={200: sm.SessionContext},
        writes=True,
        tags=("sessions",),
    )
    async def context(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "read"), request)
        body = await self._body(request, required=False)
        _whole_numbers(_known(body, CONTEXT_FIELDS, "context"), CONTEXT_COUNTS)
        budget = body.get("budget", 8000)
        sections = body.get("sections")
        if sections is not None and (
            type(sections) is not list or not all(type(x) is str for x in sections)
        ):
            raise ApiError(400, "invalid_input", "sections must be a list of section names")
        reader = body.get("reader", "agent")
        extra = {k: body[k] for k in CONTEXT_EXTRAS if k in body}
        with self.service.write():
            args = (budget, sections, reader, Extra.of(**extra))
            record, messages = await self._run(session, specs.ASSEMBLE_CONTEXT, args)
        return json_response({"record": record_json(record), "messages": messages})

    @operation(
        "compactSession",
        "after a payload too large: compact a section until the context fits target_bytes",
        description=sm.COMPACT_REFUSALS,
        headers=sm.WRITE_HEADERS,
        body=sm.SessionCompactRequest,
        replies={200: Reply(sm.SessionCompacted, headers=(ETAG,))},
        writes=True,
        tags=("sessions",),
    )
    async def compact(self, request: Request) -> Response:
        """POST .../compact {target_bytes, section?, budget?, sections?}: after a "payload too
        large", compact until the context fits (docs/compaction.md); the server's summarizer."""
        session = self._writer_session(request)
        body = _only(await self._body(request), COMPACT_FIELDS, "compaction fields")
        _whole_numbers(body, ("target_bytes", "budget"))
        if "target_bytes" not in body:
            raise ApiError(
                400, "invalid_input", "give target_bytes: the bytes the context must fit"
            )
        sections = body.get("sections")
        if sections is not None and (
            type(sections) is not list or not all(type(x) is str for x in sections)
        ):
            raise ApiError(400, "invalid_input", "sections must be a list of section names")
        section = _string(body, "section") or "messages"
        args = (section, body["target_bytes"], body.get("budget", 8000), sections, None)
        with self.service.write():
            outcome = await self._run(session, specs.COMPACT_FOR_PAYLOAD, args, request)
        return json_response({"compaction": outcome}, headers=self._etag(session))

    @operation(
        "getTenantStateAt",
        "every session of the tenant as it was at seq `at` (an operator's read: traced)",
        query=sm.SessionStateQuery,
        replies={200: sm.SessionStateReply, 429: sm.BUSY},
        writes=True,
        tags=("sessions",),
    )
    async def tenant_state(self, request: Request) -> Response:
        # One method per route: each carries its own operationId (docs/openapi.md).
        return await self.state_at(request)

    @operation(
        "getSessionStateAt",
        "the session as it was at seq `at` (an operator's read: traced)",
        query=sm.SessionStateQuery,
        replies={200: sm.SessionStateReply, 429: sm.BUSY},
        writes=True,
        tags=("sessions",),
    )
    async def session_state(self, request: Request) -> Response:
        return await self.state_at(request)

    async def state_at(self, request: Request) -> Response:
        """Time travel. Each call replays from the nearest snapshot or checkpoint on a worker
        thread; at most STATE_AT_CALLS run at once (the replay holds the GIL in bursts that
        would stall writers), the others get 429 at once."""
        p = self.service.principal(request, "read")
        at = _int_param(request, "at")
        memory = self.memory(p)
        head = memory.writer.size - 1
        if at is None or at < 0:
            raise ApiError(400, "invalid_input", f"give ?at=SEQ with 0 <= SEQ <= {head}")
        if at > head:  # a well-formed seq the log has not reached: no such state (yet)
            raise ApiError(404, "not_found", f"seq {at} is not written yet: the head is {head}")
        if self._state_calls >= STATE_AT_CALLS:
            return error_response(
                429,
                "busy",
                f"time travel is busy (at most {STATE_AT_CALLS} at once); retry in a second",
                {"Retry-After": "1"},
            )
        self._state_calls += 1
        try:
            with self.service.write():  # the read is traced: it appends
                sessions = await memory.run_async(
                    specs.READ_STATE, p.tenant, request.path_params.get("session"), (at,)
                )
        finally:
            self._state_calls -= 1
        return json_response({"at": at, "sessions": sessions})

    @operation(
        "eraseSession",
        "admin: erase items from the files ({ids, reason}) or the whole session ({all, reason})",
        body=sm.SessionEraseRequest,
        replies={200: sm.SessionErased},
        writes=True,
        tags=("sessions",),
    )
    async def erase(self, request: Request) -> Response:
        session = self._session(self.service.principal(request, "admin"), request)
        body = _known(await self._body(request), ("reason", "ids", "all"), "an erase")
        reason = _string(body, "reason", required=True)
        erase_all = body.get("all", False)
        if type(erase_all) is not bool or (erase_all and "ids" in body):
            raise ApiError(400, "invalid_input", 'give "ids": [item ids] or "all": true, not both')
        with self.service.write():
            if erase_all:
                record = await self._run(session, specs.ERASE_SESSION, (reason,))
                return json_response({"record": record_json(record), "erased": "session"})
            ids = body.get("ids")
            if type(ids) is not list or not ids or not all(type(i) is str for i in ids):
                raise ApiError(400, "invalid_input", 'give "ids": [item ids] or "all": true')
            record, erased = await self._run(session, specs.ERASE_ITEMS, (ids, reason))
        return json_response({"record": record_json(record), "erased": erased})


def _session_body(body: dict) -> tuple[dict | None, dict | None, str | None]:
    """`metadata`, `sections` (settings and seed `items` per section) and `token_counter` (the
    counter it counts with for good: docs/tokens.md) of a new session."""
    unknown = set(body) - {"metadata", "sections", "token_counter"}
    if unknown:
        raise ApiError(
            400,
            "invalid_input",
            f"unknown fields {sorted(unknown)}; use metadata, sections and token_counter",
        )
    metadata, sections = body.get("metadata"), body.get("sections")
    counter = body.get("token_counter")
    if counter is not None and type(counter) is not str:
        raise ApiError(400, "invalid_input", "token_counter must be a counter's name")
    if metadata is not None and type(metadata) is not dict:
        raise ApiError(400, "invalid_input", "metadata must be an object")
    if sections is not None and type(sections) is not dict:
        raise ApiError(400, "invalid_input", "sections must be an object of per-section settings")
    for settings in (sections or {}).values():
        if type(settings) is dict:
            _whole_numbers(settings, COUNT_SETTINGS)
    return metadata, sections, counter


def _whole_numbers(body: dict, names: tuple[str, ...]) -> dict:
    """`body` with the integral floats of `names` made ints: JSON has one number type, so 8000.0
    is the integer 8000 (JSON Schema's `integer` says so, and the log's JCS writes it so), while
    the memory core takes only an int where it counts."""
    for name in names:
        value = body.get(name)
        if type(value) is float and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
            body[name] = int(value)
    return body


def _known(body: dict, fields: tuple[str, ...], what: str) -> dict:
    """`body`, refused when it holds a field `what` does not take: a misspelt option must not
    be ignored in silence."""
    unknown = set(body) - set(fields)
    if unknown:
        raise ApiError(
            400,
            "invalid_input",
            f"unknown fields {sorted(unknown)}; {what} takes {', '.join(fields)}",
        )
    return body


def _time_param(name: str, value: str) -> int:
    try:
        return parse_time(value)
    except InvalidInput as exc:
        raise ApiError(400, "invalid_input", f"query parameter {name}: {exc}") from None


def _count_param(name: str, value: str, top: int = MAX_PAGE) -> int:
    count = _integer(value, f"query parameter {name}")
    if not 0 <= count <= top:
        raise ApiError(400, "invalid_input", f"query parameter {name} must be from 0 to {top}")
    return count


def _item_filter(request: Request, allowed: frozenset[str], timeline: bool = False) -> ItemFilter:
    """The filter of a read's query parameters; an unknown or invalid one is a 400 naming it."""
    params = request.query_params
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ApiError(
            400, "invalid_input",
            f"unknown query parameter {unknown[0]!r}; use {', '.join(sorted(allowed - {'token'}))}",
        )  # fmt: skip
    for name in set(params) & {"since", "until", "recent", "offset", "limit"}:
        if len(params.getlist(name)) > 1:
            raise ApiError(400, "invalid_input", f"query parameter {name} is given twice")
    times = {k: _time_param(k, params[k]) for k in ("since", "until") if k in params}
    counts = {k: _count_param(k, params[k]) for k in ("recent", "offset", "limit") if k in params}
    types = params.getlist("type" if timeline else "kind") or None
    return ItemFilter.of(
        types, params.getlist("role") or None, times.get("since"), times.get("until"),
        counts.get("recent"), counts.get("offset", 0), counts.get("limit"), timeline,
    )  # fmt: skip


def lean(handler: LeanHandler) -> Callable:
    """A route as a raw ASGI app: no Starlette `Request` or `Response`, its refusals answered
    here exactly as the app's exception handlers would (streams/web/errors.py). Marked `lean`, so
    the app's express lane (streams/web/app.py) may call it without the middleware chain."""

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        try:
            status, body, headers = await handler(scope, receive)
        except ApiError as exc:
            await error_response(exc.status, exc.code, exc.message, exc.headers)(
                scope, receive, send
            )
        except LedgerError as exc:
            await from_exception(exc)(scope, receive, send)
        else:
            await send_json(send, body, status, headers)

    endpoint.lean = True  # type: ignore[attr-defined]
    return keep_operation(endpoint, handler)


def routes(service: Service) -> list[RawRoute]:
    api = Api(service)
    s = "/v1/sessions/{session}"
    table: list[tuple[str, dict[str, Callable]]] = [
        ("/v1/sessions", {"GET": api.list_sessions, "POST": api.create_session}),
        ("/v1/stats", {"GET": api.tenant_stats}),
        ("/v1/state", {"GET": api.tenant_state}),
        (s, {"PUT": api.put_session, "GET": api.get_session, "DELETE": api.delete_session}),
        (s + "/stats", {"GET": api.stats}),
        (s + "/end", {"POST": api.end_session}),
        (s + "/turns/end", {"POST": api.end_turn}),
        (s + "/commit", {"POST": api.commit}),
        (s + "/compact", {"POST": api.compact}),
        (s + "/context", {"POST": api.context}),
        (s + "/state", {"GET": api.session_state}),
        (s + "/erase", {"POST": api.erase}),
        (s + "/items", {"GET": api.list_session_items}),
        (s + "/events", {"GET": api.get_events}),
        (s + "/sections/{section}", {"PUT": api.configure_section}),
        (
            s + "/sections/{section}/items",
            {"POST": lean(api.add_items), "GET": api.list_section_items},
        ),
        (
            s + "/sections/{section}/items/{item}",
            {"GET": api.get_item, "PATCH": api.update_item, "DELETE": api.remove_item},
        ),
    ]
    return routes_of(table)


__all__ = ["InvalidInput", "routes"]
