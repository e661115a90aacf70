"""Who is calling: the tenant and scopes of an API token (wire.md, Credentials).

A token may come as `Authorization: Bearer <token>`, a `token` query parameter, or a
`ledgermem_token` cookie (browsers' EventSource cannot send headers). With no tokens configured every caller is
tenant `default` with every scope, and the service listens on loopback only unless told
otherwise. The tenant always comes from the token, never from the request.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from starlette.requests import HTTPConnection

from .errors import ApiError
from .settings import DEFAULT_TENANT, SCOPES, Settings

COOKIE = "ledgermem_token"


@dataclass(frozen=True)
class Principal:
    tenant: str
    scopes: frozenset[str]

    def require(self, scope: str) -> None:
        if scope not in self.scopes:
            raise ApiError(403, "forbidden", f"this token lacks the '{scope}' scope")


OPEN = Principal(DEFAULT_TENANT, frozenset(SCOPES))


def presented_token(conn: HTTPConnection) -> str | None:
    header = conn.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return conn.query_params.get("token") or conn.cookies.get(COOKIE)


def authenticate(conn: HTTPConnection, settings: Settings) -> Principal:
    if not settings.tokens:
        return OPEN
    given = presented_token(conn)
    if given:
        for token in settings.tokens:
            if hmac.compare_digest(token.token.encode(), given.encode()):
                return Principal(token.tenant, token.scopes)
    raise ApiError(
        401,
        "unauthorized",
        "a valid API token is required (Bearer header, token parameter or cookie)",
    )
