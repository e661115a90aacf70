"""What every handler of AgentOps' memory contract shares (streams/seeds/agentops_api.py has the
routes): the service, a request parsed by its model with refusals in the service's words and
shape (`{"error": "message"}`), and the observation id of a path."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response

from eventstore.errors import LedgerError
from sections.adapters import agentops
from sections.model.state import MemoryState
from sections.retrieval.views import ItemView
from sections.runtime.memory import Memory
from streams.apidoc import keep_operation
from streams.apidoc.models import QUERY_TEXT
from streams.routes.query import query_values
from streams.seeds.agentops_models import refusal
from streams.server.service import Service
from streams.web.auth import Principal
from streams.web.errors import ApiError, error_response, from_exception
from streams.web.json_body import read_json
from streams.web.responses import json_response

M = TypeVar("M", bound=BaseModel)
Handler = Callable[[Request], Awaitable[Response]]
MAX_BODY = 1 << 20  # the service's request body limit
TAGS = ("AgentOps",)
CREATES = "validation failed: "  # how the service's refusal of a new session or observation starts


class Invalid(Exception):
    """A refusal in the service's words: 400 `{"error": message}`."""


def _error(status: int, message: str, headers: dict | None = None) -> Response:
    return json_response({"error": message}, status, headers)


def wrap(handler: Handler) -> Callable:
    """The endpoint of `handler`, refusing in the service's shape, carrying its operation."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except Invalid as exc:
            return _error(400, str(exc))
        except ApiError as exc:
            if exc.status == 405:  # the router's refusal, in the shape of every other 405
                return error_response(405, exc.code, exc.message, exc.headers)
            # the service answers an oversized body 400, as bad JSON
            return _error(400 if exc.status == 413 else exc.status, exc.message, exc.headers)
        except LedgerError as exc:
            answer = from_exception(exc)
            message = orjson.loads(answer.body)["error"]["message"]
            retry = answer.headers.get("retry-after")
            return _error(answer.status_code, message, {"Retry-After": retry} if retry else None)

    return keep_operation(request_response(endpoint), handler)


def observation_id(request: Request) -> int:
    value = request.path_params["id"]
    if value == "recent":  # its own resource (GET only), which /observations/{id} must not take
        raise ApiError(
            405, "method_not_allowed",
            f"{request.method} is not allowed on /observations/recent; use GET", {"Allow": "GET"},
        )  # fmt: skip
    if not agentops.is_observation(value):
        raise Invalid("invalid observation id")
    return int(value)


def text_of(content: object) -> str:
    return content if isinstance(content, str) else ""


class AgentOpsResource:
    """The handlers of one part of the contract, over the service."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def memory(self, principal: Principal) -> Memory:
        return self.service.memory_for(principal)

    def _read(self, memory: Memory, fn: Callable[[MemoryState], Any]) -> Any:
        return memory.read(fn)

    async def _parsed(
        self, request: Request, model: type[M], required: bool = True, prefix: str = ""
    ) -> M:
        """The JSON body as `model`; a refusal in the service's words, after `prefix`."""
        limit = min(MAX_BODY, self.service.settings.max_body_bytes)
        value = await read_json(request, limit, required)
        try:
            return model.model_validate(value)
        except ValidationError as exc:
            raise Invalid(refusal(exc, model, prefix)) from None

    def _query(self, request: Request, model: type[M]) -> M:
        values = query_values(model, request.query_params.multi_items())
        try:
            return model.model_validate(values, context=QUERY_TEXT)
        except ValidationError as exc:
            raise Invalid(refusal(exc, model)) from None


def observation_answers(memory: Memory, tenant: str, found: list[tuple[str, ItemView]]) -> list:
    """The observations a read found, in the service's shape: each with its holder's project
    and scope (read from the holder: an encoded id may not hold them)."""
    sids = {sid for sid, _ in found}
    names = memory.read(lambda state: {sid: agentops.names_of(state, tenant, sid) for sid in sids})
    return [agentops.observation_json(names[sid], view, view.content) for sid, view in found]
