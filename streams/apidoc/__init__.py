"""The API's description, kept next to the handlers and generated from them (docs/openapi.md).

Each handler carries an `Operation` (the `operation` decorator): its operationId, summary, the
pydantic models of its query, headers, body and answers. `document(routes)` walks the routes the
app serves and writes OpenAPI 3.1 from those operations; no schema is written twice: pydantic
writes every JSON Schema. The models of a query and a body also parse them: a handler is given
what its operation documents.
"""

from streams.apidoc.document import document
from streams.apidoc.operation import (
    ANY_JSON,
    IDEMPOTENCY_KEY,
    IF_MATCH,
    Header,
    Operation,
    Reply,
    hidden_reason,
    keep_operation,
    operation,
    operation_of,
    undescribed,
)

__all__ = [
    "ANY_JSON",
    "IDEMPOTENCY_KEY",
    "IF_MATCH",
    "Header",
    "Operation",
    "Reply",
    "document",
    "hidden_reason",
    "keep_operation",
    "operation",
    "operation_of",
    "undescribed",
]
