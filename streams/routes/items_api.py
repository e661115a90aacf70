"""Items under /v1: a section's settings, adding items (the lean hot path), reading them and the
session's timeline, updating and removing one (streams/routes/api.py has the route table).

Reads leave an `items.read` record; every write answers its durable record and the session's
new version as ETag.
"""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope

from sections.model.item_filter import NO_FILTER, ItemFilter, event_type
from sections.runtime.session import item_ids
from sections.specs import command_specs as specs
from streams.apidoc import IDEMPOTENCY_KEY, IF_MATCH, Reply, operation
from streams.apidoc.models import RecordReply
from streams.apidoc.operation import ETAG
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
from streams.routes.resource import Api, expected_version, write_headers
from streams.web.errors import ApiError
from streams.web.json_body import json_object, parse_fields, read_body
from streams.web.responses import json_response

# What an item write says of itself: its headers and its answer, the record and the new version.
_ITEM_WRITE = {"headers": (IDEMPOTENCY_KEY, IF_MATCH), "writes": True, "tags": ("items",)}
_ITEMS = Reply(ItemList, headers=(ETAG,))
_WRITTEN = Reply(RecordReply, "durable: the record's exact line under `record`", headers=(ETAG,))
_LeanAnswer = tuple[int, bytes, list[tuple[bytes, bytes]]]


def item_filter(query: ItemsQuery | EventsQuery) -> ItemFilter:
    """The filter of a read's parsed query (sections/model/item_filter.py)."""
    timeline = isinstance(query, EventsQuery)
    types = query.type if isinstance(query, EventsQuery) else query.kind
    return ItemFilter.of(
        types or None, query.role or None, query.since, query.until, query.recent,
        query.offset or 0, query.limit, timeline,
    )  # fmt: skip


class ItemsApi(Api):
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
        body = await self._parsed(request, SectionSettingsChange)
        args = (request.path_params["section"], body.changes())
        return await self._write(request, session, specs.CONFIGURE_SECTION, args)

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
    async def add_items(self, scope: Scope, receive: Receive) -> _LeanAnswer:
        """POST .../items, a lean route (resource.py `lean`): the hot write path, with no
        Starlette request or response. The same checks in the same order as every other write:
        principal, session, body, Idempotency-Key and If-Match; the answer is the record and the
        item(s), 201."""
        p = self.service.principal_of(scope, "write")
        path = scope["path_params"]
        session = self.memory(p).session(path["session"], tenant=p.tenant, create=False)
        body = await read_body(scope, receive, self.service.settings.max_body_bytes)
        if not body or body.isspace():
            raise ApiError(400, "invalid_input", "a JSON object body is required")
        value = json_object(body)
        batch = "items" in value
        if batch:
            limit = self.service.settings.max_batch_items  # a setting: the model says the default
            given = value["items"]
            if type(given) is list and len(given) > limit:
                raise ApiError(413, "batch_too_large", f"{len(given)} items; the limit is {limit}")
            items = parse_fields(ItemBatchToAdd, value)["items"]
        else:
            items = [parse_fields(ItemToAdd, value)]
        with self.service.write():
            key, match = write_headers(scope)
            args = (path["section"], items)
            expected = expected_version(match)
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
        query = self._query(request, ItemsQuery)
        section = request.path_params.get("section")
        args = (section, query.id or None, query.reader or "agent", item_filter(query))
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
        query = self._query(request, EventsQuery)
        args = (None, None, query.reader or "agent", item_filter(query))
        views = await self._run(session, specs.READ_ITEMS, args)
        # A view has the fields `event_type` reads (kind, role, extra): the same rule as the filter.
        events = [{"type": event_type(v), **v.to_json()} for v in views]
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
        reader = self._query(request, ItemReadQuery).reader or "agent"
        path = request.path_params
        args = (path["section"], [path["item"]], reader, NO_FILTER)
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
        body = await self._parsed(request, ItemUpdate)
        args = (request.path_params["section"], request.path_params["item"], body.changes())
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
