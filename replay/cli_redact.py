"""`ledgermem redact --data DIR --seq N... --reason R`: erase payloads by seq, offline (GDPR).

The log's own writer does it (docs/format.md section 9): a `redaction` record, a checkpoint
re-signed with the data directory's key, the segments rewritten without the payloads. Then the
snapshots and the reader's indexes are purged, since snapshots may hold the erased content, and
the log is closed (`log.close`, a final checkpoint). It takes the writer lock, so it refuses while
the service runs: the service erases through its API instead.

A raw redaction removes a whole payload. Memory records (`item.added`, ...) are refused unless
`--force` is given: `ledgermem erase` first records a content-free restatement of them, so that
replay keeps the erased items' structure, while after a raw redaction replay skips the record
whole and a later record about the same item may no longer apply.
"""

from __future__ import annotations

import argparse
import shutil

from eventstore import layout
from eventstore.errors import InvalidInput, LockHeld
from eventstore.reader import LogReader
from eventstore.store import KeyInfo, open_log
from eventstore.writer import LogWriter
from sections.model.projection import HANDLERS
from sections.runtime.snapshot import purge_snapshots


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, metavar="DIR", help="the data directory")
    parser.add_argument(
        "--seq", required=True, type=int, nargs="+", metavar="N", help="the records to redact"
    )
    parser.add_argument("--reason", required=True, help="why (kept in the log: no personal data)")
    parser.add_argument(
        "--request", metavar="ID", help="the erasure request's id (kept in the log)"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="redact memory records too (item.added, ...): replay then skips them whole, and "
        "records that refer to them may no longer apply; `ledgermem erase` is the safe way",
    )


def run(args: argparse.Namespace) -> int:
    data = open_data_dir(args.data)
    check_targets(data, args.seq, args.force)  # before the writer appends log.resume
    writer, _ = open_writer(data)
    try:
        redaction = writer.redact(args.seq, args.reason, args.request)
        purge_derived(data)
    finally:
        writer.close()
    seqs = ", ".join(str(s) for s in sorted(set(args.seq)))
    print(f"redacted seq {seqs} by the redaction record at seq {redaction.seq}")
    return 0


def open_data_dir(path: str) -> layout.DataDir:
    data = layout.DataDir(path)
    first = data.log / layout.segment_name(0)
    if not first.is_file():
        raise InvalidInput(f"{path} holds no log: {first} does not exist")
    if not data.signing_key.is_file():
        raise InvalidInput(
            f"{data.signing_key} does not exist: the checkpoint must be re-signed with the "
            "log's key, so redaction needs the data directory, not a copy of the log"
        )
    return data


def open_writer(data: layout.DataDir) -> tuple[LogWriter, KeyInfo]:
    try:
        return open_log(data.root, create=False)
    except LockHeld as exc:
        raise LockHeld(f"{exc}; a running service erases through its API instead") from None


def check_targets(data: layout.DataDir, seqs: list[int], force: bool) -> None:
    """Refuse, before anything is appended, targets that are not redactable records.

    Memory records need `erase` unless forced: a raw redaction drops their structure from
    replay, and a later record about the same item (an update, a removal) may then fail to apply
    when the service starts. Records never change type, so reading without the lock is sound.
    """
    reader = LogReader(data.log)
    head = reader.head()
    for seq in sorted(set(seqs)):
        if not 0 <= seq <= head:
            raise InvalidInput(f"{data.log}: cannot redact seq {seq}: the log holds seqs 0..{head}")
        record = reader.get(seq)
        where = f"{layout.segment_name(seq >> reader.seg_bits)}: seq {seq}"
        if record.is_control:
            raise InvalidInput(
                f"{where} is a control record ({record.type}): it cannot be redacted"
            )
        if not record.has_payload:
            raise InvalidInput(f"{where} is already redacted (by seq {record.redacted})")
        if record.type in HANDLERS and not force:
            raise InvalidInput(
                f"{where} is a memory record ({record.type} of session {record.session!r}): use "
                "`ledgermem erase`, which keeps its structure for replay, or --force to redact "
                "the payload raw"
            )


def purge_derived(data: layout.DataDir) -> None:
    """Delete what may hold erased content beside the log: snapshots, and the reader's indexes
    (offsets only, but of the old segment files: rebuilt on demand)."""
    purge_snapshots(data.root / "snapshots")
    shutil.rmtree(data.root / "index", ignore_errors=True)


__all__ = ["open_data_dir", "open_writer", "purge_derived"]
