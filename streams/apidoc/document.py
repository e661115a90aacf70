"""OpenAPI 3.1 from the routes the app serves and the operations their handlers carry.

Every JSON Schema comes from pydantic (`TypeAdapter.json_schemas`, one pass over every type the
API names, each model once under `components/schemas`). What is written here is only OpenAPI's
own frame: paths, parameters, request bodies, responses, the answers every route shares.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import TypeAdapter
from pydantic.json_schema import JsonSchemaMode

from streams.apidoc.models import ErrorReply, Identifier
from streams.apidoc.operation import Header, Operation, Reply, operation_of

REF = "#/components/schemas/{model}"
# Path parameters by name, unless an operation says otherwise (`Operation.path`).
PATH_TYPES: dict[str, tuple[Any, str]] = {
    "session": (Identifier, "the session id, percent-encoded: it may hold / : @ +"),
    "section": (Identifier, "the section name"),
}
_DEFAULT_PATH = (str, "")
_GUARD = {
    "403": "forbidden: a foreign Origin (not the service's own, nor in allowed_origins), or a "
    "token without the scope the route needs",
    "421": "unknown_host: Host is not one of the service's names (allowed_hosts)",
}
_BODY_ERRORS = {
    "413": "body_too_large: the body is over max_body_bytes",
    "415": "unsupported_media_type: a body must be JSON sent as application/json",
}
_WRITE_ERRORS = {
    "503": "the log is not taking writes (shutting down, a failed disk, no leader): Retry-After",
    "507": "disk_full or file_too_large: the write was not made",
}
SECURITY_SCHEMES = {
    "bearer": {"type": "http", "scheme": "bearer"},
    "tokenQuery": {"type": "apiKey", "in": "query", "name": "token"},
    "tokenCookie": {"type": "apiKey", "in": "cookie", "name": "ledgermem_token"},
}
INFO = {
    "title": "ledgermem",
    "version": "1",
    "description": "Memory for AI agents on a signed, hash-chained log. Every write answers once "
    "its record is durable, with the record's exact line under `record`; every refusal is a 4xx "
    "`{error: {code, message}}` with nothing appended. Credentials (when the service has "
    "tokens): Authorization: Bearer, a `token` query parameter, or the ledgermem_token cookie. "
    "The record format is docs/format.md of the repository, the wire contract (writes, cursor, "
    "streams, the WebSocket at /v1/stream/ws) docs/wire.md.",
}


def document(routes: Iterable) -> dict:
    """The OpenAPI document of `routes` (RawRoutes), in their order."""
    described = [
        (route.pattern, method.lower(), found)
        for route in routes
        for method, endpoint in route.endpoints.items()
        if (found := operation_of(endpoint)) is not None
    ]
    schemas = _Schemas(op for _, _, op in described)
    paths: dict[str, dict] = {}
    for pattern, method, op in described:
        paths.setdefault(pattern, {})[method] = _operation(pattern, op, schemas)
    return {
        "openapi": "3.1.0",
        "info": INFO,
        "paths": paths,
        "components": {"schemas": schemas.components, "securitySchemes": SECURITY_SCHEMES},
        # Optional credentials: a service without tokens takes none.
        "security": [{}, *({name: []} for name in SECURITY_SCHEMES)],
    }


class _Schemas:
    """Every type the operations name, generated in one pass; `of(type, mode)` gives its schema
    (a $ref for a model), `fields(model)` the properties of a query model."""

    def __init__(self, ops: Iterable[Operation]) -> None:
        wanted: dict[tuple[int, str], tuple[Any, JsonSchemaMode]] = {}
        queries: set[int] = set()
        for op in ops:
            for kind in _types_of(op):
                wanted.setdefault((id(kind[0]), kind[1]), kind)
            if op.query is not None:
                queries.add(id(op.query))
        inputs = [(key, mode, TypeAdapter(kind)) for key, (kind, mode) in wanted.items()]
        found, definitions = TypeAdapter.json_schemas(inputs, ref_template=REF)
        self._found = found
        self.components: dict[str, dict] = dict(definitions.get("$defs", {}))
        # A query model's fields become parameters; the model itself is no component.
        self._fields = {key: self._inline(key) for key in queries}

    def of(self, kind: Any, mode: JsonSchemaMode) -> dict:
        return self._found[((id(kind), mode), mode)]

    def _inline(self, key: int) -> dict:
        schema = self._found[((key, "validation"), "validation")]
        ref = schema.get("$ref")
        if ref is None:
            return schema
        name = ref.rsplit("/", 1)[-1]
        return self.components.pop(name)

    def fields(self, model: Any) -> dict:
        return self._fields[id(model)]


def _types_of(op: Operation) -> Iterator[tuple[Any, JsonSchemaMode]]:
    if op.query is not None:
        yield op.query, "validation"
    if op.free_query is not None:
        yield op.free_query[1], "validation"
    if op.body is not None:
        yield op.body, "validation"
    for kind, _ in (*PATH_TYPES.values(), *op.path.values()):
        yield kind, "validation"
    yield _DEFAULT_PATH[0], "validation"
    for header in op.headers:
        yield header.type, "validation"
    for status in op.replies:
        reply = op.reply(status)
        for model in (reply.model, *(model for _, model in reply.also)):
            if model is not None:
                yield model, "serialization"
        for header in reply.headers:
            yield header.type, "serialization"
    yield ErrorReply, "serialization"


def _operation(pattern: str, op: Operation, schemas: _Schemas) -> dict:
    parameters = [_path_parameter(name, op, schemas) for name in _path_names(pattern)]
    if op.query is not None:
        parameters += _query_parameters(op.query, schemas)
    if op.free_query is not None:
        name, kind, description = op.free_query
        parameters.append(
            {"name": name, "in": "query", "description": description, "style": "form",
             "explode": True, "schema": schemas.of(kind, "validation")}
        )  # fmt: skip
    parameters += [_header(h, schemas, "validation") | {"in": "header"} for h in op.headers]
    out: dict[str, Any] = {"operationId": op.id, "summary": op.summary}
    if op.description:
        out["description"] = op.description
    if op.tags:
        out["tags"] = list(op.tags)
    if parameters:
        out["parameters"] = parameters
    if op.body is not None:
        body: dict[str, Any] = {
            "required": op.body_required,
            "content": {"application/json": {"schema": schemas.of(op.body, "validation")}},
        }
        if op.body_description:
            body["description"] = op.body_description
        out["requestBody"] = body
    out["responses"] = _responses(op, schemas)
    return out


def _path_names(pattern: str) -> list[str]:
    return [part[1:-1] for part in pattern.split("/") if part.startswith("{")]


def _path_parameter(name: str, op: Operation, schemas: _Schemas) -> dict:
    kind, description = op.path.get(name) or PATH_TYPES.get(name) or _DEFAULT_PATH
    parameter = {"name": name, "in": "path", "required": True}
    if description:
        parameter["description"] = description
    parameter["schema"] = schemas.of(kind, "validation")
    return parameter


def _query_parameters(model: Any, schemas: _Schemas) -> list[dict]:
    schema = schemas.fields(model)
    required = set(schema.get("required", ()))
    parameters = []
    for name, field_schema in schema.get("properties", {}).items():
        field_schema = dict(field_schema)
        parameter: dict[str, Any] = {"name": name, "in": "query", "required": name in required}
        description = field_schema.pop("description", None)
        field_schema.pop("title", None)
        if description:
            parameter["description"] = description
        parameter["schema"] = field_schema
        parameters.append(parameter)
    return parameters


def _header(header: Header, schemas: _Schemas, mode: JsonSchemaMode) -> dict:
    out: dict[str, Any] = {"name": header.name, "description": header.description}
    if header.required:
        out["required"] = True
    out["schema"] = schemas.of(header.type, mode)
    return out


def _reply(reply: Reply, schemas: _Schemas) -> dict:
    out: dict[str, Any] = {"description": reply.description}
    if reply.headers:
        out["headers"] = {
            h.name: {k: v for k, v in _header(h, schemas, "serialization").items() if k != "name"}
            for h in reply.headers
        }
    content = {
        media_type: {"schema": schemas.of(model, "serialization")}
        if model is not None
        else {"schema": {"type": "string"}}
        for media_type, model in ((reply.media_type, reply.model), *reply.also)
        if model is not None or media_type != "application/json"
    }
    if content:
        out["content"] = content
    return out


def _responses(op: Operation, schemas: _Schemas) -> dict:
    responses = {str(status): _reply(op.reply(status), schemas) for status in op.replies}
    shared = dict(_GUARD)
    if op.body is not None:
        shared |= _BODY_ERRORS
    for status, description in shared.items():
        responses.setdefault(status, _reply(Reply(ErrorReply, description), schemas))
    responses.setdefault(
        "4XX", _reply(Reply(ErrorReply, "refused: nothing was appended (docs/wire.md)"), schemas)
    )
    if op.writes:
        for status, description in _WRITE_ERRORS.items():
            responses.setdefault(status, _reply(Reply(ErrorReply, description), schemas))
    return responses
