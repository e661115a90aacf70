"""Errors as HTTP answers: every refusal is a 4xx with `{"error": {"code", "message"}}` (docs/wire.md)."""

from __future__ import annotations

import errno
import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from eventstore.errors import InvalidInput, LedgerError, StalePosition, WriterClosed
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
    VersionConflict,
)
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
    return error_response(exc.status_code, code, str(exc.detail), exc.headers)


EXCEPTION_HANDLERS = {
    ApiError: handle_api_error,
    LedgerError: handle_ledger_error,
    HTTPException: handle_http_exception,
}
