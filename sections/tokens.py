"""Token counting: pluggable, and run once at write time. The count is stored in the record and
the counter's name and version in the session's config record, so replay never re-counts."""

from __future__ import annotations

from typing import Protocol

import orjson

from eventstore.jcs import check_value


class TokenCounter(Protocol):
    name: str
    version: str

    def count(self, content: object) -> int: ...


class ApproxTokenCounter:
    """About four characters a token, the common rule of thumb for English text.

    It needs no model files (nothing may be downloaded at run time). JSON content is counted on
    its compact serialization. Every item costs at least one token.
    """

    name = "approx-chars-per-4"
    version = "1"

    def count(self, content: object) -> int:
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        return max(1, (len(text) + 3) // 4)


DEFAULT_COUNTER = ApproxTokenCounter()


def count_input(counter: TokenCounter, content: object) -> int:
    """Tokens of a caller's content, which is counted before its record's payload is checked:
    when the counter cannot serialize it (orjson refuses nesting beyond 255 levels with an
    untyped error), the payload rules say what is wrong instead (`TooDeep`, not JSON, ...)."""
    try:
        return counter.count(content)
    except (TypeError, ValueError, RecursionError):
        check_value(content)
        raise
