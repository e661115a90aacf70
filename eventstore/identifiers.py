"""Identifier rules of docs/format.md section 2."""

from __future__ import annotations

import re
from typing import TypeGuard

from .errors import InvalidIdentifier
from .record import CONTROL_TENANT

IDENTIFIER_PATTERN = r"[A-Za-z0-9._:@/+-]{1,128}"
# A full match is required: `$` would accept a trailing newline.
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)

__all__ = [
    "CONTROL_TENANT",
    "IDENTIFIER_PATTERN",
    "check_event_identifiers",
    "check_identifier",
    "is_identifier",
]


def is_identifier(value: object) -> TypeGuard[str]:
    return type(value) is str and _IDENTIFIER.fullmatch(value) is not None


def check_identifier(kind: str, value: object) -> str:
    if not is_identifier(value):
        raise InvalidIdentifier(
            f"{kind} {value!r} is not an identifier: use 1 to 128 characters of "
            "A-Z a-z 0-9 . _ : @ / + -"
        )
    return value


# Appends repeat a few identifier tuples; checking each once saves four regex matches a record.
_checked: set[tuple[str, str, str, str]] = set()
_CHECKED_MAX = 4096


def check_event_identifiers(tenant: str, session: str, section: str, type_: str) -> None:
    """Check the four identifiers of an event record; `_log` is reserved for control records."""
    key = (tenant, session, section, type_)
    if (
        type(tenant) is str
        and type(session) is str
        and type(section) is str
        and type(type_) is str
        and key in _checked
    ):
        return
    check_identifier("tenant", tenant)
    check_identifier("session", session)
    check_identifier("section", section)
    check_identifier("type", type_)
    if tenant == CONTROL_TENANT:
        raise InvalidIdentifier("tenant '_log' is reserved for the log's control records")
    if len(_checked) >= _CHECKED_MAX:
        _checked.clear()
    _checked.add(key)
