"""What changed in memory between two points of a log, with the reason for every removal.

The net change compares the projection at A with the projection at B: items present only at B
were added, items present at both whose content, tags, priority, metadata, kind or role differ
were updated, items present only at A left, and the records in (A, B] say why each one left:
evicted by a policy, removed, cleared at the end of a turn or by a restart, erased, or gone with
a deleted or erased session. Items both added and gone inside (A, B] are counted as transient.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from eventstore.record import Record
from sections.model.item import Item
from sections.model.state import MemoryState

# Whether a session's items are compared: (tenant, session id) -> wanted.
KeyFilter = Callable[[str, str], bool]
# A record's payload as the state saw it (History.payload_of: a large content read back).
PayloadOf = Callable[[Record], dict | None]

_COMPARED = ("content", "content_seq", "tags", "priority", "metadata", "kind", "role", "group")


def _items(
    state: MemoryState, key_filter: KeyFilter
) -> dict[tuple[str, str, str], tuple[str, Item]]:
    found = {}
    for (tenant, sid), session in state.sessions.items():
        if not key_filter(tenant, sid):
            continue
        for name, section in session.sections.items():
            for item in section.items.values():
                found[(tenant, sid, item.id)] = (name, item)
    return found


def _departures(
    records: Iterable[Record], payload_of: PayloadOf
) -> dict[tuple[str, str, str], dict]:
    """For every item that left in these records, the last reason and the seq it left at."""
    gone: dict[tuple[str, str, str], dict] = {}
    for record in records:
        payload = payload_of(record)
        if payload is None or record.is_control:
            continue
        key = (record.tenant, record.session)
        kind = record.type
        if kind in ("item.added", "item.updated", "section.configured"):
            for victim in payload.get("evicted", ()):
                gone[(*key, victim["id"])] = {
                    "why": "evicted",
                    "reason": victim["reason"],
                    "seq": record.seq,
                }
        compacted = payload.get("compacted")
        if isinstance(compacted, dict):  # replaced by a summary, which took the first one's id
            summary = compacted.get("summary") or {}
            for id_ in compacted.get("replaced", ()):
                if id_ != summary.get("id"):
                    gone[(*key, id_)] = {
                        "why": "compacted",
                        "reason": compacted.get("reason"),
                        "seq": record.seq,
                    }
        if kind in ("item.removed", "items.erased", "turn.ended", "sections.cleared"):
            ids = payload.get("items") if kind != "turn.ended" else payload.get("cleared")
            why = {
                "item.removed": "removed",
                "items.erased": "erased",
                "turn.ended": "turn ended",
            }.get(kind, payload.get("reason", "cleared"))
            for ids_of_section in (ids or {}).values():
                for id_ in ids_of_section:
                    gone[(*key, id_)] = {
                        "why": why,
                        "reason": payload.get("reason"),
                        "seq": record.seq,
                    }
        elif kind in ("session.deleted", "session.erased"):
            gone[(*key, "*")] = {
                "why": kind.split(".")[1],
                "reason": payload.get("reason"),
                "seq": record.seq,
            }
    return gone


def diff(
    before: MemoryState,
    after: MemoryState,
    window: Iterable[Record],
    payload_of: PayloadOf,
    key_filter: KeyFilter,
) -> dict:
    a = _items(before, key_filter)
    b = _items(after, key_filter)
    departures = _departures(window, payload_of)
    report: dict[str, dict[str, list]] = {}

    def bucket(key: tuple[str, str, str]) -> dict[str, list]:
        return report.setdefault(
            f"{key[0]}/{key[1]}",
            {"added": [], "updated": [], "removed": [], "evicted": [], "transient": []},
        )

    for key, (section, item) in b.items():
        if key not in a:
            bucket(key)["added"].append({"id": item.id, "section": section, "seq": item.seq})
        else:
            old = a[key][1]
            changed = [f for f in _COMPARED if getattr(old, f) != getattr(item, f)]
            if changed:
                bucket(key)["updated"].append(
                    {"id": item.id, "section": section, "fields": changed}
                )
    for key, (section, item) in a.items():
        if key in b:
            continue
        why = (
            departures.get(key)
            or departures.get((key[0], key[1], "*"))
            or {"why": "unknown", "seq": None}
        )
        entry = {"id": item.id, "section": section, "seq": why["seq"], "reason": why.get("reason")}
        if why["why"] == "evicted":
            bucket(key)["evicted"].append(entry)
        else:
            entry["how"] = why["why"]
            bucket(key)["removed"].append(entry)
    for key, why in departures.items():
        if key[2] != "*" and key not in a and key not in b and key_filter(key[0], key[1]):
            bucket(key)["transient"].append({"id": key[2], "left": why["why"], "seq": why["seq"]})
    return report
