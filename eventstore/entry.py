"""Entries: records to append, checked before they get a seq."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import InvalidPayload
from .identifiers import CONTROL_TENANT, check_event_identifiers
from .jcs import canonical
from .record import MAX_LINE_BYTES

# A line is at most 16 MiB; the envelope (identifiers up to 128 bytes, hashes) stays under 1 KiB.
MAX_PAYLOAD_BYTES = MAX_LINE_BYTES - 1024


class Entry:
    """One record to append, already checked: identifiers valid, payload in JCS form."""

    __slots__ = ("tenant", "session", "section", "type", "payload", "jcs", "_ident")

    def __init__(self, tenant: str, session: str, section: str, type_: str, payload: object):
        check_event_identifiers(tenant, session, section, type_)
        self.tenant, self.session, self.section, self.type = tenant, session, section, type_
        self.payload = payload
        self.jcs = canonical(payload)
        if len(self.jcs) > MAX_PAYLOAD_BYTES:
            raise InvalidPayload(
                f"the payload is {len(self.jcs)} bytes in JCS form; a record's line is at most 16 MiB, "
                f"so payloads are limited to {MAX_PAYLOAD_BYTES} bytes: keep large data outside the log"
            )

    @classmethod
    def control(cls, type_: str, payload: dict) -> Entry:
        entry = cls.__new__(cls)
        entry.tenant = entry.session = entry.section = CONTROL_TENANT
        entry.type, entry.payload, entry.jcs = type_, payload, canonical(payload)
        return entry


def as_entry(item: Entry | Sequence) -> Entry:
    return item if isinstance(item, Entry) else Entry(*item)
