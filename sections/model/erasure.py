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
from sections.model.compaction import compacted_content
from sections.model.item import item_id, parse_item_id
from sections.model.state import SessionState

PERSONAL_FIELDS = ("content", "tags", "metadata", "extra")


def restate(payload: dict, keep_session_metadata: bool = False) -> dict:
    """The payload without anything that may hold personal data.

    A session's own metadata (its app and user ids, given at creation) is kept when only some of
    its items are erased: the session lives on with it. `erase_all` removes it with the rest.
    """
    out = {k: v for k, v in payload.items() if k != "metadata" or keep_session_metadata}
    if "items" in out and isinstance(out["items"], list):
        out["items"] = [_strip_item(i) for i in out["items"]]
    if "seed" in out:
        out["seed"] = {name: [_strip_item(i) for i in items] for name, items in out["seed"].items()}
    if "summary" in out:
        out["summary"] = {
            k: ({**v, "text": None} if k in ("first_user", "last_user") and v else v)
            for k, v in out["summary"].items()
        }
    if isinstance(out.get("compacted"), dict):  # item.added or section.compacted
        out["compacted"] = _strip_compaction(out["compacted"])
    if "set" in out:
        out["set"] = {
            k: (None if k == "content" else v)
            for k, v in out["set"].items()
            if k not in ("tags", "metadata")
        }
    return out


def _strip_compaction(compacted: dict) -> dict:
    """A compaction without the texts it wrote: the summary's and the cut tool outputs'."""
    out = dict(compacted)
    if isinstance(out.get("summary"), dict):
        out["summary"] = _strip_item(out["summary"])
    out["truncated"] = [{**cut, "content": None} for cut in out.get("truncated", ())]
    return out


def compaction_ids(payload: dict) -> set[str]:
    """The items whose content a compaction record set: its summary and its cut tool outputs.
    Erasing the record's content erases them too, as a batch's items go together."""
    compacted = payload.get("compacted")
    if not isinstance(compacted, dict):
        return set()
    ids = {cut["id"] for cut in compacted.get("truncated", ())}
    if isinstance(compacted.get("summary"), dict):
        ids.add(compacted["summary"]["id"])
    return ids


def _strip_item(item: dict) -> dict:
    stripped = {k: v for k, v in item.items() if k not in PERSONAL_FIELDS}
    stripped["content"] = None
    return stripped


def session_chain(
    head: int,
    get: Callable[[int], Record],
    payload_of: Callable[[Record], dict | None],
    stop_at: int = -1,
) -> list[tuple[Record, dict]]:
    """A session's records with their payloads, newest first, from record `head` down the
    `prev_seq` back-links to `stop_at`. An erased record's payload is its restatement, which
    keeps the back-link; the walk ends where neither exists."""
    chain = []
    seq: int | None = head
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
    """The seqs of records holding personal data of `ids`, and the full set of ids they hold.

    Grows to a fixed point: a batch record pulls in its other items, and their updates (any that
    set content, tags or metadata); a compaction record, the summary and the cut tool outputs
    it wrote.
    """
    ids = set(ids)
    # Summaries and cut tool outputs: their content is in the compaction record (added to
    # `seqs` by `_holds`), not in the record their id names, which is not pulled in for them.
    derived: set[str] = set()
    while True:
        seqs = {int(i.split(".")[0]) for i in ids - derived}
        for record, payload in chain:
            if _holds(record, payload, ids):
                seqs.add(record.seq)
        held = {
            item_id(record.seq, k)
            for record, payload in chain
            if record.seq in seqs
            for k in range(len(added_items(record, payload)))
        }
        rewritten = {i for r, p in chain if r.seq in seqs for i in compaction_ids(p)}
        if held <= ids and rewritten <= ids:
            return seqs, ids
        derived |= rewritten - ids - held
        ids |= held | rewritten


def _holds(record: Record, payload: dict, ids: set[str]) -> bool:
    """Whether a record other than an add holds personal data of `ids`: an update setting their
    content, tags or metadata, a session summary quoting them, or a compaction whose summary
    was made from them or that set their content."""
    compacted = payload.get("compacted")
    if isinstance(compacted, dict) and ids & (
        set(compacted.get("replaced", ())) | compaction_ids(payload)
    ):
        return True
    if record.type == "item.updated":
        return payload["id"] in ids and bool(set(payload["set"]) & set(PERSONAL_FIELDS))
    if record.type == "session.summarized":
        return bool(ids & set(payload.get("quotes", ())))
    return False


def content_in(record: Record, id_: str) -> object:
    """The content `record` set for item `id_` (None once the record was erased): how a content
    kept in the log, not in memory, is read back."""
    payload = record.payload
    if not isinstance(payload, dict):  # erased
        return None
    if record.type == "item.updated":
        return payload["set"]["content"]
    compacted = payload.get("compacted")
    if compacted:  # a summary or a cut tool output; the added items are under "items"
        found, content = compacted_content(compacted, id_)
        if found:
            return content
    return added_items(record, payload)[parse_item_id(id_)[1]]["content"]


def added_items(record: Record, payload: dict) -> list[dict]:
    """The items a record added, in id order (k), or [] for a record that adds none."""
    if record.type == "item.added":
        return payload.get("items", [])
    if record.type == "session.created":
        order = payload.get("order") or sorted(payload.get("seed", {}))
        return [i for name in order for i in payload.get("seed", {}).get(name, ())]
    return []
