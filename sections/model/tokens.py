"""Token counting: pluggable, and run once at write time. The count is stored in the record and
the counter's name and version in the session's `session.created`, so replay never re-counts,
and later writes to a session count with the counter it was created with.

The default is OpenAI's `o200k_base` BPE vocabulary (GPT-4o and later); `cl100k_base` (GPT-4,
GPT-3.5) is selectable, and `approx-chars-per-4`, the rule of thumb logs written before real
counting used, stays available. The BPE counts come from `quicktok`, whose wheels carry the
vocabularies compiled in: nothing is downloaded at run time. It was chosen over tiktoken (which
fetches its vocabularies over the network on first use) and bpe-openai by measurement: equal
counts on every text tried, 4-7x less CPU per count (docs/tokens.md, bench/token_counters.py).
"""

from __future__ import annotations

import threading
from typing import Protocol

import orjson

from eventstore.jcs import check_value
from sections.errors import ConfigError


class _Encoding(Protocol):  # a quicktok vocabulary
    def count(self, text: str) -> int: ...


class TokenCounter(Protocol):
    name: str
    version: str

    def count(self, content: object) -> int: ...


def _text(content: object) -> str:
    """What a counter counts: the string, or the compact JSON of any other content with its
    keys sorted, as the record stores it (JCS), so that the count depends on the value and not
    on the order a caller wrote its keys in (a BPE count would)."""
    if isinstance(content, str):
        return content
    return orjson.dumps(content, option=orjson.OPT_SORT_KEYS).decode()


class ApproxTokenCounter:
    """About four characters a token, the common rule of thumb for English text (several times
    off for CJK text and code: kept for logs written with it, and for tests of the rule)."""

    name = "approx-chars-per-4"
    version = "1"

    def count(self, content: object) -> int:
        return max(1, (len(_text(content)) + 3) // 4)


class BpeTokenCounter:
    """The tokens an OpenAI model would see: one of its BPE vocabularies, special tokens counted
    as the plain text they are. Every item costs at least one token, as with every counter.

    The vocabulary (a few MB) is loaded on the first count, once per process, under a lock: a
    process that never counts never pays for it, and `warm()` lets a service load it while it
    starts instead of during its first write."""

    def __init__(self, encoding: str) -> None:
        self.name = encoding
        self._encoding: _Encoding | None = None
        self._lock = threading.Lock()
        self.version = f"quicktok {_quicktok_version()}"

    def warm(self) -> _Encoding:
        encoding = self._encoding
        if encoding is None:
            with self._lock:
                encoding = self._encoding
                if encoding is None:
                    import quicktok

                    encoding = self._encoding = quicktok.get_encoding(self.name)
        return encoding

    def count(self, content: object) -> int:
        encoding = self._encoding
        if encoding is None:
            encoding = self.warm()
        return max(1, encoding.count(_text(content)))


def _quicktok_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("quicktok-v1")
    except PackageNotFoundError:  # pragma: no cover - a platform without its wheels
        return "unavailable"


APPROX = ApproxTokenCounter()
O200K = BpeTokenCounter("o200k_base")
CL100K = BpeTokenCounter("cl100k_base")
BUILT_IN: dict[str, TokenCounter] = {c.name: c for c in (O200K, CL100K, APPROX)}
DEFAULT_COUNTER: TokenCounter = O200K


def counter_named(name: str, extra: dict[str, TokenCounter] | None = None) -> TokenCounter:
    """The counter of that name: a built-in one, or one the embedding code registered."""
    found = (extra or {}).get(name) or BUILT_IN.get(name)
    if found is None:
        known = sorted({*BUILT_IN, *(extra or {})})
        raise ConfigError(f"unknown token counter {name!r}: use one of {', '.join(known)}")
    return found


def count_input(counter: TokenCounter, content: object) -> int:
    """Tokens of a caller's content, which is counted before its record's payload is checked:
    when the counter cannot serialize it (orjson refuses nesting beyond 255 levels with an
    untyped error), the payload rules say what is wrong instead (`TooDeep`, not JSON, ...)."""
    try:
        return counter.count(content)
    except (TypeError, ValueError, RecursionError):
        check_value(content)
        raise
