"""Record times: `ts` is an integer of microseconds since the Unix epoch (UTC).

Arithmetic on times stays in integers: a float of microseconds near 2026 has a resolution of
about 0.24 µs and rounds, so windows and bounds computed through floats can be off by one.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from .errors import InvalidInput

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
_MICROS = re.compile(r"-?[0-9]{1,18}")  # ASCII digits only: "²" is a digit to str.isdigit


def parse_time(text: str) -> int:
    """Microseconds since the epoch, from an integer of microseconds or an ISO-8601 time (UTC if
    no offset is given)."""
    if _MICROS.fullmatch(text):
        return int(text)
    try:
        # RFC 3339 (section 5.6) allows "z" as well as "Z" for UTC; fromisoformat takes only "Z".
        moment = datetime.fromisoformat(text[:-1] + "Z" if text.endswith("z") else text)
    except (ValueError, OverflowError):
        raise InvalidInput(
            f"{text!r} is neither microseconds since the epoch nor an ISO-8601 time"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - EPOCH) // MICROSECOND
