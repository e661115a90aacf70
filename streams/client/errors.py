"""The service's refusals as typed exceptions: one class per error code of the JSON body.

Every refusal of the service is `{"error": {"code", "message"}}` with a 4xx or 5xx status
(docs/service.md, "Errors"). `error_for` turns one into the class of its code; a code this client
does not know still gets the class of its status (`Conflict`, `Unavailable`...), so a newer server
never breaks an `except` written against an older one. Every error keeps the whole answer:
`status`, `code`, `message`, `body` (the parsed JSON, or None) and `headers`.
"""

from __future__ import annotations

import orjson


class ClientError(Exception):
    """Anything this client raises."""


class ConnectionFailed(ClientError):
    """The service could not be reached, or the connection broke, on every try (`tries`)."""

    def __init__(self, message: str, tries: int) -> None:
        super().__init__(message)
        self.tries = tries


class ChainBroken(ClientError):
    """A streamed record failed a check of its own bytes or of its link to the record before it
    (docs/client.md, "What a subscription checks"). `check` names the failed check."""

    def __init__(self, check: str, message: str, line: bytes | None = None) -> None:
        super().__init__(message)
        self.check = check
        self.line = line


class ApiError(ClientError):
    """A refusal from the service: `status`, `code`, `message`, `body`, `headers`."""

    status_code: int | None = None  # the status this class stands for (None: any)

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        body: object = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        self.headers = headers or {}

    @property
    def retry_after(self) -> float | None:
        """The `Retry-After` header in seconds, if the service sent one as a number."""
        return parse_retry_after(self.headers.get("retry-after"))


# One class per status: what an `except` catches when it does not care about the exact code.
class BadRequest(ApiError):
    status_code = 400


class Unauthorized(ApiError):
    status_code = 401


class Forbidden(ApiError):
    status_code = 403


class NotFound(ApiError):
    status_code = 404


class MethodNotAllowed(ApiError):
    status_code = 405


class RequestTimeout(ApiError):
    status_code = 408


class Conflict(ApiError):
    status_code = 409


class PayloadTooLarge(ApiError):
    status_code = 413


class UnsupportedMediaType(ApiError):
    status_code = 415


class MisdirectedRequest(ApiError):
    status_code = 421


class Unprocessable(ApiError):
    status_code = 422


class TooManyRequests(ApiError):
    status_code = 429


class Unavailable(ApiError):
    """503 or 507: the service cannot take the call now; `retry_after` says when to try again."""

    status_code = 503


class InsufficientStorage(Unavailable):
    status_code = 507


# One class per code (streams/web/errors.py, channels.py, guards.py, auth.py, api.py).
class InvalidInput(BadRequest): ...


class Refused(BadRequest): ...


class ClientGone(BadRequest): ...


class ForbiddenOrigin(Forbidden): ...


class SessionExists(Conflict): ...


class SessionEnded(Conflict): ...


class VersionConflict(Conflict):
    """A stale `If-Match`: the session moved on; reload it and decide again."""


class IdempotencyKeyReused(Conflict):
    """The Idempotency-Key was used before for a different call."""


class StalePosition(Conflict): ...


class ImmutableSection(Conflict): ...


class FactConflict(Conflict):
    """The memory's facts refuse it as they are: a source that is not a live item, a retraction
    at a time the fact is not valid."""


class UserConflict(Conflict):
    """The sessions' users refuse it: scope `user` from a session of no user."""


class BodyTooLarge(PayloadTooLarge): ...


class BatchTooLarge(PayloadTooLarge): ...


class UnknownHost(MisdirectedRequest): ...


class NotLeader(MisdirectedRequest): ...


class ItemTooLarge(Unprocessable): ...


class NotAdmitted(Unprocessable): ...


class BudgetExceeded(Unprocessable): ...


class CannotCompact(Unprocessable): ...


class SummarizerFailed(Unprocessable): ...


class ConflictingSettings(Unprocessable):
    """Section settings each valid that cannot work together (docs/sections.md)."""


class Busy(TooManyRequests): ...


class TooManySubscribers(TooManyRequests): ...


class ShuttingDown(Unavailable): ...


class NotReady(Unavailable): ...


class NoLeader(Unavailable): ...


class WriteFailed(Unavailable):
    """Writes are refused after a failed write until the service has reopened its log; the code
    names the cause (`io_error`, `too_many_open_files`, `read_only_storage`, `write_failed`,
    `unavailable`)."""


class DiskFull(InsufficientStorage): ...


class FileTooLarge(InsufficientStorage): ...


BY_CODE: dict[str, type[ApiError]] = {
    "invalid_input": InvalidInput,
    "refused": Refused,
    "client_gone": ClientGone,
    "unauthorized": Unauthorized,
    "forbidden": Forbidden,
    "forbidden_origin": ForbiddenOrigin,
    "not_found": NotFound,
    "method_not_allowed": MethodNotAllowed,
    "session_exists": SessionExists,
    "session_ended": SessionEnded,
    "version_conflict": VersionConflict,
    "idempotency_key_reused": IdempotencyKeyReused,
    "stale_position": StalePosition,
    "immutable_section": ImmutableSection,
    "fact_conflict": FactConflict,
    "user_conflict": UserConflict,
    "body_too_large": BodyTooLarge,
    "batch_too_large": BatchTooLarge,
    "unsupported_media_type": UnsupportedMediaType,
    "unknown_host": UnknownHost,
    "not_leader": NotLeader,
    "item_too_large": ItemTooLarge,
    "not_admitted": NotAdmitted,
    "budget_exceeded": BudgetExceeded,
    "cannot_compact": CannotCompact,
    "summarizer_failed": SummarizerFailed,
    "conflicting_settings": ConflictingSettings,
    "busy": Busy,
    "too_many_subscribers": TooManySubscribers,
    "shutting_down": ShuttingDown,
    "not_ready": NotReady,
    "no_leader": NoLeader,
    "unavailable": WriteFailed,
    "write_failed": WriteFailed,
    "io_error": WriteFailed,
    "too_many_open_files": WriteFailed,
    "read_only_storage": WriteFailed,
    "disk_full": DiskFull,
    "file_too_large": FileTooLarge,
}

BY_STATUS: dict[int, type[ApiError]] = {
    cls.status_code: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        RequestTimeout,
        Conflict,
        PayloadTooLarge,
        UnsupportedMediaType,
        MisdirectedRequest,
        Unprocessable,
        TooManyRequests,
        Unavailable,
        InsufficientStorage,
    )
}


def parse_retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the delay form; an HTTP date is ignored: the service never sends
    one, and a clock skew would turn it into nonsense)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def error_for(status: int, headers: dict[str, str], content: bytes) -> ApiError:
    """The typed error of a refusal. A body that is not the JSON error shape (a connection
    refused for the budget answers plain text) keeps the status class and the text."""
    body: object = None
    code, message = "http_error", content.decode("utf-8", "replace").strip()[:500]
    try:
        body = orjson.loads(content) if content else None
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = str(body["error"].get("code", code))
        message = str(body["error"].get("message", message))
    cls = BY_CODE.get(code)
    if cls is None or cls.status_code != status:
        cls = BY_STATUS.get(status, ApiError)  # a code we do not know, or not under this status
    return cls(status, code, message or f"HTTP {status}", body, headers)


__all__ = [
    name
    for name, value in list(globals().items())
    if isinstance(value, type) and issubclass(value, ClientError)
] + ["BY_CODE", "error_for", "parse_retry_after"]
