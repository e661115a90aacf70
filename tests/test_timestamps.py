"""eventstore/timestamps.py `parse_time`: the times every HTTP parameter and body takes
(`since`, `until`, `as_of`, `valid_from`): µs since the epoch, or an RFC 3339 / ISO-8601 time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventstore.errors import InvalidInput
from eventstore.timestamps import parse_time

NEW_YEAR = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:00:00z",  # RFC 3339 5.6: "t" and "z" may be lower case
        "2026-01-01t00:00:00z",
        "2026-01-01T01:00:00+01:00",
        "2026-01-01T00:00:00",  # no offset: UTC
        str(NEW_YEAR),
    ],
)
def test_each_form_of_one_moment(text):
    assert parse_time(text) == NEW_YEAR


@pytest.mark.parametrize("text", ["", "yesterday", "2026-13-01T00:00:00Z", "1e6", "0x10"])
def test_what_is_no_time_is_refused_with_the_text(text):
    with pytest.raises(InvalidInput, match="neither microseconds"):
        parse_time(text)


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    st.integers(-14 * 60, 14 * 60),
)
def test_an_isoformat_time_in_any_offset_is_its_moment(moment, minutes):
    shifted = moment.astimezone(timezone(timedelta(minutes=minutes)))
    expected = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert parse_time(shifted.isoformat()) == expected
