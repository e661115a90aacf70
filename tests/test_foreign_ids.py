"""Seed ids as log identifiers (sections/adapters/foreign_ids.py): any string round-trips."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eventstore.identifiers import is_identifier
from sections.adapters import foreign_ids


@given(st.text(min_size=1, max_size=200))
def test_any_id_becomes_an_identifier_and_comes_back(seed_id):
    log_id = foreign_ids.encode(seed_id)
    assert is_identifier(log_id)
    if foreign_ids.needs_original(seed_id):
        assert foreign_ids.decode(log_id) is None
        assert foreign_ids.decode(log_id, {foreign_ids.ORIGINAL_KEY: seed_id}) == seed_id
    else:
        assert foreign_ids.decode(log_id) == seed_id


@given(st.text(min_size=1, max_size=60), st.text(min_size=1, max_size=60))
def test_distinct_ids_stay_distinct(a, b):
    if a != b:
        assert foreign_ids.encode(a) != foreign_ids.encode(b)


def test_identifiers_are_themselves_and_str_subclasses_their_string():
    class MessageId(str):
        pass

    assert foreign_ids.encode("chat-1") == "chat-1"
    assert foreign_ids.encode(MessageId("chat-1")) == "chat-1"
    assert type(foreign_ids.encode(MessageId("chat 1"))) is str
    assert foreign_ids.encode("chat 1") == "+chat+201"
    assert foreign_ids.encode("+1") == "++2B1"  # the marker itself is escaped
    with pytest.raises(TypeError, match="must be a string"):
        foreign_ids.encode(12)  # type: ignore[arg-type]
