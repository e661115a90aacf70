"""Erasure (GDPR), pure parts: which records hold an item's content, and their content-free form.

Redaction removes a record's whole payload, so erasing one item erases every record that holds
its content: the record that added it (and so every other item that record added: a batch is one
record) and every update that set its content. The `items.erased` record keeps a restatement of
each redacted record without content, tags, metadata or rendering fields, so that replay still
applies its structure (ids, tokens, groups, victims) and rebuilt state equals live state.
"""

from __future__ import annotations

from collections.abc import Callable

from eventstore.record import Record

from .state import SessionState

PERSONAL_FIELDS = ("content", "tags", "metadata", "extra")


def restate(payload: dict) -> dict:
    """The payload without anything that may hold personal data."""
    out = {k: v for k, v in payload.items() if k != "metadata"}
    if "items" in out and isinstance(out["items"], list):
        out["items"] = [_strip_item(i) for i in out["items"]]
    if "seed" in out:
        out["seed"] = {name: [_strip_item(i) for i in items] for name, items in out["seed"].items()}
    if "set" in out:
        out["set"] = {
            k: (None if k == "content" else v)
            for k, v in out["set"].items()
            if k not in ("tags", "metadata")
        }
    return out


def _strip_item(item: dict) -> dict:
    stripped = {k: v for k, v in item.items() if k not in PERSONAL_FIELDS}
    stripped["content"] = None
    return stripped


def session_chain(
    session: SessionState,
    get: Callable[[int], Record],
    payload_of: Callable[[Record], dict | None],
    stop_at: int = -1,
) -> list[tuple[Record, dict]]:
    """The session's records with their payloads, newest first, following the `prev_seq`
    back-links down to `stop_at`. An erased record's payload is its restatement, which keeps
    the back-link; the walk ends where neither exists."""
    chain = []
    seq = session.last_seq
    while seq is not None and seq > stop_at:
        record = get(seq)
        payload = payload_of(record)
        if payload is None:
            break
        chain.append((record, payload))
        seq = payload.get("prev_seq")
    return chain


def records_holding(
    session: SessionState, ids: set[str], chain: list[tuple[Record, dict]]
) -> tuple[set[int], set[str]]:
    """The seqs of records holding the content of `ids`, and the full set of ids they hold.

    Grows to a fixed point: a batch record pulls in its other items, and their updates.
    """
    ids = set(ids)
    while True:
        seqs = {int(i.split(".")[0]) for i in ids}
        for record, payload in chain:
            if (
                record.type == "item.updated"
                and payload["id"] in ids
                and "content" in payload["set"]
            ):
                seqs.add(record.seq)
        live = {
            item.id
            for section in session.sections.values()
            for item in section.items.values()
            if item.seq in seqs
        }
        if live <= ids:
            return seqs, ids
        ids |= live
