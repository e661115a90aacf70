"""The signature one replica puts on a request it forwards to another (pure: no I/O, no clock).

A replica that is not the leader of a tenant's partition forwards the caller's request to the
leader. The leader cannot check the caller's token again for free (it may not even be sent on),
so the forwarder says who the caller is in `x-ledgermem-forwarded-principal` and proves that it
is a replica by an HMAC-SHA256 under the secret the replicas share:

    sig = HMAC-SHA256(secret, METHOD "\\n" target "\\n" principal "\\n" timestamp), hex

`target` is the raw path, plus `?` and the raw query when there is one (the bytes the caller sent,
percent-encoding intact). `principal` is `<tenant>:<scope>,<scope>...` (scopes sorted; the tenant
may itself hold `:`, the scopes never do, so it splits at the last one). `timestamp` is integer
unix seconds; a signature older than `MAX_AGE` seconds, or more than `MAX_AGE` in the future (a
skewed clock), is refused, which bounds how long a captured request can be replayed.

A request carrying any of these headers without a valid signature is refused whole: the
principal in it is never believed, and it never falls back to the token (streams/web/auth.py).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

PRINCIPAL_HEADER = "x-ledgermem-forwarded-principal"
SIG_HEADER = "x-ledgermem-forwarded-sig"
AT_HEADER = "x-ledgermem-forwarded-at"
HEADERS = (PRINCIPAL_HEADER, SIG_HEADER, AT_HEADER)
MAX_AGE = 30  # seconds a forwarded request's signature stays good, either way of now
MIN_SECRET_BYTES = 16

_SCOPE = re.compile(r"[a-z]+")
_HEX = re.compile(r"[0-9a-f]{64}")
_SECONDS = re.compile(r"[0-9]{1,12}")


class ForwardRefused(Exception):
    """Why a forwarded request's principal is not believed (said in the 401's message)."""


@dataclass(frozen=True)
class Forwarded:
    tenant: str
    scopes: frozenset[str]


def encode_principal(tenant: str, scopes: frozenset[str] | set[str]) -> str:
    return f"{tenant}:{','.join(sorted(scopes))}"


def decode_principal(text: str) -> Forwarded:
    tenant, colon, scopes = text.rpartition(":")
    if not colon or not tenant:
        raise ForwardRefused("the forwarded principal is not <tenant>:<scopes>")
    names = frozenset(s for s in scopes.split(",") if s)
    if not all(_SCOPE.fullmatch(s) for s in names):
        raise ForwardRefused("the forwarded principal's scopes are malformed")
    return Forwarded(tenant, names)


def request_target(raw_path: bytes, query_string: bytes) -> str:
    """The signed form of where the request goes: path, and `?query` when there is a query."""
    path = raw_path.decode("latin-1")
    return f"{path}?{query_string.decode('latin-1')}" if query_string else path


def signature(secret: bytes, method: str, target: str, principal: str, timestamp: int) -> str:
    message = f"{method.upper()}\n{target}\n{principal}\n{timestamp}".encode("latin-1")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def sign(
    secret: bytes, method: str, target: str, tenant: str, scopes: frozenset[str], now: float
) -> dict[str, str]:
    """The three headers a forwarder adds to a request for `tenant` with `scopes`."""
    principal = encode_principal(tenant, scopes)
    timestamp = int(now)
    return {
        PRINCIPAL_HEADER: principal,
        SIG_HEADER: signature(secret, method, target, principal, timestamp),
        AT_HEADER: str(timestamp),
    }


def verify(
    secret: bytes | None,
    method: str,
    target: str,
    headers: dict[str, str],
    now: float,
    max_age: float = MAX_AGE,
) -> Forwarded:
    """The forwarded principal, if `headers` hold a valid, fresh signature of this request.

    Raises ForwardRefused otherwise, with no secret configured too: then this replica takes no
    forwarded requests at all.
    """
    if secret is None:
        raise ForwardRefused(
            "forwarded requests are refused: this replica has no replica secret configured"
        )
    principal = headers.get(PRINCIPAL_HEADER)
    sig = headers.get(SIG_HEADER)
    at = headers.get(AT_HEADER)
    if principal is None or sig is None or at is None:
        raise ForwardRefused(f"a forwarded request needs all of {', '.join(HEADERS)}")
    if not _SECONDS.fullmatch(at):
        raise ForwardRefused(f"{AT_HEADER} must be integer unix seconds")
    if not _HEX.fullmatch(sig):
        raise ForwardRefused(f"{SIG_HEADER} must be 64 lowercase hex digits")
    try:
        expected = signature(secret, method, target, principal, int(at))
    except UnicodeEncodeError:
        raise ForwardRefused("the forwarded principal is not latin-1 text") from None
    if not hmac.compare_digest(expected, sig):
        raise ForwardRefused("the forwarded request's signature does not match")
    # Checked only after the signature, so an unsigned request learns nothing about our clock.
    if abs(now - int(at)) > max_age:
        raise ForwardRefused(
            f"the forwarded request's signature is {int(now) - int(at)} s old; "
            f"at most {max_age:g} s either way is accepted"
        )
    return decode_principal(principal)
