"""Errors as HTTP answers: every refusal is a 4xx with `{"error": {"code", "message"}}` (docs/wire.md).

A request the model of its body or query refuses (pydantic's `ValidationError`) is answered here
and only here (`invalid_input`): 400 `invalid_input`, its message naming each field and what is
wrong with it.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from eventstore.errors import InvalidInput, LedgerError, StalePosition, WriterClosed
from eventstore.shared import StoreError
from eventstore.sink import CommitRefused
from sections.errors import (
    BudgetExceeded,
    CannotCompact,
    ConflictingSettings,
    FactConflict,
    IdempotencyConflict,
    ImmutableSection,
    ItemTooLarge,
    NotAdmitted,
    NotFound,
    SessionEnded,
    SessionExists,
    SummarizerFailed,
    UserConflict,
    VersionConflict,
)
from streams.apidoc.models import NOT_BLANK
from streams.web.responses import json_response

log = logging.getLogger("ledgermem.http")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


# Most specific first.
_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (NotFound, 404, "not_found"),
    (SessionExists, 409, "session_exists"),
    (SessionEnded, 409, "session_ended"),
    (VersionConflict, 409, "version_conflict"),
    (IdempotencyConflict, 409, "idempotency_key_reused"),
    (StalePosition, 409, "stale_position"),
    (ImmutableSection, 409, "immutable_section"),
    (FactConflict, 409, "fact_conflict"),
    (UserConflict, 409, "user_conflict"),
    (ItemTooLarge, 422, "item_too_large"),
    (NotAdmitted, 422, "not_admitted"),
    (BudgetExceeded, 422, "budget_exceeded"),
    (CannotCompact, 422, "cannot_compact"),
    (ConflictingSettings, 422, "conflicting_settings"),
    (SummarizerFailed, 422, "summarizer_failed"),
    (InvalidInput, 400, "invalid_input"),
    (WriterClosed, 503, "unavailable"),
)


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> Response:
    return json_response({"error": {"code": code, "message": message}}, status, headers)


# A failed write names its cause: the storage's errno, as a status and a code.
_CAUSES: dict[int, tuple[int, str]] = {
    errno.ENOSPC: (507, "disk_full"),
    errno.EDQUOT: (507, "disk_full"),
    errno.EFBIG: (507, "file_too_large"),
    errno.EMFILE: (503, "too_many_open_files"),
    errno.ENFILE: (503, "too_many_open_files"),
    errno.EIO: (503, "io_error"),
    errno.EROFS: (503, "read_only_storage"),
}


def refusal_code(exc: BaseException) -> tuple[str, int]:
    """The code and status of a refusal after a failed write (or of a closed writer)."""
    cause = exc.cause if isinstance(exc, WriterClosed) else exc
    if isinstance(cause, WriterClosed):
        cause = cause.cause
    if cause is None:
        return "unavailable", 503
    if isinstance(cause, OSError) and cause.errno in _CAUSES:
        status, code = _CAUSES[cause.errno]
        return code, status
    return "write_failed", 503


def from_exception(exc: BaseException) -> Response:
    if isinstance(exc, CommitRefused):
        # Fenced: another replica took the partition over while this call was in flight. Not
        # acknowledged; the forwarder refreshes its route and retries once (docs/wire.md, 421).
        return error_response(421, "not_leader", str(exc))
    if isinstance(exc, WriterClosed):
        code, status = refusal_code(exc)
        return error_response(status, code, str(exc), {"Retry-After": "1"})
    if isinstance(exc, StoreError):
        # The shared store did not answer a request's read in time (or at all): the request was
        # fine and may be sent again; nothing was appended.
        return error_response(503, "store_unavailable", str(exc), {"Retry-After": "1"})
    for kind, status, code in _STATUS:
        if isinstance(exc, kind):
            return error_response(status, code, str(exc))
    if isinstance(exc, LedgerError):
        return error_response(400, "refused", str(exc))
    raise exc


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def handle_ledger_error(request: Request, exc: Exception) -> Response:
    return from_exception(exc)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    headers = dict(exc.headers) if exc.headers is not None else None
    return error_response(exc.status_code, code, str(exc.detail), headers)


EXCEPTION_HANDLERS = {
    ApiError: handle_api_error,
    LedgerError: handle_ledger_error,
    HTTPException: handle_http_exception,
}


# ---- a request its model refuses ---------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing a model refused: where (`path`, the field's name and the keys and indexes to
    it), pydantic's kind of error and its context, and the value given."""

    path: tuple[str | int, ...]
    kind: str
    context: dict[str, Any]
    given: object
    message: str  # pydantic's own words, or ours for the errors our types raise

    @property
    def field(self) -> str:
        """The path as a client writes it: `sections.role.items[0].content`."""
        out = ""
        for part in self.path:
            out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
        return out


def problems(error: ValidationError) -> list[Problem]:
    return [
        Problem(tuple(e["loc"]), e["type"], dict(e.get("ctx") or {}), e.get("input"), e["msg"])
        for e in error.errors(include_url=False)
    ]


# What a value should have been, by pydantic's kind of error (pydantic_core's ErrorType).
_SHOULD = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "none_required": "must be null",
    "literal_error": "must be {expected}",
    "string_too_long": "must be at most {max_length} characters",
    "too_short": "must have at least {min_length} items",
    "too_long": "must have at most {max_length} items",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
}
_SHOWN = ("int_", "float_", "bool_", "string_type", "literal_error")  # kinds that quote the value


def should(problem: Problem) -> str:
    """What was wrong with the value, as the end of a sentence that starts with its field."""
    kind, context = problem.kind, problem.context
    if kind == "string_too_short":
        short = context.get("min_length") == 1
        return "must not be empty" if short else "must be at least {min_length} characters"
    if kind == "string_pattern_mismatch":
        if context.get("pattern") == NOT_BLANK:  # a long class of characters: said in words
            return "must not be blank"
        return f"does not match {context.get('pattern')}"
    if kind == "literal_error" and isinstance(problem.given, bool):  # a flag with one value
        return f"cannot be {'true' if problem.given else 'false'}"
    template = _SHOULD.get(kind)
    if template is None:  # one of our own types' words (streams/apidoc/models.py), or pydantic's
        return problem.message[:1].lower() + problem.message[1:]
    text = template.format(**context)
    if kind.startswith(_SHOWN) and isinstance(problem.given, (str, int, float)):
        text += f", not {repr(problem.given)[:40]}"
    return text


def _explained(error: ValidationError, model: type[BaseModel], query: bool) -> Iterator[str]:
    """Our words for each problem: the unknown fields first, together, then one per field."""
    found = problems(error)
    unknown = [p for p in found if p.kind == "extra_forbidden"]
    top = sorted(str(p.path[-1]) for p in unknown if len(p.path) == 1)
    fields = ", ".join(model.model_fields)
    if top and query:
        yield f"unknown query parameter {top[0]!r}; use {fields}"
    elif top:
        yield f"unknown fields {top}; {getattr(model, 'what', 'the body')} takes {fields}"
    inner: dict[str, list[str]] = {}
    for p in unknown:
        if len(p.path) > 1:
            inner.setdefault(Problem(p.path[:-1], "", {}, None, "").field, []).append(
                str(p.path[-1])
            )
    for where, names in inner.items():
        yield f"unknown fields {sorted(names)} in {where}"
    name = "query parameter {}" if query else "{}"
    for p in found:
        if p.kind == "extra_forbidden":
            continue
        if not p.path:  # the model's own check (streams/routes/item_models.py `_Changes`)
            yield should(p)
        elif p.kind == "missing":
            yield f"{name.format(p.field)} is required"
        else:
            yield f"{name.format(p.field)} {should(p)}"


def invalid_input(
    error: ValidationError, model: type[BaseModel], *, query: bool = False
) -> ApiError:
    """The one answer to a request its model refused: 400 `invalid_input`, naming each field
    (`query`: each query parameter) and what was wrong with it."""
    return ApiError(400, "invalid_input", "; ".join(_explained(error, model, query)))
