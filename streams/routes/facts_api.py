"""Facts over HTTP (sections/retrieval/facts.py, docs/facts.md).

    POST /v1/facts                             assert a fact, or {"facts": [...]} in one record
    GET  /v1/facts?subject=&predicate=&object=&as_of=&history=1
    POST /v1/facts/{fact}/retract              {"at", "reason"}: end a valid fact
    POST /v1/sessions/{session}/facts          sources are that session's item ids
    GET  /v1/sessions/{session}/facts          the facts asserted in it or learned from its items

`as_of`, `valid_from` and `at` are microseconds since the epoch; `as_of` may also be ISO-8601.
A source that is not a live item, or a retraction at a time the fact is not valid, is a 409
`fact_conflict`: the request is well-formed, the memory's state refuses it.
Reads leave an `items.read` record (purpose "facts") on the tenant's session `_tenant`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from sections.specs import fact_specs
from sections.specs.fact_specs import HOLDER
from streams.apidoc import IDEMPOTENCY_KEY, Reply, operation
from streams.routes.facts_models import (
    FACTS_WHEN,
    FactAsserted,
    FactList,
    FactRetracted,
    FactsAsOf,
    FactsAsserted,
    FactsHistory,
    FactsQuery,
    NewFactRequest,
    NewFactsRequest,
    RetractRequest,
    SessionFactRequest,
    SessionFactsRequest,
)
from streams.routes.query import parse_query
from streams.routes.resource import Api, Handler
from streams.server.service import Service
from streams.web.json_body import parse_model, read_json
from streams.web.responses import json_response, record_json
from streams.web.routing import RawRoute, routes_of

_FILTERS = frozenset(FactsQuery.model_fields)
ASSERTED = {
    201: Reply(FactAsserted | FactsAsserted, "asserted: `fact`, or `facts` for a batch"),
}


def _key(request: Request) -> str | None:
    """`Idempotency-Key`: a retry answers with the first call's record (remembered on `_tenant`)."""
    return request.headers.get("idempotency-key")


class FactsApi(Api):
    def _scope(self, request: Request):
        """The principal and the session named in the path (404 if unknown), or None."""
        p = self.service.principal(request, "read" if request.method == "GET" else "write")
        session = request.path_params.get("session")
        if session is not None:
            self._session(p, request)
        return p, session

    @operation(
        "assertFacts",
        "assert a fact (or {facts: [...]} in one record): it closes the facts of the same "
        "subject and predicate valid at its start",
        body=NewFactRequest | NewFactsRequest,
        headers=(IDEMPOTENCY_KEY,),
        replies=ASSERTED,
        writes=True,
        tags=("facts",),
    )
    async def assert_tenant_facts(self, request: Request) -> Response:
        return await self._assert(request)

    @operation(
        "assertSessionFacts",
        "assert facts in this session (or {facts: [...]}): sources may be its item ids",
        body=SessionFactRequest | SessionFactsRequest,
        headers=(IDEMPOTENCY_KEY,),
        replies=ASSERTED,
        writes=True,
        tags=("facts",),
    )
    async def assert_session_facts(self, request: Request) -> Response:
        return await self._assert(request)

    async def _assert(self, request: Request) -> Response:
        p, session = self._scope(request)
        value = await read_json(request, self.service.settings.max_body_bytes)
        # the two forms of the body: one fact, or {"facts": [...]} alone
        batch = "facts" in value
        facts: Sequence[BaseModel]
        if session:  # a source may be one of its item ids
            facts = (parse_model(SessionFactsRequest, value).facts if batch
                     else [parse_model(SessionFactRequest, value)])  # fmt: skip
        else:
            facts = (parse_model(NewFactsRequest, value).facts if batch
                     else [parse_model(NewFactRequest, value)])  # fmt: skip
        given = [fact.model_dump(exclude_unset=True) for fact in facts]
        args = fact_specs.assert_many(given)[0]
        with self.service.write():
            record, made = await self.memory(p).run_async(
                fact_specs.ASSERT_FACTS, p.tenant, HOLDER, (session, *args), _key(request)
            )
        answer = {"facts": [f.to_json() for f in made]} if batch else {"fact": made[0].to_json()}
        return json_response({**answer, "record": record_json(record)}, 201)

    @operation(
        "listFacts",
        "the tenant's facts valid now, as_of a time, or every one (history=1); traced",
        query=FactsQuery,
        free_query=FACTS_WHEN,
        replies={200: FactList},
        tags=("facts",),
    )
    async def list_tenant_facts(self, request: Request) -> Response:
        return await self._read(request)

    @operation(
        "listSessionFacts",
        "the facts asserted in this session or learned from its items; traced",
        query=FactsQuery,
        free_query=FACTS_WHEN,
        replies={200: FactList},
        tags=("facts",),
    )
    async def list_session_facts(self, request: Request) -> Response:
        return await self._read(request)

    async def _read(self, request: Request) -> Response:
        p, session = self._scope(request)
        pairs = request.query_params.multi_items()
        # The filters, then which facts (`FACTS_WHEN`: valid as_of a time, now, or every one):
        # between them they refuse any other parameter.
        fields = [(k, v) for k, v in pairs if k in _FILTERS]
        query = parse_query(FactsQuery, fields)
        rest = [(k, v) for k, v in pairs if k not in _FILTERS]
        when: FactsAsOf | FactsHistory
        if any(k == "as_of" for k, _ in rest):
            when = parse_query(FactsAsOf, rest)
        else:
            when = parse_query(FactsHistory, rest)
        as_of = when.as_of if isinstance(when, FactsAsOf) else None
        args = fact_specs.query(
            query.subject, query.predicate, query.object, as_of=as_of,
            include_history=when.history == 1, reader=query.reader,
        )[0]  # fmt: skip
        with self.service.write():  # a read: it appends its trace
            found = await self.memory(p).run_async(
                fact_specs.READ_FACTS, p.tenant, HOLDER, (session, *args)
            )
        return json_response({"facts": [f.to_json() for f in found]})

    @operation(
        "retractFact",
        "end a valid fact at {at} (default now), with {reason}",
        body=RetractRequest,
        body_required=False,
        headers=(IDEMPOTENCY_KEY,),
        path={"fact": (str, "the fact's id")},
        replies={200: FactRetracted},
        writes=True,
        tags=("facts",),
    )
    async def retract(self, request: Request) -> Response:
        p, _ = self._scope(request)
        body = await self._parsed(request, RetractRequest, required=False)
        args = fact_specs.retract(request.path_params["fact"], at=body.at, reason=body.reason)[0]
        with self.service.write():
            record, fact = await self.memory(p).run_async(
                fact_specs.RETRACT_FACT, p.tenant, HOLDER, (None, *args), _key(request)
            )
        return json_response({"fact": fact.to_json(), "record": record_json(record)})


def routes(service: Service) -> list[RawRoute]:
    api = FactsApi(service)
    table: list[tuple[str, dict[str, Handler]]] = [
        ("/v1/facts", {"POST": api.assert_tenant_facts, "GET": api.list_tenant_facts}),
        ("/v1/facts/{fact}/retract", {"POST": api.retract}),
        (
            "/v1/sessions/{session}/facts",
            {"POST": api.assert_session_facts, "GET": api.list_session_facts},
        ),
    ]
    return routes_of(table)
