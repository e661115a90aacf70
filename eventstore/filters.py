"""Record filters on tenant, session, section and type: the same on every channel (docs/wire.md)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol


class Addressed(Protocol):
    """What a filter reads of a record: its four names. A `Record` has them, and so has any
    lighter view of a line that parses only those (the replay CLI's, the fan-out's)."""

    @property
    def tenant(self) -> str: ...

    @property
    def session(self) -> str: ...

    @property
    def section(self) -> str: ...

    @property
    def type(self) -> str: ...


def _values(value: str | Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return frozenset((value,))
    values = frozenset(value)
    return values or None


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """A record matches when every given field matches one of its values."""

    tenant: frozenset[str] | None = None
    session: frozenset[str] | None = None
    section: frozenset[str] | None = None
    type: frozenset[str] | None = None

    @classmethod
    def of(
        cls,
        tenant: str | Iterable[str] | None = None,
        session: str | Iterable[str] | None = None,
        section: str | Iterable[str] | None = None,
        type: str | Iterable[str] | None = None,  # noqa: A002 - the record's field name
    ) -> RecordFilter:
        return cls(_values(tenant), _values(session), _values(section), _values(type))

    @property
    def is_empty(self) -> bool:
        return (
            self.tenant is None
            and self.session is None
            and self.section is None
            and self.type is None
        )

    def matches(self, record: Addressed) -> bool:
        return (
            (self.tenant is None or record.tenant in self.tenant)
            and (self.session is None or record.session in self.session)
            and (self.section is None or record.section in self.section)
            and (self.type is None or record.type in self.type)
        )


MATCH_ALL = RecordFilter()
