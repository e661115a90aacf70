"""Errors as HTTP answers: every refusal is a 4xx with `{"error": {"code", "message"}}` (wire.md)."""

from __future__ import annotations

import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from eventstore.errors import InvalidInput, LedgerError, StalePosition, WriterClosed
from sections.errors import (
    BudgetExceeded,
    IdempotencyConflict,
    ImmutableSection,
    ItemTooLarge,
    NotAdmitted,
    NotFound,
    SessionEnded,
    SessionExists,
    VersionConflict,
)

from .responses import json_response

log = logging.getLogger("ledgermem.http")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


# Most specific first.
_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (NotFound, 404, "not_found"),
    (SessionExists, 409, "session_exists"),
    (SessionEnded, 409, "session_ended"),
    (VersionConflict, 409, "version_conflict"),
    (IdempotencyConflict, 409, "idempotency_key_reused"),
    (StalePosition, 409, "stale_position"),
    (ImmutableSection, 409, "immutable_section"),
    (ItemTooLarge, 422, "item_too_large"),
    (NotAdmitted, 422, "not_admitted"),
    (BudgetExceeded, 422, "budget_exceeded"),
    (InvalidInput, 400, "invalid_input"),
    (WriterClosed, 503, "unavailable"),
)


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> Response:
    return json_response({"error": {"code": code, "message": message}}, status, headers)


def from_exception(exc: BaseException) -> Response:
    for kind, status, code in _STATUS:
        if isinstance(exc, kind):
            return error_response(status, code, str(exc))
    if isinstance(exc, LedgerError):
        return error_response(400, "refused", str(exc))
    raise exc


async def handle_api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message)


async def handle_ledger_error(request: Request, exc: Exception) -> Response:
    return from_exception(exc)


async def handle_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), exc.headers)


EXCEPTION_HANDLERS = {
    ApiError: handle_api_error,
    LedgerError: handle_ledger_error,
    HTTPException: handle_http_exception,
}
