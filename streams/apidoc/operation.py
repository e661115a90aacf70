"""What one handler says about itself: an `Operation`, attached by the `operation` decorator.

The types named here (a query model, a body, each reply) are pydantic models or any type a
pydantic `TypeAdapter` takes; streams/apidoc/document.py turns them into JSON Schema. The same
query and body models parse the request the handler is given (streams/web/json_body.py,
streams/routes/query.py); the memory core then judges what it means (budgets, policies,
conflicts), for the Python API, HTTP and MCP alike. Schemathesis runs both ways over the
document (tests/test_openapi_conformance.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from streams.apidoc.models import IdempotencyKeyText, Version

F = TypeVar("F", bound=Callable)
_ATTRIBUTE = "api_operation"
_HIDDEN = "api_hidden"  # why a served route is not in /openapi.json
ANY_JSON = Any  # a body or reply of any JSON value


@dataclass(frozen=True)
class Header:
    """A request or response header."""

    name: str
    description: str
    type: Any = str
    required: bool = False


IDEMPOTENCY_KEY = Header(
    "Idempotency-Key",
    "a retry with the same key returns the first call's record and appends nothing; an empty "
    "key is 400, a key used before for another kind of write to the same session is 409",
    IdempotencyKeyText,
)
IF_MATCH = Header(
    "If-Match",
    'the session version the write expects, as its ETag gives it ("7", W/"7" or 7); a stale '
    "one is 409 version_conflict and nothing is appended",
    Version,
)
# Reply headers: every answer that lists one carries it.
ETAG = Header("ETag", "the session's version after the call, quoted", required=True)
LOCATION = Header("Location", "the new session's URL", required=True)
RETRY_AFTER = Header("Retry-After", "seconds to wait before trying again", int)


@dataclass(frozen=True)
class Reply:
    """One answer: its body's type (None: no JSON body), what it means, its media type.

    `also` lists the other media types the same answer may come as, each with its body's type
    (None: text), for an operation whose caller picks the form (a `format` parameter).
    """

    model: Any = None
    description: str = "ok"
    media_type: str = "application/json"
    headers: tuple[Header, ...] = ()
    also: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Operation:
    """An HTTP operation as OpenAPI describes it.

    `query` is a pydantic model whose fields are the query parameters; `free_query`, the
    schema of a free-form set of parameters besides them (an object, exploded, as OpenAPI
    writes "any other parameter"). `path` gives a path parameter's type where the route's
    default (streams/apidoc/document.py, `PATH_TYPES`) does not fit. `replies` maps a status
    (or a range like "4XX") to its `Reply`, or to a type, read as `Reply(type)`. `writes` marks
    an operation that appends: its refusals include the write's 503 and 507 answers.
    """

    id: str
    summary: str
    replies: dict[int | str, Any] = field(default_factory=dict)
    query: Any = None
    free_query: tuple[str, Any, str] | None = None  # (name, type, description)
    headers: tuple[Header, ...] = ()
    body: Any = None
    body_required: bool = True
    body_description: str = ""
    path: dict[str, tuple[Any, str]] = field(default_factory=dict)
    writes: bool = False
    tags: tuple[str, ...] = ()
    description: str = ""

    def reply(self, status: int | str) -> Reply:
        value = self.replies[status]
        return value if isinstance(value, Reply) else Reply(value)


def operation(op_id: str, summary: str, **fields: Any) -> Callable[[F], F]:
    """Describe the decorated handler as `Operation(op_id, summary, **fields)`."""
    described = Operation(op_id, summary, **fields)

    def attach(handler: F) -> F:
        setattr(handler, _ATTRIBUTE, described)
        return handler

    return attach


def undescribed(reason: str) -> Callable[[F], F]:
    """Keep the decorated handler out of /openapi.json, for `reason` (which OpenAPI cannot
    say: a WebSocket, a protocol with its own description, a variable number of segments)."""

    def attach(handler: F) -> F:
        setattr(handler, _HIDDEN, reason)
        return handler

    return attach


def operation_of(endpoint: Callable) -> Operation | None:
    return getattr(endpoint, _ATTRIBUTE, None)


def hidden_reason(endpoint: Callable) -> str | None:
    return getattr(endpoint, _HIDDEN, None)


def keep_operation(endpoint: F, handler: Callable) -> F:
    """`endpoint` (an ASGI app wrapping `handler`) carrying what `handler` says of itself."""
    for attribute in (_ATTRIBUTE, _HIDDEN):
        value = getattr(handler, attribute, None)
        if value is not None:
            setattr(endpoint, attribute, value)
    return endpoint
